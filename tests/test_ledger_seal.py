"""Sealed days: a finished day's usage rows are kept, read back instead of the minutes while its
data stays the same, and computed live again once a late sample or job event changes it.

Days D0, D1, D2 (UTC), samples every minute from D0 00:00 to D3 00:00. idle: every sample under
5% for at least 30 minutes of the job's own interval. Each job is its own tenant.

  GPU  utilisation               job  held                    used                 idle
  G1   80%, 0% D0 22:00-D1 02:00  jA   D0 20:00 - D1 04:00     .8 x 4 h = 3.2       4 h (2 + 2)
                                 jC   D1 12:00 - D1 12:20     .8 x 1/3 h           0
  G2   50% all the time          jB   D0 10:00 - D2 12:00     .5 x 50 h = 25       0

jA's idle run crosses midnight: D0's seal holds its first 2 hours, judged by the whole run.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from decimal import Decimal
from unittest import mock

import polars as pl
import pytest
from conftest import idle_rule, ledger_between, recent, simulate, usage_between
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent, Price
from warehouse.analytics import fleet
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import seal
from warehouse.ledger.cost_change import why_cost
from warehouse.ledger.tail import LiveTail, kept_fleet_hourly
from warehouse.times import month_start, next_month, same_days_before

D0 = recent(dt.datetime(2026, 11, 2, tzinfo=dt.UTC), margin=dt.timedelta(days=4))
DAY = dt.timedelta(days=1)
D1, D2, D3 = D0 + DAY, D0 + 2 * DAY, D0 + 3 * DAY


def h(hours: float) -> dt.datetime:
    return D0 + dt.timedelta(hours=hours)


UTIL = {
    "G1": lambda t: 0.0 if h(22) <= t < h(26) else 0.8,
    "G2": lambda t: 0.5,
}
JOBS = {  # job: (GPU, start, end)
    "jA": ("G1", h(20), h(28)),
    "jB": ("G2", h(10), h(60)),
    "jC": ("G1", h(36), h(36 + 20 / 60)),
}
EXPECT = {  # tenant: (allocated, used, idle) GPU-hours over [D0, D3)
    "t-jA": (8.0, 3.2, 4.0),
    "t-jB": (50.0, 25.0, 0.0),
    "t-jC": (1 / 3, 0.8 / 3, 0.0),
}


def _samples(times: list[dt.datetime], util: float | None = None) -> pl.DataFrame:
    nulls = (None,) * 10
    rows = [
        (t, "c1", "n1", g, i, "H100", "nvidia", "", "", u, *nulls, "", "", "", "", "t")
        for i, (g, f) in enumerate(UTIL.items())
        for t in times
        for u in [f(t) if util is None else util]
    ]
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


def _job(job: str, gpu: str, start: dt.datetime, end: dt.datetime) -> list[JobEvent]:
    started = JobEvent(
        start,
        "c1",
        job,
        "started",
        tenant=f"t-{job}",
        pool="p1",
        gpu_model="H100",
        gpus_requested=1,
        gpu_fraction=1.0,
        node="n1",
        gpu_uuids=(gpu,),
    )
    return [started, started._replace(ts=end, event="finished", started_at=start)]


@pytest.fixture
def ingest(wh: Warehouse) -> Ingestor:
    ing = Ingestor(wh, 35, now=lambda: D3 + dt.timedelta(hours=2))
    before = D0 - DAY
    gpus = [GpuInventory(before, "c1", "p1", "n1", g, i, "H100") for i, g in enumerate(UTIL)]
    assert ing.write_gpus(gpus).quarantined_total == 0
    minutes = [D0 + dt.timedelta(minutes=k) for k in range(3 * 1440)]
    assert ing.write_samples(_samples(minutes)).quarantined_total == 0
    events = [e for job, (gpu, start, end) in JOBS.items() for e in _job(job, gpu, start, end)]
    assert ing.write_job_events(events).quarantined_total == 0
    ing.write_config(prices=[Price(before, "H100", "2.00")])
    return ing


def _seal(wh: Warehouse, **kw: float) -> seal.SealReport:
    now = dt.datetime.now(dt.UTC)
    return seal.seal_days(wh, idle=idle_rule(**kw), now=now, since=D0.date(), until=D3.date())


def _figures(wh: Warehouse, start: dt.datetime, end: dt.datetime, **kw: object) -> dict:  # type: ignore[type-arg]
    ledger = ledger_between(wh, start, end, cluster="c1", **kw)  # type: ignore[arg-type]
    return {r.key: (r.allocated_gpu_hours, r.used_gpu_hours, r.idle_gpu_hours) for r in ledger.rows}


def _same(got: dict, want: dict) -> None:  # type: ignore[type-arg]
    assert got.keys() == want.keys()
    for key, figures in want.items():
        assert got[key] == pytest.approx(figures, abs=1e-6), key


def test_sealed_days_give_the_hand_computed_figures(ingest: Ingestor) -> None:
    wh = ingest.wh
    report = _seal(wh)
    assert report.sealed == (D0.date(), D1.date(), D2.date())
    assert report.usage_rows == 2 + 3 + 1  # jA on D0 and D1, jB on all three, jC on D1
    again = _seal(wh)
    assert again.sealed == () and again.still_sealed == 3
    _same(_figures(wh, D0, D3), EXPECT)
    _same(_figures(wh, D0, D3, sealed=False), EXPECT)
    # read from the seals: a row per interval and day, the days' rows adding up
    rows = usage_between(wh, D0, D3).filter(pl.col("job_id") == "jB").sort("s")
    assert rows["s"].to_list() == [h(10), D1, D2] and rows["e"].to_list() == [D1, D2, h(60)]
    assert usage_between(wh, D0, D3, sealed=False).filter(pl.col("job_id") == "jB").height == 1
    first = usage_between(wh, D0, D1).filter(pl.col("job_id") == "jA")
    assert first["idle_gpu_hours"].to_list() == [pytest.approx(2.0)]  # judged by its 4 hours


def test_partial_days_at_the_edges_are_computed_live(
    ingest: Ingestor, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = ingest.wh
    _seal(wh)
    start = h(21)  # D0 21:00 to D3: D1 and D2 sealed, the head live
    got = _figures(wh, start, D3)
    _same(got, _figures(wh, start, D3, sealed=False))
    assert got["t-jA"] == pytest.approx((7.0, 0.8 * 3, 4.0))
    assert got["t-jB"] == pytest.approx((39.0, 19.5, 0.0))
    jb = usage_between(wh, start, D3).filter(pl.col("job_id") == "jB").sort("s")
    assert jb["s"].to_list() == [start, D1, D2]  # live head, sealed D1 and D2
    # edges on both sides: one live query is cheaper than two around a few sealed rows ...
    end = h(51)  # D2 03:00
    assert usage_between(wh, start, end).filter(pl.col("job_id") == "jB").height == 1
    # ... and where the sealed rows stand for more minutes, the edges are live and D1 sealed
    monkeypatch.setattr(seal, "_LIVE_QUERY_ROWS", 0)
    jb = usage_between(wh, start, end).filter(pl.col("job_id") == "jB").sort("s")
    assert jb["s"].to_list() == [start, D1, D2]
    got = _figures(wh, start, end)
    _same(got, _figures(wh, start, end, sealed=False))
    assert got["t-jB"] == pytest.approx((30.0, 15.0, 0.0))


def test_a_late_sample_puts_its_day_back_on_the_live_query(ingest: Ingestor) -> None:
    wh = ingest.wh
    _seal(wh)
    # G1 at 90% in the middle of jC's 20 minutes, half a minute after the minute's sample
    late = _samples([h(36 + 10 / 60) + dt.timedelta(seconds=30)], util=0.9)
    assert ingest.write_samples(late.filter(pl.col("gpu_uuid") == "G1")).quarantined_total == 0
    minute = (0.8 + 0.9) / 2 - 0.8  # that minute's mean utilisation rises by 0.05
    want = {**EXPECT, "t-jC": (1 / 3, 0.8 / 3 + minute / 60, 0.0)}
    _same(_figures(wh, D0, D3), want)
    _same(_figures(wh, D0, D3, sealed=False), want)
    report = _seal(wh)
    assert report.sealed == (D1.date(),) and report.still_sealed == 2
    _same(_figures(wh, D0, D3), want)
    assert usage_between(wh, D0, D3).filter(pl.col("job_id") == "jB").height == 3  # sealed again


def _kept_rows(wh: Warehouse) -> dict[dt.date, dict[int, int]]:
    """ledger_days' rows per day and seal id."""
    kept: dict[dt.date, dict[int, int]] = {}
    for day, seal_id, n in wh.rows(
        f"SELECT day, seal_id, count() FROM {wh.database}.ledger_days GROUP BY day, seal_id"
    ):
        kept.setdefault(day, {})[seal_id] = n
    return kept


