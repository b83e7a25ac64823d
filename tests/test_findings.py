"""The overview's findings in words: each kind on numbers whose truth is known, their ranking,
and what :func:`gather` reads from the hand-made cluster of ``moment_fixture`` for a manager
and for each tenant."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import moment_fixture as m
import pytest
from conftest import fresh_database, refused
from polars.testing import assert_frame_equal

from dashboards.answers import capacity as capacity_answers
from dashboards.answers.findings import (
    CostToDate,
    Facts,
    Holding,
    OutOfService,
    Stranded,
    Waiting,
    findings,
    top_findings,
)
from dashboards.app import create_app
from dashboards.context import Viewer
from dashboards.filters import Filters
from warehouse.analytics import moment as moments
from warehouse.analytics.fragmentation import fragmentation_at
from warehouse.client import Warehouse
from warehouse.ledger import IdleNow, IdleRule
from warehouse.ledger.tail import LiveTail

NOW = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)


def idle(job: str, tenant: str, hours: float, fraction: float = 1.0) -> IdleNow:
    since = NOW - dt.timedelta(hours=hours)
    cost = Decimal("2.50") * Decimal(str(hours * fraction))
    return IdleNow(
        "c1", "n1", f"g-{job}", "", "A100", "p1", job, 0, tenant, fraction, since, NOW,
        hours * fraction, cost,
    )  # fmt: skip


def facts(scope: str | None = None, **kw: object) -> Facts:
    return Facts(scope=scope, idle_rule_s=1800, currency="USD", **kw)  # type: ignore[arg-type]


def texts(f: Facts) -> list[str]:
    return [x.text for x in findings(f)]


def test_idle_gpus_are_counted_with_the_tenant_holding_most() -> None:
    now = [
        idle("a", "team-x/a", 3),
        idle("b", "team-x/b", 2.5),
        idle("c", "team-y/c", 5, 0.5),
        idle("d", "team-y/c", 1.5),  # under 2 h: not counted
    ]
    assert texts(facts(idle_now=now)) == [
        "2.5 GPUs allocated but idle for more than 2 h — 2 of them team-x's, 20.00 USD so far"
    ]


def test_idle_gpus_of_one_tenant_name_its_jobs() -> None:
    now = [idle("a", "team-x/a", 3), idle("b", "team-x/b", 2.5)]
    assert texts(facts(idle_now=now)) == [
        "2 GPUs allocated but idle for more than 2 h — all team-x's, 13.75 USD so far"
    ]
    assert texts(facts("team-x", idle_now=now)) == [
        "2 GPUs of team-x allocated but idle for more than 2 h (jobs a, b), 13.75 USD so far"
    ]
    one = texts(facts(idle_now=now[:1]))
    assert one == ["1 GPU allocated but idle for more than 2 h — all team-x's, 7.50 USD so far"]


def test_a_longer_idle_rule_raises_the_bar() -> None:
    now = [idle("a", "team-x/a", 3)]
    f = Facts(scope=None, idle_rule_s=4 * 3600, currency="USD", idle_now=now)
    assert texts(f) == []


def test_waiting_jobs_meet_the_stranded_gpus_of_their_model() -> None:
    waiting = [
        Waiting("w1", "team-x/a", "A100", 2, 2400),
        Waiting("w2", "team-y/b", "A100", 2, 900),
        Waiting("w3", "team-y/b", "A100", 2, 1200),
        Waiting("w4", "team-y/b", "H100", 1, 120),  # 2 min: not worth a sentence
        Waiting("w5", "team-z/c", "L40S", 1, 7380),
    ]
    stranded = [Stranded("A100", 6, 4), Stranded("H100", 3, 1), Stranded("L40S", 1, 2)]
    assert texts(facts(waiting=waiting, stranded=stranded)) == [
        "3 jobs waiting up to 40 min for A100 GPUs (6 GPUs asked) while 6 A100 GPUs are "
        "stranded on 4 nodes",
        "1 job waiting up to 2 h 03 min for L40S GPUs (1 GPU asked) while 1 L40S GPU is "
        "stranded on 2 nodes",
    ]
    assert texts(facts(waiting=waiting[:4])) == [
        "3 jobs waiting up to 40 min for A100 GPUs (6 GPUs asked)"
    ]
    mine = [w for w in waiting if w.tenant == "team-y/b"]
    assert texts(facts("team-y", waiting=mine)) == [
        "2 jobs of team-y waiting up to 20 min for A100 GPUs (4 GPUs asked)"
    ]


def test_gpus_out_of_service() -> None:
    sick = [
        OutOfService("n1", "g1", "A100", "Xid 79: GPU has fallen off the bus"),
        OutOfService("n1", "g2", "A100", "Xid 79: GPU has fallen off the bus"),
        OutOfService("n2", "g3", "A100", "ECC"),
    ]
    assert texts(facts(unhealthy=sick)) == [
        "3 GPUs out of service on 2 nodes (most often: Xid 79: GPU has fallen off the bus)"
    ]


def test_a_tenant_far_over_its_guarantee() -> None:
    holdings = [
        Holding("team-x/a", 40, 16),
        Holding("team-y/b", 20, 16),  # 1.25x: within reach
        Holding("team-z/c", 1.2, 0.4),  # 3x, but less than a whole GPU over
        Holding("team-w/d", 8, 0),  # no guarantee to be over
    ]
    assert texts(facts(holdings=holdings)) == [
        "team-x/a holds 40 GPUs, 2.5× its guarantee of 16 (24 borrowed)"
    ]


def test_cost_against_the_same_days_of_last_month() -> None:
    up = CostToDate(Decimal("1350"), Decimal("1000"), "USD")
    assert texts(facts(cost=up)) == [
        "Cost this month so far, 1,350.00 USD, is 35% above the same days of last month "
        "(1,000.00 USD)"
    ]
    down = CostToDate(Decimal("600"), Decimal("1000"), "USD")
    assert texts(facts("team-x", cost=down)) == [
        "Cost of team-x this month so far, 600.00 USD, is 40% below the same days of last "
        "month (1,000.00 USD)"
    ]
    assert texts(facts(cost=CostToDate(Decimal("1100"), Decimal("1000"), "USD"))) == []
    assert texts(facts(cost=CostToDate(Decimal("1100"), Decimal("0"), "USD"))) == []


def test_the_top_five_take_each_kind_first() -> None:
    f = facts(
        idle_now=[idle("a", "team-x/a", 3)],
        holdings=[Holding(f"t{i}/p", 30 + i, 10) for i in range(6)],
        unhealthy=[OutOfService("n1", "g1", "A100", "")],
        cost=CostToDate(Decimal("2000"), Decimal("1000"), "USD"),
    )
    got = findings(f)
    assert len(got) == 5
    # one of each kind, heaviest first, then the rest of the tenants over their guarantee
    kinds = ["over_guarantee", "unhealthy", "idle", "cost", "over_guarantee"]
    assert [x.kind for x in got] == kinds
    assert got[0].text.startswith("t5/p holds 35 GPUs") and got[4].text.startswith("t4/p")


@pytest.fixture(scope="module")
def moment(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield m.write(wh)


def _found(wh: Warehouse, role: str) -> list[str]:
    create_app(wh, now=lambda: m.NOW)  # sets the context the answers read
    filters = Filters.parse({}, today=m.NOW.date())
    return [f.text for f in top_findings(filters, Viewer("someone", role))]


def test_what_a_manager_is_told_about_the_cluster(moment: Warehouse) -> None:
    stranded = fragmentation_at(moment, "c1", m.NOW).per_node
    h100 = float(stranded.filter(stranded["gpu_model"] == "H100")["fgd_gpus"].sum())
    nodes = int((stranded["fgd_gpus"] > 1e-6).sum())
    assert h100 > 0  # n1's free half GPU cannot take the typical one-GPU job
    waiting = "1 job waiting up to 40 min for H100 GPUs (2 GPUs asked)"
    waiting += f" while {round(h100, 1):g} H100 GPUs are stranded on {nodes} node"
    waiting += "s" if nodes != 1 else ""
    assert sorted(_found(moment, "manager")) == sorted(
        [
            "1 GPU allocated but idle for more than 2 h — all team-x's, 7.50 USD so far",
            waiting,
            "1 GPU out of service on 1 node (most often: Xid 79: GPU has fallen off the bus)",
            "team-x/a holds 2 GPUs, 2.0× its guarantee of 1 (1 borrowed)",
        ]
    )


def test_what_each_tenant_is_told_about_its_own_jobs(moment: Warehouse) -> None:
    assert sorted(_found(moment, "tenant:team-x")) == [
        "1 GPU of team-x allocated but idle for more than 2 h (jobs j-idle), 7.50 USD so far",
        "team-x/a holds 2 GPUs, 2.0× its guarantee of 1 (1 borrowed)",
    ]
    # j-half has been idle for 1 h only; team-y/b holds 2.5 of its 4; nothing of the cluster's
    assert _found(moment, "tenant:team-y") == [
        "1 job of team-y waiting up to 40 min for H100 GPUs (2 GPUs asked)"
    ]


def test_the_findings_as_of_a_kept_moment_ask_no_moment_again(moment: Warehouse) -> None:
    """The server's live tail keeps each cluster's moment at its instant (waiting jobs, held
    against guaranteed, fragmentation): findings and the Capacity page's report as of that
    instant take it, and say what asking says."""
    roles = ("manager", "tenant:team-x", "tenant:team-y")
    want = {role: sorted(_found(moment, role)) for role in roles}
    rule = IdleRule(0.05, 1800)
    kept = LiveTail(moment, rule, every_s=60, clock=lambda: m.NOW)
    tail = kept.refresh()
    assert set(tail.moments) == {"c1"}
    then = tail.moments["c1"]
    assert_frame_equal(then.waiting, moments.waiting(moment, "c1", m.NOW))
    assert_frame_equal(then.held, moments.held_vs_guaranteed(moment, "c1", m.NOW))
    assert then.fragmentation.to_dict() == fragmentation_at(moment, "c1", m.NOW).to_dict()
    filters = Filters.parse({}, today=m.NOW.date())
    create_app(moment, idle=rule, now=lambda: m.NOW, as_of=kept.now)
    asked = [(moments, n) for n in ("waiting", "held_vs_guaranteed", "stranded_by_model")]
    with kept.offered(), refused(*asked):
        for role in roles:
            got = sorted(f.text for f in top_findings(filters, Viewer("someone", role)))
            assert got == want[role], role
        report = capacity_answers.fragmentation(filters, Viewer("boss", "manager"))
    assert report is then.fragmentation
