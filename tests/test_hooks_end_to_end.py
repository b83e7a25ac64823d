"""The loop closed on the advice fixture's cluster (tests/advice_fixture.py): tenant ml/nlp
holds borrowed GPUs idle for hours while ml/vision's jobs wait under ml/vision's guarantee →
the advice says reclaim from ml/nlp, naming its idle jobs → the admission webhook warns,
denies or deprioritises ml/nlp's next GPU job → once the reclaim is carried out (the idle jobs
preempted), ml/vision's waiting jobs fit and start, the advice and the webhook let go."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import advice_fixture as af
import pytest
from conftest import fresh_database

from collector.records import JobEvent, TenantRule
from gpuledger.settings import load_settings
from scheduler_hooks.admission import PRIORITY_LABEL, AdmissionRules, parse_review, review
from scheduler_hooks.report import build_advice
from scheduler_hooks.snapshot import build_snapshot
from warehouse.analytics.explain import why_job
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import IdleRule, load_price_book

IDLE = IdleRule(0.05, 1800)
RECLAIMED = af.T + 2 * af.MIN


@pytest.fixture(scope="module")
def cluster(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        af.fill(wh)
        rules = [TenantRule("namespace", p, t, 10) for p, t in (("nlp", af.A), ("vision", af.B))]
        Ingestor(wh, 35, now=lambda: af.T).write_config(rules=rules)
        yield wh


def _advice(wh: Warehouse, at: dt.datetime) -> Any:
    return build_advice(
        wh, "c1", at, load_settings(env={}).scheduler.policy(), idle=IDLE,
        prices=load_price_book(wh),
    )  # fmt: skip


def _job(namespace: str) -> bytes:
    pod = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"uid-{namespace}",
                "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                "namespace": namespace,
                "operation": "CREATE",
                "userInfo": {"username": "someone"},
                "object": {"metadata": {"name": "next", "namespace": namespace},
                           "spec": {"template": {"spec": pod}}},
            },
        }
    ).encode()  # fmt: skip


def _decide(wh: Warehouse, at: dt.datetime, policy: str) -> dict[str, Any]:
    snapshot = build_snapshot(wh, at, idle=IDLE, prices=load_price_book(wh), cluster="c1")
    rules = AdmissionRules(default=policy, max_age_s=60)
    answer: dict[str, Any] = review(
        parse_review(_job("nlp")), snapshot, rules, now_s=at.timestamp()
    ).response()["response"]
    return answer


def test_advice_then_admission_then_the_reclaim_lets_the_waiting_tenant_start(
    cluster: Warehouse,
) -> None:
    # 1. the advice: reclaim from ml/nlp for ml/vision, its idle jobs named
    (reclaim,) = [r for r in _advice(cluster, af.T).recommendations if r.kind == "reclaim"]
    assert (reclaim.from_tenant, reclaim.to_tenant) == (af.A, af.B)
    idle_jobs = [j.job_id for j in reclaim.jobs]
    assert idle_jobs == ["nlp-idle1", "nlp-idle2"]
    before = why_job(cluster, "c1", "vis-wait", af.T)
    assert before.state == "waiting" and before.facts["free_gpus_by_model"].get("H100", 0) == 0

    # 2. the webhook, per policy, on ml/nlp's next GPU job
    warned = _decide(cluster, af.T, "warn")
    assert warned["allowed"] and "n1-g3" in warned["warnings"][0]
    denied = _decide(cluster, af.T, "deny")
    assert not denied["allowed"] and denied["status"]["code"] == 403
    assert "n1-g3" in denied["status"]["message"] and "nlp-idle1" in denied["status"]["message"]
    lowered = _decide(cluster, af.T, "deprioritise")
    patch = json.loads(base64.b64decode(lowered["patch"]))
    assert lowered["allowed"] and patch[0]["value"] == {PRIORITY_LABEL: "low"}

    # 3. the reclaim carried out: the idle jobs preempted; ml/vision's waiting jobs now fit
    ing = Ingestor(cluster, 35, now=lambda: RECLAIMED)
    gpus = {"nlp-idle1": ("n1-g3", "n1-g4"), "nlp-idle2": ("n2-g1",)}
    ing.write_job_events(
        [
            JobEvent(af.T + af.MIN, event="preempted", gpus_requested=len(g), node=g[0][:2],
                     gpu_uuids=g, started_at=af.T + af.RUNNING[j][2], **af._common(j, af.A))
            for j, g in gpus.items()
        ]
    )  # fmt: skip
    free = why_job(cluster, "c1", "vis-wait", RECLAIMED)
    assert free.state == "waiting" and free.facts["free_gpus_by_model"]["H100"] == 3
    start = RECLAIMED + af.MIN
    ing.write_job_events(
        [
            JobEvent(start, event="started", gpus_requested=len(g), node=g[0][:2], gpu_uuids=g,
                     **af._common(j, af.B))
            for j, g in (("vis-wait", ("n1-g3", "n1-g4")), ("vis-wait2", ("n2-g1",)))
        ]
    )  # fmt: skip
    after = start + af.MIN
    assert why_job(cluster, "c1", "vis-wait", after).state == "running"
    assert why_job(cluster, "c1", "vis-wait2", after).state == "running"

    # 4. nothing idle is borrowed any more: no reclaim, and ml/nlp's next job passes
    assert not [r for r in _advice(cluster, after).recommendations if r.kind == "reclaim"]
    passed = _decide(cluster, after, "deny")
    assert passed["allowed"] and "warnings" not in passed


def test_serve_proposes_the_advice_on_its_own(engine: Warehouse) -> None:
    """The job `serve` runs every scheduler.propose_interval_s: the advice is worked out for
    every cluster and proposed, and a second run with nothing changed proposes nothing more."""
    from gpuledger.advise_commands import propose_all
    from scheduler_hooks import proposals

    with fresh_database(engine) as wh:
        af.fill(wh)
        settings = load_settings(env={})
        first = propose_all(wh, settings, af.T)
        assert first["c1"]["proposed"]
        stored = proposals.in_force(wh, af.T + af.MIN, cluster="c1")
        (reclaim,) = [s for s in stored if s.to_json()["kind"] == "reclaim"]
        assert reclaim.to_json()["status"] == "proposed"
        again = propose_all(wh, settings, af.T + af.MIN)
        assert not again["c1"]["proposed"] and again["c1"]["kept"]
