"""Advice rendered for Kueue, Volcano and Slurm, on tests/advice_fixture.py's cluster: the
official client reads the ClusterQueues from a fake API server (tests/k8s_fake.py), the quotas
come from them, and only what differs is patched; applying approved advice patches through
the API server (JSON merge patch) and preempts the idle jobs: a Kueue job's Workload is
deactivated, any other pod evicted."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import advice_fixture as af
import pytest
from conftest import fresh_database
from test_advice import LIMITS, advise

from gpuledger.advise_commands import build_reports
from gpuledger.settings import load_settings
from scheduler_hooks import proposals, render
from scheduler_hooks.apply import apply_advice
from scheduler_hooks.kube import Cluster
from scheduler_hooks.policy import Names
from warehouse.audit import audit_entries
from warehouse.client import Warehouse

NAMES = Names()
GPU = "nvidia.com/gpu"


def cluster_queue(
    name: str, gpu: dict[str, Any], *, weight: Any = None, reclaim: str | None = None
) -> dict[str, Any]:
    """A ClusterQueue with CPU and GPU quotas under flavor h100 (cohort train)."""
    spec: dict[str, Any] = {
        "cohortName": "train",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", GPU],
                "flavors": [
                    {
                        "name": "h100",
                        "resources": [{"name": "cpu", "nominalQuota": "64"}, {"name": GPU, **gpu}],
                    }
                ],
            }
        ],
    }
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if reclaim is not None:
        spec["preemption"] = {"reclaimWithinCohort": reclaim}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


QUEUES = [
    cluster_queue("ml-nlp", {"nominalQuota": 2}, weight="1"),
    cluster_queue("ml-vision", {"nominalQuota": 4, "borrowingLimit": 2}, weight=2,
                  reclaim="Never"),
    cluster_queue("ds-chat", {"nominalQuota": "2", "borrowingLimit": 0, "lendingLimit": 0}),
]  # fmt: skip


def pod(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": name}}


@pytest.fixture(scope="module")
def warehouse(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield af.fill(wh)


@pytest.fixture
def kube(fake: Any, api: Any) -> Cluster:
    for cq in QUEUES:
        fake.put("clusterqueues", cq)
    for name in ("nlp-idle1-pod", "nlp-idle2-pod", "nlp-busy-pod"):
        fake.put("pods", pod("nlp", name))
    return Cluster(api, NAMES)


def settings(**env: str) -> Any:
    return load_settings(
        env={f"GPULEDGER_SCHEDULER__{k}": v for k, v in env.items()},
        overrides={"warehouse": {"database": "unused"}},
    )


def test_kueue_patches_change_only_what_differs(warehouse: Warehouse, kube: Cluster) -> None:
    ((report, objects),) = build_reports(warehouse, settings(), af.T, "c1", kube)
    advice = [r.to_json() for r in report.recommendations]
    items = render.kueue(advice, objects["kueue"], NAMES)
    patches = {i["name"]: i for i in items if i["kind"] == "ClusterQueue"}
    # ml/nlp: borrowingLimit 1 on the GPU under h100 (CPU untouched), weight "1" -> 0.5
    nlp = patches["ml-nlp"]["patch"]["spec"]
    assert sorted(nlp) == ["fairSharing", "resourceGroups"]
    assert nlp["fairSharing"] == {"weight": "0.5"}
    want = copy.deepcopy(QUEUES[0]["spec"]["resourceGroups"])
    want[0]["flavors"][0]["resources"][1]["borrowingLimit"] = 1
    assert nlp["resourceGroups"] == want
    # ml/vision's weight is 2 already: only the reclaim's reclaimWithinCohort changes
    assert patches["ml-vision"]["patch"] == {"spec": {"preemption": {"reclaimWithinCohort": "Any"}}}
    assert patches["ml-vision"]["command"].startswith(
        "kubectl patch clusterqueues.kueue.x-k8s.io ml-vision --type=merge -p "
    )
    chat = patches["ds-chat"]["patch"]["spec"]
    assert chat["resourceGroups"][0]["flavors"][0]["resources"][1] == {
        "name": GPU, "nominalQuota": "2", "borrowingLimit": 0, "lendingLimit": 1,
    }  # fmt: skip
    # the idle jobs: their Workloads are deactivated (evicting a pod would free no quota)
    stopped = [(i["namespace"], i["pod"], i["patch"]) for i in items if i["kind"] == "Workload"]
    off = {"spec": {"active": False}}
    assert stopped == [("nlp", "nlp-idle1-pod", off), ("nlp", "nlp-idle2-pod", off)]
    assert not [i for i in items if i["kind"] == "Eviction"]
    # once the cluster holds the advised values, nothing is left to patch
    for item in patches.values():
        if "patch" in item:
            kube.patch("ClusterQueue", item["name"], item["patch"])
    again = render.kueue(advice, kube.cluster_queues(), NAMES)
    assert [i for i in again if "patch" in i and i["kind"] == "ClusterQueue"] == []


def test_the_quota_comes_from_the_cluster_when_it_is_read(
    warehouse: Warehouse, fake: Any, kube: Cluster
) -> None:
    bigger = cluster_queue("ml-nlp", {"nominalQuota": 5}, weight="1")
    fake.put("clusterqueues", bigger)
    ((report, _),) = build_reports(warehouse, settings(), af.T, "c1", kube)
    nlp = next(s for s in report.standings if s.tenant == af.A)
    assert nlp.position.guaranteed_gpus == 5  # the warehouse says 2
    (reclaim,) = [r for r in report.recommendations if r.kind == "reclaim"]
    assert [j.job_id for j in reclaim.jobs] == ["nlp-idle2"]
    weights = {r.from_tenant for r in report.recommendations if r.kind == "fair_share_weight"}
    assert weights == {af.A}  # ml/vision's ClusterQueue has weight 2 already


def test_kueue_without_a_cluster_renders_from_the_warehouse_quotas(warehouse: Warehouse) -> None:
    ((report, objects),) = build_reports(warehouse, settings(), af.T, "c1", None)
    assert sorted(objects["kueue"]) == ["ds-chat", "ml-nlp", "ml-vision"]
    advice = [r.to_json() for r in report.recommendations]
    nlp = next(i for i in render.kueue(advice, objects["kueue"], NAMES) if i["name"] == "ml-nlp")
    resource = nlp["patch"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert resource == {"name": GPU, "nominalQuota": 2, "borrowingLimit": 1}


def owned(obj: dict[str, Any], uid: str, *owners: tuple[str, str, str, str]) -> dict[str, Any]:
    """``obj`` with its UID and owner references ((apiVersion, kind, name, uid) each)."""
    refs = [{"apiVersion": a, "kind": k, "name": n, "uid": u, "controller": True}
            for a, k, n, u in owners]  # fmt: skip
    return obj | {"metadata": obj["metadata"] | {"uid": uid, "ownerReferences": refs}}


def workload(namespace: str, name: str, *owner: tuple[str, str, str, str]) -> dict[str, Any]:
    return owned({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                  "metadata": {"namespace": namespace, "name": name},
                  "spec": {"queueName": "nlp", "active": True}}, f"wl-{name}", *owner)  # fmt: skip


def test_applying_kueue_advice_patches_and_deactivates_through_the_api_server(
    engine: Warehouse, fake: Any, kube: Cluster
) -> None:
    # idle2's Workload is owned by the JobSet that owns its Job; idle1 is a batch Job's pod
    # that Kueue does not manage (no Workload: evicted); busy's Workload is its own (Kueue's
    # pod integration) and stays active, as does a Workload of the same Job UID elsewhere
    jobset = ("jobset.x-k8s.io/v1alpha2", "JobSet", "big", "uid-jobset")
    child = ("batch/v1", "Job", "big-workers-0", "uid-job-2")
    fake.put("pods", owned(pod("nlp", "nlp-idle2-pod"), "uid-pod-2", child))
    fake.put("jobs", owned({"apiVersion": "batch/v1", "kind": "Job",
                            "metadata": {"namespace": "nlp", "name": "big-workers-0"}},
                           "uid-job-2", jobset))  # fmt: skip
    fake.put("workloads", workload("nlp", "jobset-big-d4e5f", jobset))
    job = ("batch/v1", "Job", "train-1", "uid-job-1")
    fake.put("pods", owned(pod("nlp", "nlp-idle1-pod"), "uid-pod-1", job))
    fake.put(
        "jobs",
        owned(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"namespace": "nlp", "name": "train-1"},
            },
            "uid-job-1",
        ),
    )
    fake.put("workloads", workload("other", "job-train-1-elsewhere", job))
    fake.put("pods", owned(pod("nlp", "nlp-busy-pod"), "uid-pod-3"))
    fake.put("workloads", workload("nlp", "pod-nlp-busy-pod-99", ("v1", "Pod", "nlp-busy-pod",
                                                                  "uid-pod-3")))  # fmt: skip
    with fresh_database(engine) as wh:
        af.fill(wh)
        ((report, _),) = build_reports(wh, settings(), af.T, "c1", kube)
        proposals.propose(wh, report, actor="cron")
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
        ids = {s.row.kind: s.advice_id for s in proposals.in_force(wh, later)}
        for kind in ("lend_guarantee", "reclaim"):
            proposals.approve(wh, ids[kind], actor="mia")
            apply_advice(wh, ids[kind], target="kueue", actor="ops", names=NAMES, cluster=kube)
        entries = {e.object: e for e in audit_entries(wh, action="advice.apply")}
        lend = json.loads(entries[ids["lend_guarantee"]].detail)
    patches = [w for w in fake.writes if "/clusterqueues/" in w[1]]
    assert {(p[1].rsplit("/", 1)[1], p[2]) for p in patches} == {
        ("ds-chat", "application/merge-patch+json"),
        ("ml-vision", "application/merge-patch+json"),
    }
    gpu = fake.get("clusterqueues", "ds-chat")["spec"]["resourceGroups"][0]["flavors"][0]
    assert gpu["resources"][1]["lendingLimit"] == 1 and gpu["resources"][0]["nominalQuota"] == "64"
    assert fake.get("clusterqueues", "ml-vision")["spec"]["preemption"] == {
        "reclaimWithinCohort": "Any"
    }
    stopped = [(w[1], w[2], w[3]) for w in fake.writes if "/workloads/" in w[1]]
    assert stopped == [(
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/nlp/workloads/jobset-big-d4e5f",
        "application/merge-patch+json", {"spec": {"active": False}}
    )]  # fmt: skip
    assert fake.get("workloads", "nlp/jobset-big-d4e5f")["spec"]["active"] is False
    fake.get("pods", "nlp/nlp-idle2-pod")  # Kueue, not gpuledger, stops its pods
    evictions = [w[1] for w in fake.writes if w[0] == "POST"]
    assert evictions == ["/api/v1/namespaces/nlp/pods/nlp-idle1-pod/eviction"]
    with pytest.raises(KeyError):
        fake.get("pods", "nlp/nlp-idle1-pod")
    fake.get("pods", "nlp/nlp-busy-pod")  # the busy job was left alone
    assert fake.get("workloads", "nlp/pod-nlp-busy-pod-99")["spec"]["active"] is True
    assert fake.get("workloads", "other/job-train-1-elsewhere")["spec"]["active"] is True
    reclaim = json.loads(entries[ids["reclaim"]].detail)
    where = "Workload nlp/jobset-big-d4e5f (pod nlp-idle2-pod)"
    assert reclaim["scheduler_before"][where] == {"active": True}
    assert reclaim["scheduler_after"][where] == {"active": False}
    assert reclaim["scheduler_after"]["pod nlp/nlp-idle1-pod"] == "evicted"
    res = lambda doc: doc["resourceGroups"][0]["flavors"][0]["resources"][1]  # noqa: E731
    assert res(lend["scheduler_before"]["ClusterQueue ds-chat"])["lendingLimit"] == 0
    assert res(lend["scheduler_after"]["ClusterQueue ds-chat"])["lendingLimit"] == 1


def test_volcano_queue_patches(warehouse: Warehouse, fake: Any, api: Any) -> None:
    report = advise(warehouse, **LIMITS)
    advice = [r.to_json() for r in report.recommendations]
    items = render.volcano(advice, None, NAMES)
    queues = {i["name"]: i["patch"]["spec"] for i in items if i["kind"] == "Queue"}
    assert queues == {
        "ml-nlp": {"capability": {GPU: "3"}, "weight": 1, "reclaimable": True},
        "ml-vision": {"weight": 4},
        "ds-chat": {"guarantee": {"resource": {GPU: "1"}}},
    }  # capability = guarantee 2 + limit 1; guarantee (never lent) = 2 - lending limit 1
    pods = [(i["name"], i["advice"]) for i in items if i["kind"] == "Eviction"]
    assert [p for p, _ in pods] == ["nlp-idle1-pod", "nlp-idle2-pod", "chat-nb-pod"]
    assert len(pods[0][1]) == 2  # the reclaim and the idle limit name it: one eviction
    # read from the cluster: a queue already reclaimable (by default) and of weight 1 keeps them
    fake.put("queues", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": "ml-nlp"},
        "spec": {"weight": 1, "capability": {GPU: "8", "cpu": "64"}, "deserved": {GPU: "2"}},
    })  # fmt: skip
    current = Cluster(api, NAMES).volcano_queues()
    read = {i["name"]: i for i in render.volcano(advice, current, NAMES) if i["kind"] == "Queue"}
    assert read["ml-nlp"]["patch"] == {"spec": {"capability": {GPU: "3"}}}
    assert read["ml-vision"]["note"].startswith("no Queue ml-vision")


def test_slurm_commands(warehouse: Warehouse) -> None:
    advice = [r.to_json() for r in advise(warehouse, **LIMITS).recommendations]
    lines = [i.get("command") or "# " + i["comment"] for i in render.slurm(advice, NAMES)]
    assert lines == [
        "sacctmgr -i modify account where name=vision set Fairshare=4",
        "sacctmgr -i modify account where name=nlp set GrpTRES=gres/gpu=3 Fairshare=1",
        "scontrol requeue nlp-idle1",
        "scontrol requeue nlp-idle2",
        "# account chat: Slurm accounts have no guarantee to lend (GrpTRES caps, it does not "
        "reserve); nothing to change",
        "scancel chat-nb",
    ]
