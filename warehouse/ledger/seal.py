"""Sealed days: each finished day's usage rows computed once and kept, so that a month's ledger
reads a few hundred thousand rows instead of every GPU's minutes.

``gpuledger seal`` (:func:`seal_days`) runs ``sql/ledger_usage.sql`` on each finished day
[d, d + 1) and keeps its rows in ``ledger_days`` under a seal (``ledger_seals``) that records
fingerprints of what they were computed from (``sql/ledger_day_fingerprints.sql``): the
samples of the hours the day's query reads and the allocation intervals overlapping the day.
A ledger over [start, end) (:func:`usage_with_seals`) then takes the whole days in it whose
seals still hold and computes only the rest live: the partial days at the window's edges,
days not sealed yet, and days whose data changed after sealing (a late sample or job event).
That is exact because the usage figures never depend on how the window is split (see
``sql/ledger_usage.sql``): the rows of [a, c) and [c, b) add up to those of [a, b).

The day under way is sealed too, as the span [midnight, cut) (:func:`hours_cut`: the last
hour whose minutes, idle margin included, are all in), and sealed again as hours close, until
the whole day replaces it; a window ending now then computes only the hours after the cut live.

Seals are per idle threshold and minimum idle duration: a ledger asked for other settings
computes live. A day whose samples retention has dropped keeps its sealed rows (its sample
count then only falls, which does not break the seal), so a month closed once keeps its figures
after the minutes are gone, as a finished job keeps its summary.

Sealing a day again deletes the rows of the seal it replaces. A reader that picked the old seal
just before finds fewer rows than that seal recorded and computes those days live instead
(:func:`usage_with_seals` checks the count), so the figures never depend on that race.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import secrets
import threading
from collections.abc import Callable

import polars as pl

from warehouse import queries
from warehouse.analytics.stranded import seal_hours
from warehouse.client import Warehouse, WarehouseError
from warehouse.ledger.result import IdleRule
from warehouse.ledger.usage import live_usage_frame, usage_margin
from warehouse.migrate import local_target

log = logging.getLogger(__name__)

_DAY = dt.timedelta(days=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

#: A live query costs a fixed part whatever its window (analysing it, reading every
#: allocation), so with edges on both sides two live queries replacing one pay off only when
#: the sealed days between them stand for more than about 15 days of a cluster's rows (see
#: benchmarks/RESULTS.md for the measurement):
_LIVE_QUERY_ROWS = 30_000

#: ledger_seals' columns and types, in the order _seal_one writes them.
_SEAL_COLUMNS = {
    "idle_threshold_ratio": "Float64",
    "idle_min_duration_s": "UInt32",
    "day": "Date",
    "seal_id": "UInt64",
    "samples_fp": "UInt64",
    "allocs_fp": "UInt64",
    "usage_rows": "UInt64",
    "cut": "Nullable(DateTime64(3, 'UTC'))",
    "sealed_at": "DateTime64(3, 'UTC')",
}

#: How long after an hour its minutes are sealed into today's span: samples reach the
#: rollup a little late, and a late one would only put the span back on the live path.
SEAL_LAG = dt.timedelta(minutes=10)

#: A live usage query for [start, end): ``(start, end) -> frame``.
LiveUsage = Callable[[dt.datetime, dt.datetime], pl.DataFrame]

#: Fingerprints kept elsewhere (the server's live tail): ``(d0, d1, cut)`` -> what
#: :func:`fingerprints` gives for them, or None where they are not kept.
KeptFingerprints = Callable[[int, int, dt.datetime | None], dict[int, tuple[int, int]] | None]

#: Sealed rows kept elsewhere (the server's live tail): seal ids -> every cluster's rows of
#: those seals (what :func:`sealed_rows` gives for each), or None where it does not hold them all.
KeptSealedRows = Callable[[list[int]], pl.DataFrame | None]


@dataclasses.dataclass(frozen=True)
class SealReport:
    """What :func:`seal_days` did: the days it looked at ([first_day, end_day)), the ones it
    sealed now, how many it found still sealed, the usage rows it wrote, and where today's
    finished hours were sealed up to now (None when that seal was not written this time)."""

    first_day: dt.date | None
    end_day: dt.date | None
    sealed: tuple[dt.date, ...]
    still_sealed: int
    usage_rows: int
    hours_until: dt.datetime | None = None


def day_number(t: dt.datetime) -> int:
    """Days since 1970-01-01 UTC of the day holding ``t``."""
    return (t - _EPOCH) // _DAY


def day_start(d: int) -> dt.datetime:
    return _EPOCH + d * _DAY


def fingerprints(
    wh: Warehouse, d0: int, d1: int, idle: IdleRule, *, cut: dt.datetime | None = None
) -> dict[int, tuple[int, int]]:
    """(samples_fp, allocs_fp) per day number in [d0, d1) that has samples or allocations;
    with ``cut``, the day holding it (the last) is fingerprinted as the span [day, cut)."""
    ms = dt.timedelta(milliseconds=1)
    frame = queries.run(
        wh,
        "ledger_day_fingerprints",
        d0=d0,
        d1=d1,
        until_ms=(cut - _EPOCH) // ms if cut is not None else d1 * (_DAY // ms),
        margin_ms=usage_margin(idle) // ms,
    )
    return {
        int(d): (int(s), int(a))
        for d, s, a in frame.select("d", "samples_fp", "allocs_fp").iter_rows()
    }


#: A day's latest seal: (seal_id, samples_fp, allocs_fp, usage rows, cut), cut None for a
#: whole day, else the end of the sealed span [day, cut).
Seal = tuple[int, int, int, int, dt.datetime | None]


def seals(wh: Warehouse, d0: int, d1: int, idle: IdleRule) -> dict[int, Seal]:
    """The latest seal per day number in [d0, d1)."""
    frame = queries.run(
        wh,
        "ledger_seals_of",
        day0=day_start(d0).date(),
        day1=day_start(d1).date(),
        threshold=float(idle.threshold_ratio),
        min_idle_s=int(idle.min_duration_s),
    )
    return {
        day_number(_midnight(day)): (int(i), int(s), int(a), int(n), _aware(cut))
        for day, i, s, a, n, cut in frame.select(
            "day", "seal_id", "samples_fp", "allocs_fp", "usage_rows", "cut"
        ).iter_rows()
    }


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def holds(
    seal: Seal | None, now: tuple[int, int] | None, *, cut: dt.datetime | None = None
) -> bool:
    """Whether a day's seal still gives its usage rows for the span [day, cut) (the whole day
    when ``cut`` is None), given its fingerprints now.

    No seal and no allocation overlapping the day: it has no usage rows, nothing to compute
    (samples alone make no rows). A seal holds while it covers that span, the allocations are
    the same and no sample was added (fewer samples means retention dropped some after
    sealing: the sealed rows are what they were computed from).
    """
    samples_now, allocs_now = now or (0, 0)
    if seal is None:
        return allocs_now == 0 and cut is None
    _, samples_then, allocs_then, _, sealed_cut = seal
    return sealed_cut == cut and allocs_now == allocs_then and samples_now <= samples_then


def seal_days(
    wh: Warehouse,
    *,
    idle: IdleRule,
    now: dt.datetime,
    since: dt.date | None = None,
    until: dt.date | None = None,
    warehouse_cluster: str = "",
) -> SealReport:
    """Seal every finished day in [since, until) whose seal is missing or no longer holds,
    then the finished hours of the day under way, up to :func:`hours_cut`, when that day is
    before ``until``.

    A day is finished when its margin has passed (its query reads minutes up to
    ``idle.min_duration_s + 60`` s after midnight, counted from ``now``); ``since`` defaults to the
    first day with samples or allocations. Re-running it seals only the days that changed, and
    deletes the rows of the seals it replaces (on the local tables of ``warehouse_cluster``, the
    ClickHouse cluster's name, where there is one).
    """
    live = functools.partial(live_usage_frame, wh, now=now, idle=idle)
    last = day_number(now - usage_margin(idle))
    d1 = min(last, day_number(_midnight(until))) if until else last
    d0 = day_number(_midnight(since)) if since else _first_day(wh)
    if d0 is None:
        return SealReport(None, None, (), 0, 0)
    done: list[dt.date] = []
    rows = still = 0
    if d0 < d1:
        current = fingerprints(wh, d0, d1, idle)
        sealed = seals(wh, d0, d1, idle)
        for d in sorted(current):
            if holds(sealed.get(d), current[d]):
                still += d in sealed
                continue
            rows += _seal_one(wh, live, d, current[d], idle)
            done.append(day_start(d).date())
            if d in sealed:
                _drop_rows(wh, d, sealed[d][0], warehouse_cluster)
    cut = hours_cut(now, idle)
    hours_until = None
    if day_number(cut) >= max(d0, d1) and (until is None or cut <= _midnight(until)):
        written = _seal_hours(wh, live, cut, idle, warehouse_cluster)
        rows += written or 0
        hours_until = cut if written is not None else None
    first, end = (day_start(d0).date(), day_start(d1).date()) if d0 < d1 else (None, None)
    return SealReport(first, end, tuple(done), still, rows, hours_until)


def hours_cut(now: dt.datetime, idle: IdleRule) -> dt.datetime:
    """Where the seal of the day under way ends at ``now``: the last hour whose usage rows
    read only minutes of hours that are over (their margin included), :data:`SEAL_LAG` ago."""
    t = now - usage_margin(idle) - SEAL_LAG - dt.timedelta(hours=1)
    return t.replace(minute=0, second=0, microsecond=0)


def _seal_hours(
    wh: Warehouse, live: LiveUsage, cut: dt.datetime, idle: IdleRule, warehouse_cluster: str
) -> int | None:
    """Seal the span [midnight, cut) of the day holding ``cut`` unless its seal already covers
    it and holds; the usage rows written, or None when it held (or the span is empty)."""
    d = day_number(cut)
    if cut <= day_start(d):
        return None
    old = seals(wh, d, d + 1, idle).get(d)
    current = fingerprints(wh, d, d + 1, idle, cut=cut).get(d, (0, 0))
    # no allocation yet: nothing to keep (and the live query of such a day is cheap)
    if holds(old, current, cut=cut) or (old is None and current[1] == 0):
        return None
    written = _seal_one(wh, live, d, current, idle, cut=cut)
    if old is not None:
        _drop_rows(wh, d, old[0], warehouse_cluster)
    return written


def start_sealer(
    wh: Warehouse,
    stop: threading.Event,
    *,
    interval_s: float,
    idle: IdleRule,
    clock: Callable[[], dt.datetime],
    first_after_s: float = 60.0,
    warehouse_cluster: str = "",
) -> threading.Thread:
    """Seal the finished days, and the stranded capacity's past hours
    (:func:`~warehouse.analytics.stranded.seal_hours`), ``first_after_s`` from now, then every
    ``interval_s``, in a daemon thread, until ``stop`` is set. Best effort: a pass that fails
    is logged and the next one tries again (the ledger stays right meanwhile: unsealed days
    are computed live).
    """

    def loop() -> None:
        wait = first_after_s
        while not stop.wait(wait):
            wait = interval_s
            try:
                report = seal_days(wh, idle=idle, now=clock(), warehouse_cluster=warehouse_cluster)
            except WarehouseError as exc:
                log.error("sealing the ledger's days failed (next try in %g s): %s", wait, exc)
                continue
            if report.sealed:
                log.info("sealed %d day(s) of the ledger", len(report.sealed))
            try:
                hours = seal_hours(wh, now=clock(), warehouse_cluster=warehouse_cluster)
            except WarehouseError as exc:
                log.error("sealing the stranded hours failed (next try in %g s): %s", wait, exc)
                continue
            if hours.sealed:
                log.info("sealed the stranded hours of %d cluster-day(s)", len(hours.sealed))

    thread = threading.Thread(target=loop, name="ledger-sealer", daemon=True)
    thread.start()
    return thread


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def first_data(wh: Warehouse) -> dt.datetime | None:
    """The earliest sample-hour or allocation start the warehouse holds; None when empty."""
    firsts = [t for t in queries.run(wh, "ledger_first_data").row(0) if t is not None]
    return min(firsts) if firsts else None


def _first_day(wh: Warehouse) -> int | None:
    first = first_data(wh)
    return day_number(first) if first is not None else None


def _seal_one(
    wh: Warehouse,
    live: LiveUsage,
    d: int,
    fp: tuple[int, int],
    idle: IdleRule,
    *,
    cut: dt.datetime | None = None,
) -> int:
    """Compute the rows of day ``d`` (of [day, cut) with ``cut``), write them, then the seal
    that makes readers use them."""
    seal_id = secrets.randbits(64)
    start = day_start(d)
    usage = live(start, cut or start + _DAY)
    if usage.height:
        wh.insert_arrow(
            "ledger_days",
            usage.with_columns(
                pl.lit(start.date()).alias("day"), pl.lit(seal_id, pl.UInt64).alias("seal_id")
            ).to_arrow(),
        )
    row = (
        idle.threshold_ratio,
        idle.min_duration_s,
        start.date(),
        seal_id,
        *fp,
        usage.height,
        cut,
        # the version that makes this seal the latest: when it was written, so that a day
        # sealed again with the same ``now`` (a test's, a replay's) still has one latest seal
        dt.datetime.now(dt.UTC),
    )
    wh.insert_rows("ledger_seals", [row], list(_SEAL_COLUMNS), list(_SEAL_COLUMNS.values()))
    return usage.height


def _drop_rows(wh: Warehouse, d: int, seal_id: int, warehouse_cluster: str) -> None:
    """Delete day ``d``'s rows of the seal ``seal_id``, which a newer one has replaced.

    Best effort: rows left by a failure are never read (readers ask for the latest seal's id).
    """
    table, on_cluster = local_target("ledger_days", warehouse_cluster)
    try:
        wh.command(
            queries.render("ledger_days_delete", on_cluster=on_cluster),
            {"db": wh.database, "table": table, "day": day_start(d).date(), "seal_id": seal_id},
        )
    except WarehouseError as exc:
        log.warning(
            "the rows of %s's replaced seal %d stay in ledger_days (never read): %s",
            day_start(d).date(),
            seal_id,
            exc,
        )


def usage_with_seals(
    wh: Warehouse,
    live: LiveUsage,
    start: dt.datetime,
    end: dt.datetime,
    *,
    now: dt.datetime,
    cluster: str,
    idle: IdleRule,
    prints: KeptFingerprints | None = None,
    kept_rows: KeptSealedRows | None = None,
) -> pl.DataFrame:
    """The usage rows of [start, end): sealed spans that hold read from ``ledger_days`` (or
    taken from ``kept_rows`` where it holds those seals), the rest from ``live``; the sealed
    days are checked against the fingerprints ``prints`` keeps where it has them. The sealed
    spans used are one run of whole days (the longest that holds), ended by the sealed hours
    of the day under way where they follow it, so at most two live queries remain, before and
    after it."""
    d0 = day_number(start - dt.timedelta(milliseconds=1)) + 1  # first midnight >= start
    # the last midnight at or before the end, or before now: days to come are not sealed yet
    d1 = day_number(min(end, now))
    if d1 < d0:
        return live(start, end)
    sealed = seals(wh, d0, d1 + 1, idle)
    if not sealed:  # nothing sealed yet (or for these settings): no need to look further
        return live(start, end)
    # day d1 (the end's) can add its sealed hours [d1, cut) when they end inside the window
    cut = sealed[d1][4] if d1 in sealed else None
    if cut is not None and not cut < min(end, now):
        cut = None
    span = (d0, d1 + (cut is not None))
    current = prints(*span, cut) if prints is not None else None
    if current is None:
        current = fingerprints(wh, *span, idle, cut=cut)
    good = [holds(sealed.get(d), current.get(d)) for d in range(d0, d1)]
    if cut is not None:
        good.append(holds(sealed.get(d1), current.get(d1), cut=cut))
    r0, r1 = _longest_run(good)
    if r1 == r0:
        return live(start, end)
    first = day_start(d0 + r0)
    last = cut if cut is not None and d0 + r1 == d1 + 1 else day_start(d0 + r1)
    lives = (start < first) + (last < end)
    rows = sum(sealed[d][3] for d in range(d0 + r0, d0 + r1) if d in sealed)
    if lives == 2 and rows < _LIVE_QUERY_ROWS:
        return live(start, end)
    ids = [sealed[d][0] for d in range(d0 + r0, d0 + r1) if d in sealed]
    held = kept_rows(ids) if kept_rows is not None else None
    if held is not None:  # a seal's rows never change, and these were counted when read
        kept = held.filter(pl.col("cluster") == cluster) if cluster else held
    else:
        window = {"day0": first.date(), "day1": day_start(d0 + r1).date(), "seals": ids}
        kept = queries.run(wh, "ledger_sealed_usage", cluster=cluster, **window)
        # counted after reading (a deletion is for good): a seal replaced since it was picked
        # has lost its rows, and those days are computed live
        found = (
            kept.height if not cluster else queries.run(wh, "ledger_sealed_count", **window)[0, 0]
        )
        if found != rows:
            log.info("days were sealed again while being read (%d of %d sealed rows)", found, rows)
            return live(start, end)
    head = live(start, first) if start < first else None
    tail = live(last, end) if last < end else None
    if last != day_start(d0 + r1) and tail is not None:
        kept = _ended_since(kept, tail, last)
    parts = [p for p in (head, kept, tail) if p is not None]
    return pl.concat(parts, how="vertical_relaxed")


def sealed_rows(wh: Warehouse, d: int, seal: Seal) -> pl.DataFrame | None:
    """Every cluster's usage rows of day ``d`` under ``seal`` (as a usage read takes them), or
    None when the seal was replaced while they were read (it then lost its rows)."""
    day = day_start(d).date()
    rows = queries.run(
        wh, "ledger_sealed_usage", cluster="", day0=day, day1=day + _DAY, seals=[seal[0]]
    )
    return rows if rows.height == seal[3] else None


def _ended_since(kept: pl.DataFrame, tail: pl.DataFrame, cut: dt.datetime) -> pl.DataFrame:
    """``kept`` with the end_event of every interval still open at ``cut`` (its sealed row ends
    there) taken from its row after the cut: the seal of hours leaves end_event out of its
    fingerprint (see sql/ledger_day_fingerprints.sql), so it is as it was when sealed."""
    keys = ["cluster", "gpu_uuid", "mig_instance", "job_id", "attempt"]
    now = tail.select(*keys, pl.col("end_event").alias("end_event_now")).unique(keys)
    at_cut = pl.col("e") == pl.lit(cut).cast(kept.schema["e"])
    return (
        kept.join(now, on=keys, how="left", nulls_equal=True)
        .with_columns(
            pl.when(at_cut & pl.col("end_event_now").is_not_null())
            .then(pl.col("end_event_now"))
            .otherwise(pl.col("end_event"))
            .alias("end_event")
        )
        .select(kept.columns)
    )


def _longest_run(flags: list[bool]) -> tuple[int, int]:
    """[i, j) of the longest run of True in ``flags`` (the first of equal ones); (0, 0) if none."""
    best, i = (0, 0), None
    for k, flag in enumerate([*flags, False]):
        if flag and i is None:
            i = k
        elif not flag and i is not None:
            if k - i > best[1] - best[0]:
                best = (i, k)
            i = None
    return best
