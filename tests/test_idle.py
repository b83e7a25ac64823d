"""Idle allocated GPUs: the GPUs idle now on the hand-made cluster of ``moment_fixture``, the
idle runs of one GPU against the ledger's hand-computed table (``test_ledger_idle``), and the
idle report's days and jobs against the ledger's own figures."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import moment_fixture as m
import pytest
import test_ledger_idle as hand
from conftest import fresh_database, recent, simulate
from test_ledger_idle import cluster  # noqa: F401  (the hand-computed cluster, a fixture)

from warehouse.analytics import gpu
from warehouse.client import Warehouse
from warehouse.ledger import (
    IdleRule,
    Window,
    compute_ledger,
    idle_now,
    idle_report,
    load_price_book,
    seal_days,
    usage_days,
)

RULE = IdleRule(0.05, 1800)
DAY = Window.days(m.T.date(), m.T.date())


@pytest.fixture(scope="module")
def moment(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield m.write(wh)


def _now(wh: Warehouse, **kw: object) -> dict[str, object]:
    found = idle_now(wh, m.NOW, idle=RULE, prices=load_price_book(wh), **kw)  # type: ignore[arg-type]
    return {r.job_id: r for r in found}


def test_a_job_holding_a_gpu_at_one_percent_for_three_hours_is_idle_now(moment: Warehouse) -> None:
    got = _now(moment)
    assert sorted(got) == ["j-half", "j-idle"]  # not j-busy, j-short (20 min), j-stale (stale)
    idle = got["j-idle"]
    assert (idle.gpu_uuid, idle.node, idle.tenant) == ("g-idle", "n1", "team-x/a")
    assert (idle.since, idle.until) == (m.T, m.NOW)
    assert idle.idle_hours == pytest.approx(3.0)
    assert idle.idle_gpu_hours == pytest.approx(3.0)
    assert idle.cost == Decimal("7.50")  # 3 h x 2.50
    # the GPU was idle before j-half started (in j-prev's hands): the run is cut at its start
    half = got["j-half"]
    assert (half.since, half.until, half.fraction) == (m.NOW - dt.timedelta(hours=1), m.NOW, 0.5)
    assert half.idle_gpu_hours == pytest.approx(0.5)
    assert half.cost == Decimal("1.25")


def test_idle_now_of_one_tenant_and_of_the_rest(moment: Warehouse) -> None:
    assert sorted(_now(moment, tenant="team-x")) == ["j-idle"]
    assert sorted(_now(moment, tenant="team-y/b")) == ["j-half"]
    assert _now(moment, tenant="team-z") == {}
    assert sorted(_now(moment, only={"gpu_model": "H100"})) == ["j-half", "j-idle"]
    assert _now(moment, only={"pool": "other"}) == {}


def test_a_shorter_rule_finds_the_short_run(moment: Warehouse) -> None:
    found = idle_now(moment, m.NOW, idle=IdleRule(0.05, 600), prices=load_price_book(moment))
    short = {r.job_id: r for r in found}["j-short"]
    assert short.since == m.NOW - dt.timedelta(minutes=20)
    assert short.cost == Decimal("0.83")  # 20 min x 2.50, to the cent


def test_the_idle_report_matches_the_ledger(moment: Warehouse) -> None:
    book = load_price_book(moment)
    report = idle_report(moment, DAY, now=m.NOW, idle=RULE, prices=book)
    ledger = compute_ledger(moment, DAY, now=m.NOW, idle=RULE, prices=book)
    assert [d.day for d in report.days] == [m.T.date()]
    assert report.idle_gpu_hours == pytest.approx(ledger.totals.idle_gpu_hours)
    assert report.allocated_gpu_hours == pytest.approx(ledger.totals.allocated_gpu_hours)
    jobs = {j.job_id: j for j in report.worst_jobs}
    assert {k: pytest.approx(j.idle_gpu_hours) for k, j in jobs.items()} == {
        k: v for k, v in m.LEDGER_IDLE.items() if v
    }
    for j in jobs.values():  # one price all day: the cost of idle is idle GPU-hours x price
        assert j.idle_cost == (Decimal(str(m.LEDGER_IDLE[j.job_id])) * m.PRICE).quantize(
            Decimal("0.01")
        )
    assert [j.job_id for j in report.worst_jobs][:2] == ["j-idle", "j-prev"]  # 3 h each
    assert report.to_json()["totals"]["idle_cost"] == str(report.idle_cost)


def test_a_tenants_report_holds_its_rows_alone(moment: Warehouse) -> None:
    book = load_price_book(moment)
    mine = idle_report(moment, DAY, now=m.NOW, idle=RULE, prices=book, tenant="team-y")
    assert {j.tenant for j in mine.worst_jobs} == {"team-y/b"}
    assert {r.tenant for r in mine.now} == {"team-y/b"}
    theirs = compute_ledger(moment, DAY, now=m.NOW, idle=RULE, prices=book, tenant="team-y")
    assert mine.idle_gpu_hours == pytest.approx(theirs.totals.idle_gpu_hours)
    assert mine.idle_gpu_hours == pytest.approx(m.LEDGER_IDLE["j-half"] + m.LEDGER_IDLE["j-stale"])


def test_a_gpus_idle_runs_are_judged_within_each_hold_as_the_ledger_does(
    cluster: Warehouse,  # noqa: F811
) -> None:
    """Every job's idle GPU-hours, from its GPU's runs, equal the ledger's hand table."""
    got: dict[str, float] = {}
    for uuid in hand.UTIL:
        held = gpu.holds(cluster, "c1", uuid, hand.T0, hand.T6)
        stretches = gpu.hold_idle(
            cluster, held, a=hand.T0, b=hand.T6, threshold_ratio=0.05, min_duration_s=1800
        )
        for r in held.iter_rows(named=True):
            mine = stretches.filter(stretches["hold"] == r["hold"])
            got[r["job_id"]] = float(mine["idle_gpu_hours"].sum())
    assert got == {f"j{i}": pytest.approx(hand.EXPECT[f"t-j{i}"][1]) for i in range(1, 7)}