def test_sealing_a_day_again_deletes_the_rows_of_the_seal_it_replaces(ingest: Ingestor) -> None:
    wh = ingest.wh
    _seal(wh)
    before = _kept_rows(wh)
    assert {day: sum(ids.values()) for day, ids in before.items()} == {
        D0.date(): 2,
        D1.date(): 3,
        D2.date(): 1,
    }
    late = _samples([h(36 + 10 / 60) + dt.timedelta(seconds=30)], util=0.9)
    assert ingest.write_samples(late.filter(pl.col("gpu_uuid") == "G1")).quarantined_total == 0
    assert _seal(wh).sealed == (D1.date(),)
    after = _kept_rows(wh)
    latest = seal.seals(wh, seal.day_number(D1), seal.day_number(D2), idle_rule())
    ((new_id, _, _, rows, _),) = latest.values()
    assert after[D1.date()] == {new_id: rows} and new_id not in before[D1.date()]
    assert after[D0.date()] == before[D0.date()] and after[D2.date()] == before[D2.date()]
    # another setting's seals of the same day are not this one's to delete
    _seal(wh, idle_threshold_ratio=0.6)
    assert ingest.write_job_events(_job("jD", "G1", h(40), h(41))).quarantined_total == 0
    assert _seal(wh).sealed == (D1.date(),)
    kept = _kept_rows(wh)[D1.date()]
    assert len(kept) == 2 and new_id not in kept  # the 60% seal and the new 5% one
    minute = (0.8 + 0.9) / 2 - 0.8
    want = {**EXPECT, "t-jC": (1 / 3, 0.8 / 3 + minute / 60, 0.0), "t-jD": (1.0, 0.8, 0.0)}
    _same(_figures(wh, D0, D3), want)


