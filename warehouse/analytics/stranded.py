"""Stranded capacity over a range from sealed hours: each past hour's fragmentation computed
once and kept, so that a month's trend reads a few thousand rows instead of sampling every
GPU at every hour again.

:func:`seal_hours` (run by the ledger's sealer and ``gpuledger seal``) computes, per cluster
and day, the stranded capacity at every hour from midnight up to the last hour at least
:data:`SEAL_LAG` ago (:func:`~warehouse.analytics.fragmentation.stranded_instants`), keeps its
rows in ``frag_hours`` and ``frag_hour_tenants`` under a seal (``frag_seals``) that records a
fingerprint of what they were computed from (``sql/frag_fingerprints.sql``). Today's seal is
replaced as hours close. :func:`stranded_over` then reads the hours whose seal still holds and
samples only the rest live: hours not sealed yet, and days whose inventory, allocations or
task mix changed after sealing. That is exact because each instant's figures depend on the
data at or before it alone, never on the range asked; only the weighting of the last instant
(clipped at the range's end) depends on the range, and it is applied after reading.

Hours are sealed for the measure's default setting (scope ``model``, a 7-day task mix of
started attempts, hourly instants on the hour), which the pages and the ledger use; any other
setting is sampled live.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import secrets

import polars as pl

from warehouse import queries
from warehouse.analytics import fleet
from warehouse.analytics.fragmentation import (
    DEFAULT_WINDOW,
    over_range,
    stranded_instants,
)
from warehouse.client import Warehouse, WarehouseError
from warehouse.migrate import local_target

log = logging.getLogger(__name__)

_HOUR = dt.timedelta(hours=1)
_DAY = dt.timedelta(days=1)
_DAY_MS = 86_400_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: How long after an hour its instant is sealed: job events and inventory rows reach the
#: warehouse a little late, and a late one would only put the day back on the live path.
SEAL_LAG = dt.timedelta(minutes=10)
#: The columns kept per hour: per pool and model, and per tenant.
_SERIES = ("ts", "pool", "gpu_model", "capacity_gpus", "free_gpus", "stranded_gpus")
_TENANTS = ("ts", "tenant", "pool", "gpu_model", "stranded_gpus")
#: The setting sealed: (scope, task-mix window, mix event).
SEALED = ("model", DEFAULT_WINDOW, "started")


@dataclasses.dataclass(frozen=True)
class Seal:
    """The latest seal of a day: its rows were computed for the hours [day, last]."""

    seal_id: int
    last: dt.datetime
    fp: int
    series_rows: int
    tenant_rows: int


@dataclasses.dataclass(frozen=True)
class HoursSealed:
    """What :func:`seal_hours` did: the (cluster, day) sealed now, how many it found still
    sealed, and the rows it wrote."""

    sealed: tuple[tuple[str, dt.date], ...]
    still_sealed: int
    rows: int


def _day(d: int) -> dt.datetime:
    return _EPOCH + d * _DAY


def _day_number(t: dt.datetime) -> int:
    return (t - _EPOCH) // _DAY


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def _floor_hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _params() -> dict[str, object]:
    scope, window, event = SEALED
    return {"scope": scope, "window_s": int(window.total_seconds()), "event": event}


def seals(wh: Warehouse, cluster: str, d0: int, d1: int) -> dict[int, Seal]:
    """The latest seal per day number in [d0, d1) of ``cluster``'s sealed setting."""
    frame = queries.run(
        wh,
        "frag_seals_of",
        cluster=cluster,
        day0=_day(d0).date(),
        day1=_day(d1).date(),
        **_params(),
    )
    return {
        _day_number(dt.datetime.combine(day, dt.time(), dt.UTC)): Seal(
            int(i), last, int(fp), int(s), int(t)
        )
        for day, i, last, fp, s, t in frame.select(
            "day", "seal_id", "last_ts", "fp", "series_rows", "tenant_rows"
        ).iter_rows()
    }


def fingerprints(wh: Warehouse, cluster: str, lasts: dict[int, dt.datetime]) -> dict[int, int]:
    """The fingerprint now of what each day's hours [day, lasts[day]] are computed from (0: a
    day with nothing in it)."""
    if not lasts:
        return {}
    days = sorted(lasts)
    frame = queries.run(
        wh,
        "frag_fingerprints",
        cluster=cluster,
        dns=days,
        lasts=[lasts[d] for d in days],
        since_ms=days[0] * _DAY_MS,
        until_ms=int(max(lasts.values()).timestamp() * 1000),
        window_ms=int(SEALED[1].total_seconds() * 1000),
        event=SEALED[2],
    )
    found = {int(d): int(fp) for d, fp in frame.select("dn", "fp").iter_rows()}
    return {d: found.get(d, 0) for d in days}


