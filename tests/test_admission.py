"""The admission webhook: AdmissionReview v1 in the shapes of the Kubernetes documentation,
decided from the in-memory snapshot, over real HTTPS against a running `gpuledger serve`."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import ROOT, serving

from collector.records import TenantRule
from collector.tenancy import TenantMapper
from scheduler_hooks.admission import PRIORITY_LABEL, AdmissionRules, parse_review, review
from scheduler_hooks.snapshot import IdleGpu, Snapshot, TenantState

IDLE = TenantState(idle=(IdleGpu("GPU-a", "n1", "sq-1", 185.0),))
SNAP = Snapshot(
    built_at_s=1000.0,
    tenants={"team-a/train": IDLE, "team-c/x": TenantState(IDLE.idle, priority_class="lowest")},
    mapper=TenantMapper(
        [
            TenantRule("namespace", "team-a", "team-a/train", 10),
            TenantRule("namespace", "team-b", "team-b/serve", 10),
            TenantRule("namespace", "team-c", "team-c/x", 10),
        ]
    ),
)


def _gpu_pod_spec(gpus: int = 1) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}


def _request(kind: str, namespace: str, *, gpus: int = 1, labels: dict[str, str] | None = None,
             uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002") -> dict[str, Any]:  # fmt: skip
    group, version, spec = {
        "Pod": ("", "v1", _gpu_pod_spec(gpus)),
        "Job": ("batch", "v1", {"template": {"spec": _gpu_pod_spec(gpus)}, "parallelism": 2}),
        "Workload": (
            "kueue.x-k8s.io",
            "v1beta2",
            {"podSets": [{"name": "main", "count": 4, "template": {"spec": _gpu_pod_spec(gpus)}}]},
        ),
    }[kind]
    meta: dict[str, Any] = {"name": "train-7", "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": f"{group}/{version}".lstrip("/"), "kind": kind,
                       "metadata": meta, "spec": spec},
        },
    }  # fmt: skip


def _decide(doc: dict[str, Any], rules: AdmissionRules, now_s: float = 1010.0) -> Any:
    return review(parse_review(json.dumps(doc).encode()), SNAP, rules, now_s=now_s)


def test_warn_names_the_idle_gpus_and_echoes_the_uid() -> None:
    d = _decide(_request("Job", "team-a"), AdmissionRules(default="warn"))
    answer = d.response()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    r = answer["response"]
    assert r["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002" and r["allowed"] is True
    assert "GPU-a on n1 (job sq-1, idle 185 min)" in r["warnings"][0]
    assert "patch" not in r and d.tenant == "team-a/train" and d.actor == "alice"


def test_deny_says_which_gpus_are_idle_and_how_to_free_them() -> None:
    r = _decide(_request("Pod", "team-a"), AdmissionRules(default="deny")).response()["response"]
    assert r["allowed"] is False and r["status"]["code"] == 403
    assert "GPU-a" in r["status"]["message"] and "Free them first" in r["status"]["message"]


@pytest.mark.parametrize("labels", [None, {"app": "x"}])
def test_deprioritise_patches_the_kueue_label_of_jobs_and_workloads(
    labels: dict[str, str] | None,
) -> None:
    rules = AdmissionRules(default="deprioritise", low_priority_class="low")
    for kind in ("Job", "Workload"):
        r = _decide(_request(kind, "team-a", labels=labels), rules).response()["response"]
        assert r["allowed"] is True and r["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(r["patch"]))
        doc = {"metadata": {"labels": labels}} if labels is not None else {"metadata": {}}
        for op in patch:  # apply it as the API server would (op "add" sets or replaces)
            assert op["op"] == "add"
            parts = [p.replace("~1", "/") for p in op["path"].strip("/").split("/")]
            target = doc
            for p in parts[:-1]:
                target = target[p]
            target[parts[-1]] = op["value"]
        assert doc["metadata"]["labels"][PRIORITY_LABEL] == "low"
        if labels:
            assert doc["metadata"]["labels"]["app"] == "x"  # other labels kept
    # the priority feedback's class wins over the default low one
    r = _decide(_request("Job", "team-c"), rules).response()["response"]
    assert json.loads(base64.b64decode(r["patch"]))[0]["value"] == {PRIORITY_LABEL: "lowest"}


def test_a_bare_pod_is_warned_not_patched() -> None:
    d = _decide(_request("Pod", "team-a"), AdmissionRules(default="deprioritise"))
    assert d.action == "warn" and not d.patch and d.allowed


def test_what_is_allowed_without_a_word() -> None:
    warn = AdmissionRules(default="warn")
    assert _decide(_request("Job", "team-b"), warn).action == "allow"  # nothing idle
    assert _decide(_request("Job", "nobody"), warn).action == "no_tenant"
    assert _decide(_request("Job", "team-a", gpus=0), warn).action == "not_gpu"
    exempt = AdmissionRules(default="deny", exempt=frozenset({"team-a"}))
    assert _decide(_request("Job", "team-a"), exempt).allowed
    per_tenant = AdmissionRules(default="deny", tenants={"team-a/train": "warn"})
    assert _decide(_request("Job", "team-a"), per_tenant).action == "warn"


def test_a_stale_or_missing_snapshot_fails_open_and_says_so() -> None:
    rules = AdmissionRules(default="deny", max_age_s=60)
    stale = _decide(_request("Job", "team-a"), rules, now_s=1000.0 + 61)
    assert stale.allowed and stale.action == "fail_open" and "61 s old" in stale.warnings[0]
    none = review(parse_review(json.dumps(_request("Job", "team-a")).encode()), None, rules,
                  now_s=0.0)  # fmt: skip
    assert none.allowed and none.action == "fail_open"


def test_workload_gpus_count_every_pod() -> None:
    from scheduler_hooks.admission import gpus_requested

    obj = _request("Workload", "team-a", gpus=2)["request"]["object"]
    assert gpus_requested("Workload", obj, ("nvidia.com/gpu",)) == 8
    job = _request("Job", "team-a", gpus=2)["request"]["object"]
    assert gpus_requested("Job", job, ("nvidia.com/gpu",)) == 4
    mig = {"spec": {"containers": [{"resources": {"requests": {"nvidia.com/mig-1g.10gb": 1}}}]}}
    assert gpus_requested("Pod", mig, ("nvidia.com/mig-*",)) == 1


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import trustme

    d = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = {"chain": d / "chain.pem", "key": d / "key.pem", "ca": d / "ca.pem"}
    cert.private_key_pem.write_to_path(str(files["key"]))
    files["chain"].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(files["ca"]))
    return files


def test_over_https_against_a_running_serve(
    tmp_path: Path, tls: dict[str, Path], gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    filled = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "admission_fixture.py"), str(data)],
        env=cli_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert filled.returncode == 0, filled.stderr
    env = {
        **cli_env,
        "GPULEDGER_SERVER__TLS_CERT_FILE": str(tls["chain"]),
        "GPULEDGER_SERVER__TLS_KEY_FILE": str(tls["key"]),
        "GPULEDGER_ADMISSION__TENANT_POLICIES": "team-a=deny",
        "GPULEDGER_ADMISSION__REFRESH_S": "1",
    }
    ca = str(tls["ca"])
    with serving(gpuledger_cmd, env, data, tls_ca=tls["ca"]) as url:
        deadline = time.monotonic() + 60
        while True:  # the first snapshot is built in the background
            got = requests.post(f"{url}/admission", json=_request("Job", "team-a"), verify=ca,
                                timeout=10).json()["response"]  # fmt: skip
            if got.get("status") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert got["allowed"] is False and "GPU-a" in got["status"]["message"]
        busy = requests.post(f"{url}/admission", json=_request("Job", "team-b"), verify=ca,
                             timeout=10).json()["response"]  # fmt: skip
        assert busy["allowed"] is True and "warnings" not in busy
        for body, why in (
            (b"{not json", "not JSON"),
            (b"[]", "not an AdmissionReview"),
            (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                         "request": {"uid": "u"}}).encode(), "admission.k8s.io/v1"),
            (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', "uid"),
            (b"[" * 100_000, "not JSON"),
            (b" " * (4 << 20), "more than"),
        ):  # fmt: skip
            bad = requests.post(f"{url}/admission", data=body, verify=ca, timeout=30,
                                headers={"Content-Type": "application/json"})  # fmt: skip
            assert bad.status_code == 400 and why in bad.json()["error"], (why, bad.text[:200])
        # without a Content-Length (chunked), the limit holds while reading and a review passes
        chunks = (b" " * (1 << 20) for _ in range(4))
        bad = requests.post(f"{url}/admission", data=chunks, verify=ca, timeout=30)
        assert bad.status_code == 400 and "longer than" in bad.json()["error"], bad.text[:200]
        piece = json.dumps(_request("Job", "team-b")).encode()
        ok = requests.post(f"{url}/admission", data=iter([piece[:10], piece[10:]]), verify=ca,
                           timeout=10)  # fmt: skip
        assert ok.status_code == 200 and ok.json()["response"]["allowed"] is True
        wrong = requests.get(f"{url}/admission", verify=ca, timeout=10)
        assert wrong.status_code == 405 and wrong.headers["Allow"] == "POST"
        time.sleep(2.5)  # the audit queue writes once a second
    audit = subprocess.run(
        [*gpuledger_cmd, "audit", "--format", "json", "--data-dir", str(data)],
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stderr
    actions = [(e["action"], e["outcome"], e["actor"]) for e in json.loads(audit.stdout)]
    assert ("admission.deny", "denied", "alice") in actions
    assert ("admission.allow", "allowed", "alice") in actions


def test_the_deploy_example_fails_open_with_a_timeout() -> None:
    import yaml

    docs = list(yaml.safe_load_all((ROOT / "deploy" / "admission-webhook.yaml").read_text()))
    kinds = {d["kind"] for d in docs}
    assert kinds == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for doc in docs:
        assert doc["apiVersion"] == "admissionregistration.k8s.io/v1"
        for hook in doc["webhooks"]:
            assert hook["failurePolicy"] == "Ignore" and 1 <= hook["timeoutSeconds"] <= 5
            assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
            assert hook["clientConfig"]["url"].endswith("/admission")
            groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
            assert {"batch", "kueue.x-k8s.io"} <= groups