NOW = recent(dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC))  # samples within their retention
TWO_DAYS = Window.days(NOW.date() - dt.timedelta(days=1), NOW.date())


@pytest.fixture(scope="module")
def simulated(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=5, now=NOW)
        yield wh


@pytest.mark.parametrize("sealed", [False, True], ids=["live", "sealed"])
def test_each_day_of_the_report_is_that_days_ledger(simulated: Warehouse, sealed: bool) -> None:
    book = load_price_book(simulated)
    if sealed:
        seal_days(simulated, idle=RULE, now=NOW)
    report = idle_report(simulated, TWO_DAYS, now=NOW, idle=RULE, prices=book)
    assert [d.day for d in report.days] == [TWO_DAYS.first_day, TWO_DAYS.last_day]
    for d in report.days:
        one = compute_ledger(
            simulated, Window.days(d.day, d.day), now=NOW, idle=RULE, prices=book
        ).totals
        assert d.allocated_gpu_hours == pytest.approx(one.allocated_gpu_hours)
        assert d.idle_gpu_hours == pytest.approx(one.idle_gpu_hours, abs=1e-9)
        assert d.used_gpu_hours == pytest.approx(one.used_gpu_hours)
    assert report.idle_gpu_hours > 0  # the simulated jobs leave some GPUs idle
    # the days alone (the Overview's chart): the report's, nothing priced
    days = usage_days(simulated, TWO_DAYS, now=NOW, idle=RULE)
    assert [u.day for u in days] == [d.day for d in report.days]
    for u, d in zip(days, report.days, strict=True):  # polars sums in any order: to rounding
        got = (u.allocated_gpu_hours, u.used_gpu_hours, u.idle_gpu_hours)
        assert got == pytest.approx((d.allocated_gpu_hours, d.used_gpu_hours, d.idle_gpu_hours))
    tenant = report.worst_jobs[0].tenant
    mine = idle_report(simulated, TWO_DAYS, now=NOW, idle=RULE, prices=book, tenant=tenant)
    held = [
        u.allocated_gpu_hours
        for u in usage_days(simulated, TWO_DAYS, now=NOW, idle=RULE, tenant=tenant)
    ]
    assert held == pytest.approx([d.allocated_gpu_hours for d in mine.days])
    assert held != pytest.approx([d.allocated_gpu_hours for d in report.days])