@pytest.mark.parametrize("cluster", ["c1", ""])
def test_a_seal_replaced_while_being_read_gives_way_to_the_live_query(
    ingest: Ingestor, cluster: str
) -> None:
    """A reader picks D1's seal; before it reads the rows, a sealer replaces that seal and
    deletes them: the reader finds fewer rows than the seal recorded and computes live."""
    wh = ingest.wh
    _seal(wh)
    ((d1_id, *_),) = seal.seals(wh, seal.day_number(D1), seal.day_number(D2), idle_rule()).values()
    seal._drop_rows(wh, seal.day_number(D1), d1_id, "")
    assert D1.date() not in _kept_rows(wh)
    ledger = ledger_between(wh, D0, D3, cluster=cluster)
    got = {r.key: (r.allocated_gpu_hours, r.used_gpu_hours, r.idle_gpu_hours) for r in ledger.rows}
    _same(got, EXPECT)
    rows = usage_between(wh, D0, D3, cluster=cluster).filter(pl.col("job_id") == "jB")
    assert rows.height == 1  # one live query over the whole window


def test_a_late_job_event_puts_its_day_back_on_the_live_query(ingest: Ingestor) -> None:
    wh = ingest.wh
    _seal(wh)
    assert ingest.write_job_events(_job("jD", "G1", h(50), h(52))).quarantined_total == 0
    want = {**EXPECT, "t-jD": (2.0, 1.6, 0.0)}
    _same(_figures(wh, D0, D3), want)
    assert _seal(wh).sealed == (D2.date(),)
    _same(_figures(wh, D0, D3), want)


def test_seals_are_kept_per_idle_setting(ingest: Ingestor) -> None:
    wh = ingest.wh
    _seal(wh)
    # at a 60% threshold G2's 50% is idle: not what the 5% seals hold
    want = {"t-jA": (8.0, 3.2, 4.0), "t-jB": (50.0, 25.0, 50.0), "t-jC": (1 / 3, 0.8 / 3, 0.0)}
    _same(_figures(wh, D0, D3, idle_threshold_ratio=0.6), want)
    assert _seal(wh, idle_threshold_ratio=0.6).sealed == (D0.date(), D1.date(), D2.date())
    _same(_figures(wh, D0, D3, idle_threshold_ratio=0.6), want)
    _same(_figures(wh, D0, D3), EXPECT)


def test_minutes_dropped_after_sealing_leave_the_sealed_figures(ingest: Ingestor) -> None:
    wh = ingest.wh
    _seal(wh)
    # as retention drops old minutes: D0's go (and with them the margin of D1's query)
    wh.command(
        f"ALTER TABLE {wh.database}.gpu_minutes_1h DELETE WHERE ts < {{d1:DateTime}}",
        {"d1": D1},
        settings={"mutations_sync": 2},
    )
    _same(_figures(wh, D0, D3), EXPECT)
    live = _figures(wh, D0, D3, sealed=False)
    assert live["t-jB"][1] == pytest.approx(25.0 - 0.5 * 14)  # D0's 14 hours of jB are gone


