"""Sealed hours of the day under way: the usage rows of [midnight, cut) are kept once the hours
they read are over, so that a window ending now computes only its last hours live, and the
figures stay those of the minutes alone.

Day T (UTC), "now" T 15:20; samples every minute from T - 1 day to now; idle: every sample under
5% for at least 30 minutes of the job's own interval, so the cut is 15:20 - 31 min - 10 min -
1 h, to the hour: 13:00.

  GPU  utilisation                 job  held                  allocated  used              idle
  G1   80%, 0% T 11:00-14:00       jA   T-1 22:00 - (running)   15 1/3    .8 x 12 1/3       3
  G2   50% all the time            jB   T 06:00 - T 14:50        8 5/6    .5 x 8 5/6        0
                                   jC   T 15:00 - (running)      1/3      .5 x 1/3          0
(figures over [T, now)). jA's idle run crosses the cut; jB ends after the cut's margin, and its
end reaches the warehouse after its hours were sealed.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

import polars as pl
import pytest
from conftest import eventually, idle_rule, ledger_between, recent, usage_between
from polars.testing import assert_frame_equal

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent, Price
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import (
    PriceBook,
    Window,
    idle_now,
    idle_report,
    load_price_book,
    month_window,
    seal,
)
from warehouse.ledger.tail import MADE_PER_PASS, LiveTail, kept_made
from warehouse.times import same_days_before

T = recent(dt.datetime(2026, 11, 2, tzinfo=dt.UTC), margin=dt.timedelta(days=3))
DAY, HOUR = dt.timedelta(days=1), dt.timedelta(hours=1)
NOW = T + dt.timedelta(hours=15, minutes=20)
CUT = T + 13 * HOUR
UTIL = {
    "G1": lambda t: 0.0 if T + 11 * HOUR <= t < T + 14 * HOUR else 0.8,
    "G2": lambda t: 0.5,
}
EXPECT = {  # tenant: (allocated, used, idle) GPU-hours over [T, NOW)
    "t-jA": (15 + 1 / 3, 0.8 * (12 + 1 / 3), 3.0),
    "t-jB": (8 + 5 / 6, 0.5 * (8 + 5 / 6), 0.0),
    "t-jC": (1 / 3, 0.5 / 3, 0.0),
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


def _started(job: str, gpu: str, start: dt.datetime) -> JobEvent:
    return JobEvent(
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


def _finished(job: str, gpu: str, start: dt.datetime, end: dt.datetime) -> JobEvent:
    return _started(job, gpu, start)._replace(ts=end, event="finished", started_at=start)


@pytest.fixture
def ingest(wh: Warehouse) -> Ingestor:
    """Everything but jB's end, which arrives after the first seal."""
    ing = Ingestor(wh, 35, now=lambda: NOW + 2 * DAY)
    before = T - 2 * DAY
    gpus = [GpuInventory(before, "c1", "p1", "n1", g, i, "H100") for i, g in enumerate(UTIL)]
    assert ing.write_gpus(gpus).quarantined_total == 0
    first = T - DAY
    minutes = [
        first + dt.timedelta(minutes=k) for k in range((NOW - first) // dt.timedelta(minutes=1))
    ]
    assert ing.write_samples(_samples(minutes)).quarantined_total == 0
    events = [
        _started("jA", "G1", T - 2 * HOUR),
        _started("jB", "G2", T + 6 * HOUR),
        _started("jC", "G2", T + 15 * HOUR),
    ]
    assert ing.write_job_events(events).quarantined_total == 0
    ing.write_config(prices=[Price(before, "H100", "2.00")])
    return ing


def _figures(wh: Warehouse, start: dt.datetime, end: dt.datetime, **kw: object) -> dict:  # type: ignore[type-arg]
    ledger = ledger_between(wh, start, end, now=NOW, cluster="c1", **kw)  # type: ignore[arg-type]
    return {r.key: (r.allocated_gpu_hours, r.used_gpu_hours, r.idle_gpu_hours) for r in ledger.rows}


def _same(got: dict, want: dict) -> None:  # type: ignore[type-arg]
    assert got.keys() == want.keys()
    for key, figures in want.items():
        assert got[key] == pytest.approx(figures, abs=1e-6), key


def _rows(wh: Warehouse, start: dt.datetime, end: dt.datetime, **kw: object) -> pl.DataFrame:
    return usage_between(wh, start, end, now=NOW, cluster="c1", **kw)  # type: ignore[arg-type]


def _kept(wh: Warehouse, day: dt.date) -> dict[int, int]:
    """ledger_days' rows of ``day`` per seal id."""
    return dict(
        wh.rows(
            f"SELECT seal_id, count() FROM {wh.database}.ledger_days WHERE day = {{d:Date}} "
            "GROUP BY seal_id",
            {"d": day},
        )
    )


def _seal_at(wh: Warehouse, now: dt.datetime) -> seal.SealReport:
    return seal.seal_days(wh, idle=idle_rule(), now=now, since=(T - DAY).date())


def _today(wh: Warehouse) -> seal.Seal:
    d = seal.day_number(T)
    return seal.seals(wh, d, d + 1, idle_rule())[d]


def _end_the_first_seal(ingest: Ingestor) -> seal.SealReport:
    """Seal at 14:45 (jB still running), then let jB's end arrive."""
    report = _seal_at(ingest.wh, T + dt.timedelta(hours=14, minutes=45))
    jb = _finished("jB", "G2", T + 6 * HOUR, T + dt.timedelta(hours=14, minutes=50))
    assert ingest.write_job_events([jb]).quarantined_total == 0
    return report


def test_the_finished_hours_of_today_are_sealed_and_give_the_minutes_figures(
    ingest: Ingestor,
) -> None:
    wh = ingest.wh
    report = _end_the_first_seal(ingest)
    assert report.sealed == ((T - DAY).date(),) and report.hours_until == CUT
    assert seal.hours_cut(NOW, idle_rule()) == CUT
    assert _today(wh)[4] == CUT
    # jB ended after the cut's margin: the seal still holds, nothing to seal again
    again = _seal_at(wh, NOW)
    assert again.sealed == () and again.hours_until is None
    _same(_figures(wh, T, NOW), EXPECT)
    _same(_figures(wh, T, NOW, sealed=False), EXPECT)
    for start, end in [(T, NOW + HOUR), (T - DAY + 5 * HOUR, NOW), (T, CUT + 10 * HOUR)]:
        _same(_figures(wh, start, end), _figures(wh, start, end, sealed=False))
    # read from the seal: jA and jB have a row before the cut and one after
    sealed, live = _rows(wh, T, NOW), _rows(wh, T, NOW, sealed=False)
    assert sealed.height == live.height + 2
    assert sealed.filter(pl.col("e") == CUT)["job_id"].sort().to_list() == ["jA", "jB"]
    # jB's end came after the seal: its sealed row says how it ended, as the live row does
    ends = dict(sealed.group_by("job_id").agg(pl.col("end_event").unique()).iter_rows())
    assert {job: sorted(e) for job, e in ends.items()} == {
        "jA": [""],
        "jB": ["finished"],
        "jC": [""],
    }


def test_a_window_that_ends_before_the_cut_is_computed_live(ingest: Ingestor) -> None:
    wh = ingest.wh
    _end_the_first_seal(ingest)
    end = CUT - HOUR
    assert _rows(wh, T, end).height == _rows(wh, T, end, sealed=False).height
    _same(_figures(wh, T, end), _figures(wh, T, end, sealed=False))


def test_a_late_sample_before_the_cut_reopens_the_hours_until_sealed_again(
    ingest: Ingestor,
) -> None:
    wh = ingest.wh
    _end_the_first_seal(ingest)
    (old_id,) = _kept(wh, T.date())
    late = _samples([T + dt.timedelta(hours=11, minutes=20, seconds=20)], util=0.9)
    assert ingest.write_samples(late.filter(pl.col("gpu_uuid") == "G1")).quarantined_total == 0
    # G1 is busy in the minute 11:20: computed live, jA idle 11:21-14:00 only (11:00-11:20 is
    # too short)
    sealed = _rows(wh, T, NOW)
    assert sealed.height == _rows(wh, T, NOW, sealed=False).height
    got = _figures(wh, T, NOW)
    assert got["t-jA"][2] == pytest.approx(2 + 39 / 60, abs=1e-6)
    _same(got, _figures(wh, T, NOW, sealed=False))
    report = _seal_at(wh, NOW)
    assert report.hours_until == CUT
    (new_id,) = _kept(wh, T.date())  # the replaced seal's rows are gone
    assert new_id != old_id and _today(wh)[0] == new_id
    assert _rows(wh, T, NOW).height == _rows(wh, T, NOW, sealed=False).height + 2
    _same(_figures(wh, T, NOW), got)


def test_the_cut_follows_the_clock_and_the_whole_day_replaces_it(ingest: Ingestor) -> None:
    wh = ingest.wh
    _end_the_first_seal(ingest)
    later = _seal_at(wh, NOW + HOUR)
    assert later.hours_until == CUT + HOUR and _today(wh)[4] == CUT + HOUR
    (only,) = _kept(wh, T.date())
    assert only == _today(wh)[0]
    # read at the old "now", the seal of [T, 14:00) still serves: its hours were over then
    assert _rows(wh, T, NOW).height == _rows(wh, T, NOW, sealed=False).height + 2
    _same(_figures(wh, T, NOW), EXPECT)
    # the next day, the whole day is sealed in its place (no sample after NOW: the same rows)
    tomorrow = _seal_at(wh, T + DAY + 2 * HOUR)
    assert T.date() in tomorrow.sealed and _today(wh)[4] is None
    assert len(_kept(wh, T.date())) == 1
    _same(_figures(wh, T, NOW), EXPECT)


def _sorted(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.sort("job_id", "gpu_uuid", "s")


def test_a_kept_tail_answers_the_live_hours_as_of_its_instant_alone(ingest: Ingestor) -> None:
    wh = ingest.wh
    _end_the_first_seal(ingest)
    end = T + DAY  # the dashboard's window: up to today, included
    month_end = month_window(f"{NOW:%Y-%m}").end  # where the Cost page's month ends
    want_rows, want = _rows(wh, T, end), _figures(wh, T, end)
    month_figures = _figures(wh, T, month_end)
    idle_days = idle_report(wh, Window(T, end), now=NOW, idle=idle_rule(), prices=_prices(wh))
    clock = [NOW + dt.timedelta(microseconds=400)]
    kept = LiveTail(wh, idle_rule(), every_s=60, clock=lambda: clock[0])
    assert kept.now() == clock[0]  # nothing kept yet: the clock
    tail = kept.refresh()
    before = same_days_before(NOW)  # where the Cost page's month over month cuts the last month
    midnight = before.replace(hour=0, minute=0, second=0, microsecond=0)
    spans = {(CUT, end), (CUT, month_end)} | ({(midnight, before)} if before != midnight else set())
    assert (tail.start, tail.now, set(tail.rows)) == (CUT, NOW, spans)
    with kept.offered():
        assert kept.now() == NOW
        assert_frame_equal(_sorted(_rows(wh, T, end)), _sorted(want_rows))
        _same(_figures(wh, T, end), want)
        assert kept.served == 2
        # today's sealed hours were checked against the pass's fingerprints, not asked again
        assert kept.fingerprints_served == 2
        got = idle_report(wh, Window(T, end), now=NOW, idle=idle_rule(), prices=_prices(wh))
        assert [(d.day, d.idle_cost) for d in got.days] == [
            (d.day, d.idle_cost) for d in idle_days.days
        ]
        assert [d.allocated_gpu_hours for d in got.days] == pytest.approx(
            [d.allocated_gpu_hours for d in idle_days.days]
        )
        assert kept.served == 4  # its usage rows and its GPUs idle now
        # another cluster gets its own rows (none), another instant or window computes live
        assert usage_between(wh, T, end, now=NOW, cluster="c2").height == 0
        assert kept.served == 5
        # the month's window ends at the next month's first: kept as well (on a month's last
        # day it is the window above, whose ledger this pass has made already)
        _same(_figures(wh, T, month_end), month_figures)
        made_before = month_end == end
        assert (kept.served, kept.made_served) == ((5, 1) if made_before else (6, 0))
        served = kept.served
        _rows(wh, T, end + DAY if end + DAY != month_end else end + 2 * DAY)
        usage_between(wh, T, end, now=NOW + dt.timedelta(seconds=1), cluster="c1")
        usage_between(wh, T, end, now=NOW, cluster="c1", idle_min_duration_s=600)
        assert kept.served == served
        # three passes without a refresh: the tail is not offered, the pages read the clock
        clock[0] = NOW + dt.timedelta(minutes=3)
        assert kept.current() is None and kept.now() == clock[0]
        _rows(wh, T, end)
        assert kept.served == served
    # once no longer offered, nobody reads it
    clock[0] = NOW
    _rows(wh, T, end)
    assert kept.served == served


def _prices(wh: Warehouse) -> PriceBook:
    return load_price_book(wh, "USD")


def test_a_kept_tail_answers_the_gpus_idle_at_its_instant(ingest: Ingestor) -> None:
    wh = ingest.wh
    _end_the_first_seal(ingest)
    at = T + dt.timedelta(hours=13, minutes=50)  # G1 idle since 11:00, in jA's hands
    rule, prices = idle_rule(), _prices(wh)
    asked = [("c1", None), ("c1", "t-jA"), ("", "t-jB"), ("c2", None), ("", "t")]
    want = {a: idle_now(wh, at, idle=rule, prices=prices, cluster=a[0], tenant=a[1]) for a in asked}
    assert [r.job_id for r in want[("c1", None)]] == ["jA"]
    kept = LiveTail(wh, rule, every_s=60, clock=lambda: at)
    kept.refresh()
    with kept.offered():
        for (cluster, tenant), idle in want.items():
            assert (
                idle_now(wh, at, idle=rule, prices=prices, cluster=cluster, tenant=tenant) == idle
            )
        assert kept.served == len(asked)
        idle_now(wh, at + dt.timedelta(seconds=1), idle=rule, prices=prices, cluster="c1")
        assert kept.served == len(asked)


def test_a_pass_the_warehouse_refuses_is_logged_and_the_next_one_tried(
    ingest: Ingestor, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's refresher outlives a failed pass: it logs why, its old tail ages out (the
    pages compute live meanwhile), and the next pass that succeeds is offered again."""
    wh = ingest.wh
    clock = [NOW]
    kept = LiveTail(wh, idle_rule(), every_s=0.05, clock=lambda: clock[0])
    stop = threading.Event()
    thread = kept.start(stop)
    try:
        eventually(lambda: kept.current() is not None, 120, "the first pass")
        away = f"RENAME TABLE {wh.database}.allocations TO {wh.database}.allocations_away"
        wh.command(away)
        try:
            with caplog.at_level(logging.ERROR, logger="warehouse.ledger.tail"):
                clock[0] = NOW + dt.timedelta(minutes=1)
                eventually(
                    lambda: "computing the live tail failed" in caplog.text, 120, "the failure"
                )
            assert thread.is_alive()
            assert kept.current() is None and kept.now() == clock[0]  # aged out: the clock
        finally:
            wh.command(f"RENAME TABLE {wh.database}.allocations_away TO {wh.database}.allocations")
        clock[0] = NOW + dt.timedelta(minutes=2)
        eventually(lambda: kept.now() == NOW + dt.timedelta(minutes=2), 120, "the next pass")
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


def test_an_answer_made_of_a_pass_is_made_once_and_kept_with_it_alone(ingest: Ingestor) -> None:
    """kept_made: the first to ask a key of a pass makes it and those asking at the same time
    wait for it; asked again of that pass it is not made again; the next pass, another
    instant, or no tail at all make it anew; a make that fails keeps nothing; a pass keeps at
    most MADE_PER_PASS answers (the rest are made each time)."""
    wh = ingest.wh
    rule = idle_rule()
    made: list[str] = []
    gate = threading.Event()

    def make(what: str, wait: bool = False) -> str:
        if wait:
            gate.wait(10)
        made.append(what)
        return f"{what}#{len(made)}"

    assert kept_made(wh, NOW, rule, "k", lambda: make("k")) == "k#1"  # nothing offered
    clock = [NOW]
    kept = LiveTail(wh, rule, every_s=60, clock=lambda: clock[0])
    kept.refresh()
    with kept.offered():
        got: list[str] = []
        askers = [
            threading.Thread(target=lambda f=f: got.append(kept_made(wh, NOW, rule, "k", f)))
            for f in (lambda: make("k", wait=True), lambda: make("k"))
        ]
        for a in askers:
            a.start()
        eventually(lambda: kept.current() is not None and len(kept.current().made) == 1)
        gate.set()
        for a in askers:
            a.join(10)
        assert got == ["k#2", "k#2"] and made == ["k", "k"]  # made once for the two askers
        assert kept_made(wh, NOW, rule, "k", lambda: make("again")) == "k#2"
        assert kept.made_served == 2
        assert kept_made(wh, NOW, idle_rule(idle_min_duration_s=60), "k", lambda: make("o"))
        assert kept_made(wh, NOW + HOUR, rule, "k", lambda: make("later")) == "later#4"

        def fails() -> str:
            raise ValueError("refused")

        with pytest.raises(ValueError, match="refused"):
            kept_made(wh, NOW, rule, "f", fails)
        assert kept_made(wh, NOW, rule, "f", lambda: make("f")) == "f#5"
        for n in range(MADE_PER_PASS):
            kept_made(wh, NOW, rule, n, lambda: make("fill"))
        beyond = [kept_made(wh, NOW, rule, "x", lambda: make("x")) for _ in range(2)]
        assert beyond == [f"x#{len(made) - 1}", f"x#{len(made)}"]  # not kept: made each time
        clock[0] = NOW + dt.timedelta(seconds=1)
        kept.refresh()  # the next pass keeps nothing of the last one's
        assert kept_made(wh, clock[0], rule, "k", lambda: make("next")).startswith("next#")


def test_a_warmed_pass_answers_the_ledger_it_made_before_anyone_asked(ingest: Ingestor) -> None:
    """The refresher calls ``warm`` with each pass's instant once it is offered: a ledger it
    computes is made then, and a page asking the same of that pass gets the same figures
    without reading the tail's rows again."""
    wh = ingest.wh
    _end_the_first_seal(ingest)
    end = T + DAY
    want = _figures(wh, T, end)
    warmed: list[dt.datetime] = []

    def warm(at: dt.datetime) -> None:
        _figures(wh, T, end)
        warmed.append(at)

    kept = LiveTail(wh, idle_rule(), every_s=60, clock=lambda: NOW, warm=warm)
    stop = threading.Event()
    thread = kept.start(stop)  # one pass now, the next in a minute
    try:
        eventually(lambda: warmed == [NOW], 120, "the warmed pass")
        served = kept.served
        _same(_figures(wh, T, end), want)
        assert (kept.served, kept.made_served) == (served, 1)
    finally:
        stop.set()
        thread.join(30)
