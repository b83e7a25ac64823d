"""Quota-reclaim advice on the hand-computed cluster of tests/advice_fixture.py (its docstring
has the table and the expected advice): reclaim from the tenant squatting borrowed GPUs for
the tenant waiting under its guarantee, never below a guarantee; borrowing and lending limits;
fair-share weights; idle limits with last month's savings; what a tenant's view holds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import advice_fixture as af
import polars as pl
import pytest
from conftest import fresh_database

from gpuledger.settings import load_settings
from scheduler_hooks.advice import AdviceReport, Recommendation
from scheduler_hooks.report import build_advice
from warehouse.analytics import quota
from warehouse.analytics.alerts import ANOTHER_TENANT
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule, load_price_book

LIMITS = {"IDLE_LIMITS": "ml/nlp=5%/1h", "INTERACTIVE_LIMITS": "ds=8h"}


@pytest.fixture(scope="module")
def cluster(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield af.fill(wh)


def advise(wh: Warehouse, at: dt.datetime = af.T, quotas: Any = None, **env: str) -> AdviceReport:
    settings = load_settings(env={f"GPULEDGER_SCHEDULER__{k}": v for k, v in env.items()})
    return build_advice(
        wh,
        "c1",
        at,
        settings.scheduler.policy(),
        idle=IdleRule(0.05, 1800),
        prices=load_price_book(wh),
        quotas=quotas,
    )


def only(report: AdviceReport, kind: str) -> list[Recommendation]:
    return [r for r in report.recommendations if r.kind == kind]


def test_reclaim_from_the_squatter_names_its_idle_jobs_oldest_idle_first(
    cluster: Warehouse,
) -> None:
    report = advise(cluster)
    (reclaim,) = only(report, "reclaim")
    assert (reclaim.from_tenant, reclaim.to_tenant, reclaim.pool, reclaim.gpu_model) == (
        af.A,
        af.B,
        "train",
        "H100",
    )
    assert [j.job_id for j in reclaim.jobs] == ["nlp-idle1", "nlp-idle2"]
    assert [(j.name, j.namespace, j.gpus) for j in reclaim.jobs] == [
        ("nlp-idle1-pod", "nlp", 2.0),
        ("nlp-idle2-pod", "nlp", 1.0),
    ]
    assert [j.idle_since for j in reclaim.jobs] == [af.T - 4 * af.H, af.T - 3 * af.H]
    assert reclaim.amount == reclaim.gpus == 3.0
    assert reclaim.recovers_gpu_hours == 3 * 24
    assert reclaim.recovers_cost == 3 * 24 * Decimal(af.PRICE)
    assert reclaim.numbers["idle_gpu_hours_so_far"] == pytest.approx(2 * 4 + 3)
    assert "leaves ml/nlp 3, not below its guarantee" in reclaim.reason
    assert reclaim.change == {"preempt": ["nlp-idle1", "nlp-idle2"]}


def test_standings_say_who_holds_borrows_idles_and_waits(cluster: Warehouse) -> None:
    stand = {s.tenant: s for s in advise(cluster).standings}
    nlp, vis, chat = stand[af.A], stand[af.B], stand[af.C]
    assert (nlp.position.held_gpus, nlp.position.borrowed_gpus, nlp.idle_gpus) == (6, 4, 3)
    assert nlp.idle_since == af.T - 4 * af.H
    assert nlp.waiting_elsewhere_gpus == 3  # ml/vision's long-waiting demand in its guarantee
    assert (vis.position.unused_gpus, vis.position.waiting_gpus, vis.waiting_held_gpus) == (3, 4, 3)
    assert [w.job_id for w in vis.position.waiting] == ["vis-wait", "vis-wait2", "vis-late"]
    assert (chat.position.unused_gpus, chat.idle_gpus, chat.waiting_elsewhere_gpus) == (1, 0, 3)
    # the held GPUs add up to the cluster's eight, as the fixture's table has them
    assert sum(s.position.held_gpus for s in stand.values()) == 8


def test_reclaim_never_takes_a_tenant_below_its_guarantee(cluster: Warehouse) -> None:
    # ml/nlp guaranteed 5 (a ClusterQueue may say so): it borrows 1 only, so only the 1-GPU
    # idle job may go; preempting nlp-idle1's 2 GPUs would leave it 4 < 5
    quotas = quota.quotas_at(cluster, "c1", af.T).with_columns(
        pl.when(pl.col("tenant") == af.A)
        .then(5.0)
        .otherwise(pl.col("guaranteed_gpus"))
        .alias("guaranteed_gpus")
    )
    report = advise(cluster, quotas=quotas)
    (reclaim,) = only(report, "reclaim")
    assert [j.job_id for j in reclaim.jobs] == ["nlp-idle2"] and reclaim.gpus == 1
    held = next(s for s in report.standings if s.tenant == af.A).position.held_gpus
    assert held - reclaim.gpus >= 5
    (limit,) = only(report, "lower_borrow_limit")
    assert limit.change == {"field": "borrow_limit_gpus", "from": None, "to": 0.0}


def test_limits_lending_and_weights(cluster: Warehouse) -> None:
    report = advise(cluster, **LIMITS)
    (limit,) = only(report, "lower_borrow_limit")
    assert (limit.from_tenant, limit.change) == (
        af.A,
        {"field": "borrow_limit_gpus", "from": None, "to": 1.0},
    )
    (lend,) = only(report, "lend_guarantee")
    assert (lend.from_tenant, lend.change, lend.gpus) == (
        af.C,
        {"field": "lend_limit_gpus", "from": 0.0, "to": 1.0},
        1.0,
    )
    weights = {r.from_tenant: r.change for r in only(report, "fair_share_weight")}
    assert weights == {
        af.A: {"field": "fair_share_weight", "from": 1.0, "to": 0.5},
        af.B: {"field": "fair_share_weight", "from": 1.0, "to": 2.0},
    }  # ds/chat is "normal", weight 1 as it is: no advice
    (idle,) = only(report, "idle_limit")
    assert (idle.from_tenant, [j.job_id for j in idle.jobs]) == (af.A, ["nlp-idle1", "nlp-idle2"])
    (interactive,) = only(report, "interactive_limit")
    assert (interactive.from_tenant, [j.job_id for j in interactive.jobs]) == (af.C, ["chat-nb"])
    saved = {(s.tenant, s.kind): s for s in report.savings}
    nlp = saved[(af.A, "idle_limit")]
    assert nlp.saved_gpu_hours == pytest.approx((4 - 1) * 2 + (3 - 1) * 1)
    assert nlp.saved_cost == 8 * Decimal(af.PRICE)
    assert dict(nlp.jobs) == pytest.approx({"nlp-idle1": 6.0, "nlp-idle2": 2.0})
    chat = saved[(af.C, "interactive_limit")]
    assert (chat.saved_gpu_hours, chat.saved_cost) == (pytest.approx(2.0), Decimal("5.00"))
    assert [r.kind for r in report.recommendations] == [
        "reclaim",
        "lower_borrow_limit",
        "lend_guarantee",
        "fair_share_weight",
        "fair_share_weight",
        "idle_limit",
        "interactive_limit",
    ]


def test_a_condition_counts_once_it_has_held(cluster: Warehouse) -> None:
    # hold 5 h: nothing has been idle (4 h at most) or waited (2 h) that long
    report = advise(cluster, HOLD_S=str(5 * 3600))
    assert not only(report, "reclaim") and not only(report, "lower_borrow_limit")
    assert not only(report, "lend_guarantee")
    # at -90 min (default hold 30 min) only vis-wait (2 GPUs) has waited long enough, and
    # nlp-idle1's 2 GPUs cover it: nlp-idle2, idle too, is not needed
    earlier = advise(cluster, at=af.T - 90 * af.MIN)
    (reclaim,) = only(earlier, "reclaim")
    assert [j.job_id for j in reclaim.jobs] == ["nlp-idle1"] and reclaim.gpus == 2
    assert reclaim.numbers["to_demand_gpus"] == 2


def test_a_tenant_sees_its_own_standing_and_the_advice_that_touches_it(
    cluster: Warehouse,
) -> None:
    report = advise(cluster, **LIMITS)
    vision = report.seen_by(af.B)
    assert [s.tenant for s in vision.standings] == [af.B]
    assert list(vision.priorities) == [af.B] and vision.savings == ()
    (reclaim, weight) = vision.recommendations
    assert (reclaim.kind, reclaim.from_tenant) == ("reclaim", ANOTHER_TENANT)
    assert reclaim.to_tenant == af.B
    assert reclaim.jobs == () and reclaim.reason == "" and "preempt" not in reclaim.change
    assert (weight.kind, weight.from_tenant) == ("fair_share_weight", af.B)
    org = report.seen_by("ml")  # an org sees its projects, both sides named
    assert {r.kind for r in org.recommendations} == {
        "reclaim",
        "lower_borrow_limit",
        "fair_share_weight",
        "idle_limit",
    }
    assert next(r for r in org.recommendations if r.kind == "reclaim").jobs
    assert report.seen_by(None) is report
    assert report.seen_by("other").recommendations == ()