def test_the_sealer_thread_seals_the_finished_days_until_stopped(ingest: Ingestor) -> None:
    wh, stop = ingest.wh, threading.Event()
    thread = seal.start_sealer(
        wh,
        stop,
        interval_s=0.2,
        first_after_s=0.0,
        idle=idle_rule(),
        clock=lambda: dt.datetime.now(dt.UTC),
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_sealed_days(wh)) < 3:
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert _sealed_days(wh) == [D0.date(), D1.date(), D2.date()]  # each day once
    assert _seal(wh).sealed == ()


def _sealed_days(wh: Warehouse) -> list[dt.date]:
    return [r[0] for r in wh.rows(f"SELECT day FROM {wh.database}.ledger_seals ORDER BY day")]


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 10_000), start_h=st.integers(0, 47), hours=st.integers(1, 54))
def test_sealed_days_change_no_figure_of_a_random_cluster(
    wh: Warehouse, seed: int, start_h: int, hours: int
) -> None:
    """A simulated cluster (2 days of 8 GPUs, through ingest), sealed: any window's ledger is
    the one computed from the minutes alone, edges at any hour (each example its own
    cluster, in one database)."""
    cluster = f"sealed-{seed}"
    now = recent(dt.datetime(2026, 11, 20, 6, tzinfo=dt.UTC))
    simulate(wh, cluster=cluster, days=2, gpus=8, seed=seed, now=now)
    report = seal.seal_days(wh, idle=idle_rule(), now=dt.datetime.now(dt.UTC))
    assert report.sealed or report.still_sealed
    start = now.replace(hour=0) - 2 * DAY + dt.timedelta(hours=start_h)
    end = min(start + dt.timedelta(hours=hours), now)
    with mock.patch.object(seal, "_LIVE_QUERY_ROWS", 0):  # edges live around any sealed day
        ledgers = [ledger_between(wh, start, end, cluster=cluster, sealed=s) for s in (True, False)]
    sealed, live = ({r.key: r for r in ledger.rows} for ledger in ledgers)
    assert sealed.keys() == live.keys()
    for key, row in live.items():
        got = sealed[key]
        for figure in ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours"):
            assert getattr(got, figure) == pytest.approx(getattr(row, figure), abs=1e-6), key
        assert abs(got.total_cost - row.total_cost) <= Decimal("0.01"), key
    assert ledgers[0].totals.capacity_cost == ledgers[1].totals.capacity_cost


def test_a_kept_tail_checks_the_sealed_days_as_of_its_pass(ingest: Ingestor) -> None:
    """The server's live tail keeps the sealed days' fingerprints of its pass: a page's read as
    of that instant checks its sealed days against them (the same as asking, day by day or
    over any span), and a late sample shows from the next pass on."""
    wh = ingest.wh
    _seal(wh)
    at = D3 + dt.timedelta(hours=2)
    rule = idle_rule()
    kept = LiveTail(wh, rule, every_s=60, clock=lambda: at)
    tail = kept.refresh()
    d0, d3 = seal.day_number(D0), seal.day_number(D3)
    asked = seal.fingerprints(wh, d0, d3, rule)
    assert len(asked) == 3 and {d: tail.fingerprints[d] for d in asked} == asked
    assert all(seal.fingerprints(wh, d, d + 1, rule) == {d: asked[d]} for d in asked)
    with kept.offered():
        _same(_figures(wh, D0, D3, now=at), EXPECT)
        assert kept.fingerprints_served == 1
        late = _samples([h(36 + 10 / 60) + dt.timedelta(seconds=30)], util=0.9)
        assert ingest.write_samples(late.filter(pl.col("gpu_uuid") == "G1")).quarantined_total == 0
        # as of the pass the seal holds for it: its ledger is the one made of that pass
        _same(_figures(wh, D0, D3, now=at), EXPECT)
        assert (kept.fingerprints_served, kept.made_served) == (1, 1)
        minute = (0.8 + 0.9) / 2 - 0.8
        want = {**EXPECT, "t-jC": (1 / 3, 0.8 / 3 + minute / 60, 0.0)}
        _same(_figures(wh, D0, D3, now=at + dt.timedelta(seconds=1)), want)  # another instant
        kept.refresh()
        _same(_figures(wh, D0, D3, now=at), want)  # the next pass sees it
        assert (kept.fingerprints_served, kept.made_served) == (2, 1)