def seal_hours(
    wh: Warehouse,
    *,
    now: dt.datetime,
    clusters: list[str] | None = None,
    since: dt.date | None = None,
    until: dt.date | None = None,
    warehouse_cluster: str = "",
) -> HoursSealed:
    """Seal every day's past hours (up to :data:`SEAL_LAG` before ``now``) in [since, until)
    (default: from ``sql/frag_first_day.sql`` on) whose seal is missing, no longer holds, or
    stops short of them, in every cluster (or ``clusters``)."""
    horizon = _floor_hour(now - SEAL_LAG)
    done: list[tuple[str, dt.date]] = []
    still = rows = 0
    for cluster in clusters if clusters is not None else fleet.known_clusters(wh):
        first = queries.run(
            wh,
            "frag_first_day",
            cluster=cluster,
            window_ms=int(SEALED[1].total_seconds() * 1000),
            event=SEALED[2],
        )[0, 0]
        if first is None or first > horizon:
            continue
        d0, d1 = _day_number(first), _day_number(horizon) + 1
        if since is not None:
            d0 = max(d0, _day_number(_midnight(since)))
        if until is not None:
            d1 = min(d1, _day_number(_midnight(until)))
        lasts = {d: min(_day(d) + 23 * _HOUR, horizon) for d in range(d0, d1)}
        current = fingerprints(wh, cluster, lasts)
        sealed = seals(wh, cluster, d0, d1)
        for d in range(d0, d1):
            old = sealed.get(d)
            if old is not None and old.last == lasts[d] and old.fp == current[d]:
                still += 1
                continue
            rows += _seal_one(wh, cluster, d, lasts[d], current[d])
            done.append((cluster, _day(d).date()))
            if old is not None:
                _drop_rows(wh, d, old.seal_id, warehouse_cluster)
    return HoursSealed(tuple(done), still, rows)


def _seal_one(wh: Warehouse, cluster: str, d: int, last: dt.datetime, fp: int) -> int:
    """Compute day ``d``'s hours up to ``last``, write them, then the seal that makes readers
    use them."""
    scope, window, event = SEALED
    start = _day(d)
    series, tenants = stranded_instants(
        wh, cluster, start, last + _HOUR, window=window, scope=scope, mix_event=event
    )
    seal_id = secrets.randbits(64)
    tag = (pl.lit(start.date()).alias("day"), pl.lit(seal_id, pl.UInt64).alias("seal_id"))
    named = pl.lit(cluster).alias("cluster")
    if series.height:
        wh.insert_arrow(
            "frag_hours",
            series.select(*tag, named, *_SERIES).to_arrow(),
        )
    if tenants.height:
        wh.insert_arrow(
            "frag_hour_tenants",
            tenants.select(*tag, named, *_TENANTS).to_arrow(),
        )
    columns = {
        "cluster": "String",
        "scope": "String",
        "window_s": "UInt32",
        "mix_event": "String",
        "day": "Date",
        "last_ts": "DateTime64(3, 'UTC')",
        "seal_id": "UInt64",
        "fp": "UInt64",
        "series_rows": "UInt64",
        "tenant_rows": "UInt64",
        "sealed_at": "DateTime64(3, 'UTC')",
    }
    # the version that makes this seal the latest: when it was written, not the ``now`` asked
    written = dt.datetime.now(dt.UTC)
    row = (cluster, scope, int(window.total_seconds()), event, start.date(), last, seal_id,
           fp, series.height, tenants.height, written)  # fmt: skip
    wh.insert_rows("frag_seals", [row], list(columns), list(columns.values()))
    return series.height + tenants.height


def _drop_rows(wh: Warehouse, d: int, seal_id: int, warehouse_cluster: str) -> None:
    """Delete the rows of day ``d``'s replaced seal ``seal_id`` (best effort: rows left by a
    failure are never read, since readers ask for the latest seal's id)."""
    for name in ("frag_hours", "frag_hour_tenants"):
        table, on_cluster = local_target(name, warehouse_cluster)
        try:
            wh.command(
                queries.render("frag_seal_rows_delete", on_cluster=on_cluster),
                {"db": wh.database, "table": table, "day": _day(d).date(), "seal_id": seal_id},
            )
        except WarehouseError as exc:
            log.warning("the rows of a replaced seal stay in %s (never read): %s", name, exc)


def stranded_over(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta = _HOUR,
    *,
    window: dt.timedelta = DEFAULT_WINDOW,
    scope: str = "model",
    mix_event: str = "started",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """As :func:`warehouse.analytics.fragmentation.stranded_over` (the same figures), reading
    the hours whose seal holds and sampling the others live."""
    rows = stranded_rows(
        wh, cluster, start, end, step, window=window, scope=scope, mix_event=mix_event
    )
    return over_range(*rows, end, step)


def stranded_rows(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta = _HOUR,
    *,
    window: dt.timedelta = DEFAULT_WINDOW,
    scope: str = "model",
    mix_event: str = "started",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What :func:`stranded_over` adds up: the rows of every instant of [start, end) a
    ``step`` apart (:func:`~warehouse.analytics.fragmentation.stranded_instants`' series and
    tenants), sealed where the seals hold. An instant's rows depend on it alone, so the rows
    of a longer span, cut to these instants, are these."""
    sample = functools.partial(
        stranded_instants, wh, cluster, window=window, scope=scope, mix_event=mix_event
    )
    if start.tzinfo is None or end.tzinfo is None:  # refused there, naming the time
        return sample(start, end, step)
    start, end = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
    sealable = (scope, window, mix_event) == SEALED and step == _HOUR and end > start
    if not sealable or start != _floor_hour(start):
        return sample(start, end, step)
    n = -(-(end - start) // _HOUR)
    instants = [start + i * _HOUR for i in range(n)]
    d0, d1 = _day_number(instants[0]), _day_number(instants[-1]) + 1
    held = _holding(wh, cluster, d0, d1)
    covered = [held.get(_day_number(t)) is not None and t <= held[_day_number(t)].last
               for t in instants]  # fmt: skip
    series_parts: list[pl.DataFrame] = []
    tenant_parts: list[pl.DataFrame] = []
    if any(covered):
        read = _read(wh, held, instants[0], instants[-1])
        if read is None:  # a seal was replaced while being read: every hour live
            covered = [False] * n
        else:
            series_parts.append(read[0])
            tenant_parts.append(read[1])
    for i, j in _runs([not c for c in covered]):
        s, t = sample(instants[i], min(end, instants[j - 1] + _HOUR))
        series_parts.append(s)
        tenant_parts.append(t)
    series = pl.concat([p.select(_SERIES) for p in series_parts], how="vertical_relaxed")
    tenants = pl.concat([p.select(_TENANTS) for p in tenant_parts], how="vertical_relaxed")
    return series, tenants


def _holding(wh: Warehouse, cluster: str, d0: int, d1: int) -> dict[int, Seal]:
    """The seals of days [d0, d1) that still hold."""
    found = seals(wh, cluster, d0, d1)
    current = fingerprints(wh, cluster, {d: s.last for d, s in found.items()})
    return {d: s for d, s in found.items() if current[d] == s.fp}


def _read(
    wh: Warehouse, held: dict[int, Seal], t0: dt.datetime, t1: dt.datetime
) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """The sealed rows of ``held`` in [t0, t1]; None when a seal lost rows while being read
    (the days are read whole and counted after reading: a deletion is for good)."""
    days = sorted(held)
    window = {
        "day0": _day(days[0]).date(),
        "day1": _day(days[-1] + 1).date(),
        "seals": [held[d].seal_id for d in days],
    }
    series = queries.run(wh, "frag_sealed_hours", **window)
    tenants = queries.run(wh, "frag_sealed_tenants", **window)
    wanted = (sum(s.series_rows for s in held.values()), sum(s.tenant_rows for s in held.values()))
    if (series.height, tenants.height) != wanted:
        log.info("stranded hours were sealed again while being read: sampled live")
        return None
    between = pl.col("ts").is_between(pl.lit(t0), pl.lit(t1))
    return series.filter(between), tenants.filter(between)


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """[i, j) of every run of True in ``flags``."""
    runs, i = [], None
    for k, flag in enumerate([*flags, False]):
        if flag and i is None:
            i = k
        elif not flag and i is not None:
            runs.append((i, k))
            i = None
    return runs