def test_a_kept_tail_holds_the_rows_of_the_seals_it_found(ingest: Ingestor) -> None:
    """The live tail keeps the rows of its days' latest seals, read once per seal: a read as
    of any instant takes them instead of asking, and a day sealed again is read from the
    warehouse until a pass holds its new seal's rows."""
    wh = ingest.wh
    _seal(wh)
    at = D3 + dt.timedelta(hours=2)
    rule = idle_rule()
    kept = LiveTail(wh, rule, every_s=60, clock=lambda: at)
    tail = kept.refresh()
    d0, d1, d3 = seal.day_number(D0), seal.day_number(D1), seal.day_number(D3)
    latest = seal.seals(wh, d0, d3, rule)
    assert set(tail.sealed_rows) == {s[0] for s in latest.values()}
    assert {s[0]: tail.sealed_rows[s[0]].height for s in latest.values()} == {
        s[0]: s[3] for s in latest.values()
    }
    assert sum(f.height for f in tail.sealed_rows.values()) == 2 + 3 + 1
    later = at + dt.timedelta(seconds=1)  # not the pass's instant: the rows serve any
    with kept.offered():
        _same(_figures(wh, D0, D3, now=later), EXPECT)
        assert kept.sealed_rows_served == 1
        late = _samples([h(36 + 10 / 60) + dt.timedelta(seconds=30)], util=0.9)
        assert ingest.write_samples(late.filter(pl.col("gpu_uuid") == "G1")).quarantined_total == 0
        assert _seal(wh).sealed == (D1.date(),)
        minute = (0.8 + 0.9) / 2 - 0.8
        want = {**EXPECT, "t-jC": (1 / 3, 0.8 / 3 + minute / 60, 0.0)}
        _same(_figures(wh, D0, D3, now=later), want)  # D1's new seal is not kept: asked
        assert kept.sealed_rows_served == 1
        again = kept.refresh()
        resealed = seal.seals(wh, d1, d1 + 1, rule)[d1][0]
        assert resealed in again.sealed_rows and latest[d1][0] not in again.sealed_rows
        assert again.sealed_rows[latest[d0][0]] is tail.sealed_rows[latest[d0][0]]  # read once
        _same(_figures(wh, D0, D3, now=later), want)
        assert kept.sealed_rows_served == 2


def test_a_kept_tail_holds_the_hours_the_month_over_month_cuts_last_month_at(
    ingest: Ingestor,
) -> None:
    """A month over month as of the tail's instant compares with the month before cut at the
    same point (D1 in the morning here): the tail has that day's hours before the cut, and the
    comparison is the one computed without it."""
    wh = ingest.wh
    _seal(wh)
    first = next_month(D1)
    at = first + (D1 - month_start(D1)) + dt.timedelta(hours=5)
    cut = same_days_before(at)
    assert D1 < cut < D1 + dt.timedelta(hours=5)
    rule = idle_rule()
    want = why_cost(wh, f"{at:%Y-%m}", now=at, idle=rule, cluster="c1").to_json()
    kept = LiveTail(wh, rule, every_s=60, clock=lambda: at)
    assert (D1, cut) in kept.refresh().rows
    with kept.offered():
        got = why_cost(wh, f"{at:%Y-%m}", now=at, idle=rule, cluster="c1").to_json()
        assert kept.served == 1 + (at.day == 1)  # and this month's, all today's on its 1st
    assert got == want
    assert got["previous"]["gpu_hours"] > 0  # jA's and jB's hours up to the cut


def test_a_kept_tail_holds_the_fleets_hours_up_to_its_instant(ingest: Ingestor) -> None:
    """The tail keeps the whole fleet's hours up to its instant: a window from a midnight to
    that instant, or to a whole hour before it, gets the rows asking gives; a window it cuts
    elsewhere, or another instant, asks."""
    wh = ingest.wh
    at = D3 - dt.timedelta(minutes=20)  # the samples end at D3: the last hour is cut
    kept = LiveTail(wh, idle_rule(), every_s=60, clock=lambda: at)
    kept.refresh()
    with kept.offered():
        for start, end in ((D0, at), (D1, at), (D0, D2), (D1, h(40))):
            got = kept_fleet_hourly(wh, start, end, now=at)
            assert got is not None and got.height == (end - start) // dt.timedelta(hours=1) + (
                end == at
            )
            assert_frame_equal(got, fleet.fleet_hourly(wh, "", start, end))
        assert kept_fleet_hourly(wh, D0, at - dt.timedelta(minutes=5), now=at) is None
        assert kept_fleet_hourly(wh, D0, at, now=at + dt.timedelta(seconds=1)) is None
    assert kept.served == 4
