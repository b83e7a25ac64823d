"""Idle allocated GPUs and what they cost: the GPUs idle in a job's hands now, the idle
GPU-hours of every day of a window, and the jobs that left the most idle — priced from the
price book, by the ledger's definition of idle and from the ledger's own usage rows.

- Now (:class:`IdleNow`): the runs of :func:`warehouse.analytics.idle.idle_now`, each priced
  as its GPU-hours (length x share) at the price of its model and pool over the run.
- Days and jobs (:class:`IdleDay`, :class:`IdleJob`): the ledger's usage rows (sealed days
  where they hold, else computed live one day at a time, so every row lies within one day);
  a row's idle cost is its direct cost x idle GPU-hours / allocated GPU-hours, so a day's
  idle cost is the part of its direct cost that paid for idle time.

Money is ``Decimal``, rounded to cents only in what is shown (each figure once). A tenant's
report holds its own rows alone (an org: all of its projects), as :func:`compute_ledger`'s.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import polars as pl

from warehouse.analytics import idle as idle_runs
from warehouse.client import Warehouse
from warehouse.ledger.compute import in_tenant
from warehouse.ledger.pricing import (
    CENT,
    PriceBook,
    PriceSegment,
    ms_to_hours,
    price_segments,
    priced_ms,
)
from warehouse.ledger.result import GROUPINGS, IdleRule, LedgerError, Window
from warehouse.ledger.tail import kept_idle_now, kept_made, usage_kept_first
from warehouse.ledger.usage import live_usage_frame

_DAY = dt.timedelta(days=1)
#: How many of the worst jobs a report keeps.
WORST = 10


@dataclasses.dataclass(frozen=True)
class IdleNow:
    """One GPU (or MIG slice, or a share of one) idle in a job's hands now."""

    cluster: str
    node: str
    gpu_uuid: str
    mig_instance: str
    gpu_model: str
    pool: str
    job_id: str
    attempt: int
    tenant: str
    fraction: float
    since: dt.datetime  # the idle run's start (or the job's, when it started idle)
    until: dt.datetime  # its latest low minute's end (at most now)
    idle_gpu_hours: float  # (until - since) x fraction
    cost: Decimal | None  # None: the price book has no price for its model and pool

    @property
    def idle_hours(self) -> float:
        return (self.until - self.since).total_seconds() / 3600


@dataclasses.dataclass(frozen=True)
class UsageDay:
    """One day of the window: GPU-hours held, used and left idle (no cost: see
    :class:`IdleDay`)."""

    day: dt.date
    allocated_gpu_hours: float
    used_gpu_hours: float | None  # None: nothing measured that day
    idle_gpu_hours: float | None


@dataclasses.dataclass(frozen=True)
class IdleDay:
    """One day of the window: GPU-hours held, used and left idle, and the cost of the idle."""

    day: dt.date
    allocated_gpu_hours: float
    used_gpu_hours: float | None  # None: nothing measured that day
    idle_gpu_hours: float | None
    idle_cost: Decimal


@dataclasses.dataclass(frozen=True)
class IdleJob:
    """One job's idle time over the window (all its attempts and GPUs)."""

    cluster: str
    job_id: str
    tenant: str
    gpu_model: str
    gpus: int  # distinct GPUs (or MIG slices) it held in the window
    allocated_gpu_hours: float
    idle_gpu_hours: float
    idle_cost: Decimal

    @property
    def idle_share(self) -> float:
        return self.idle_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours else 0.0


@dataclasses.dataclass(frozen=True)
class IdleReport:
    """Idle now, per day and per job, for ``window`` (cut at ``computed_until``) as seen by
    ``tenant`` (None: everyone)."""

    window: Window
    computed_until: dt.datetime
    idle_rule: IdleRule
    currency: str
    tenant: str | None
    now: tuple[IdleNow, ...]
    days: tuple[IdleDay, ...]
    worst_jobs: tuple[IdleJob, ...]

    @property
    def idle_gpu_hours(self) -> float:
        return sum(d.idle_gpu_hours or 0.0 for d in self.days)

    @property
    def allocated_gpu_hours(self) -> float:
        return sum(d.allocated_gpu_hours for d in self.days)

    @property
    def idle_cost(self) -> Decimal:
        return sum((d.idle_cost for d in self.days), Decimal(0))

    def to_json(self) -> dict[str, Any]:
        """Plain types: times in ISO 8601, GPU-hours to 1e-6, money as strings."""

        def plain(record: Any) -> dict[str, Any]:
            out = {}
            for key, value in dataclasses.asdict(record).items():
                if isinstance(value, dt.datetime | dt.date):
                    value = value.isoformat()
                elif isinstance(value, float):
                    value = round(value, 6)
                elif isinstance(value, Decimal):
                    value = str(value)
                out[key] = value
            return out

        return {
            "window": self.window.to_json(),
            "computed_until": self.computed_until.isoformat(),
            "idle_rule": dataclasses.asdict(self.idle_rule),
            "currency": self.currency,
            "tenant": self.tenant,
            "now": [plain(r) for r in self.now],
            "days": [plain(d) for d in self.days],
            "worst_jobs": [plain(j) for j in self.worst_jobs],
            "totals": {
                "allocated_gpu_hours": round(self.allocated_gpu_hours, 6),
                "idle_gpu_hours": round(self.idle_gpu_hours, 6),
                "idle_cost": str(self.idle_cost),
            },
        }


def _keep(frame: pl.DataFrame, tenant: str | None, only: Mapping[str, str] | None) -> pl.DataFrame:
    keep = in_tenant(tenant) if tenant is not None else pl.lit(True)
    for column, value in (only or {}).items():
        if column not in GROUPINGS:
            raise LedgerError(f"{column!r} is not one of {', '.join(GROUPINGS)}")
        keep &= pl.col(column) == value
    return frame.filter(keep)


def _priced(frame: pl.DataFrame, prices: PriceBook, weight: str) -> list[Decimal | None]:
    """The cost of each row's ``weight`` GPU-ms over its [s, e) (None: no price at all)."""
    if not frame.height:
        return []
    pairs = set(zip(frame["gpu_model"], frame["pool"], strict=True))
    start, end = frame["s"].min(), frame["e"].max()
    assert isinstance(start, dt.datetime) and isinstance(end, dt.datetime)
    segments = price_segments(prices, pairs, start, max(end, start + dt.timedelta(seconds=1)))
    rows = frame.with_row_index("_i").with_row_index("_row")  # priced_ms keys by _row itself
    priced, _ = priced_ms(rows, segments, "s", "e", weight, ["_i"])
    cost: list[Decimal | None] = [None] * frame.height
    for row, seg, ms in priced.iter_rows():
        cost[row] = (cost[row] or Decimal(0)) + ms_to_hours(ms) * segments[seg].price
    return cost


def priced_spans(
    prices: PriceBook, spans: list[tuple[str, str, dt.datetime, dt.datetime, float]]
) -> list[Decimal | None]:
    """The cost of each span (gpu_model, pool, start, end, GPUs) at the prices in force over
    it, to the cent, as the ledger prices held time (None: no price for its model and pool):
    what an alert says unallocated or idle GPUs have cost so far."""
    if not spans:
        return []
    models, pools, starts, ends, gpus = zip(*spans, strict=True)
    frame = pl.DataFrame(
        {
            "gpu_model": models,
            "pool": pools,
            "s": starts,
            "e": ends,
            "gpu_ms": [
                max(0.0, (e - s).total_seconds()) * 1000 * n
                for s, e, n in zip(starts, ends, gpus, strict=True)
            ],
        },
        schema={
            "gpu_model": pl.String,
            "pool": pl.String,
            "s": pl.Datetime("ms", "UTC"),
            "e": pl.Datetime("ms", "UTC"),
            "gpu_ms": pl.Float64,
        },
    )
    return [None if c is None else c.quantize(CENT) for c in _priced(frame, prices, "gpu_ms")]


def idle_now(
    wh: Warehouse,
    at: dt.datetime,
    *,
    idle: IdleRule,
    prices: PriceBook,
    cluster: str = "",
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
) -> tuple[IdleNow, ...]:
    """The GPUs idle in a job's hands at ``at`` (see
    :func:`warehouse.analytics.idle.idle_now`), longest first, each priced."""
    found = kept_idle_now(wh, at, idle=idle, cluster=cluster, tenant=tenant or "")
    if found is None:
        found = idle_runs.idle_now(
            wh,
            at,
            threshold_ratio=idle.threshold_ratio,
            min_duration_s=idle.min_duration_s,
            cluster=cluster,
            tenant=tenant or "",
        )
    found = _keep(found, None, only).with_columns(
        (pl.col("idle_s") * 1000 * pl.col("fraction")).alias("idle_gpu_ms"),
        pl.col("since").alias("s"),
        pl.col("until").alias("e"),
    )
    costs = _priced(found, prices, "idle_gpu_ms")
    return tuple(
        IdleNow(
            r["cluster"], r["node"], r["gpu_uuid"], r["mig_instance"], r["gpu_model"], r["pool"],
            r["job_id"], r["attempt"], r["tenant"], r["fraction"], r["since"], r["until"],
            r["idle_gpu_ms"] / 3.6e6, None if cost is None else cost.quantize(CENT),
        )
        for r, cost in zip(found.iter_rows(named=True), costs, strict=True)
    )  # fmt: skip


def daily_usage(
    wh: Warehouse, window: Window, *, now: dt.datetime, idle: IdleRule, cluster: str = ""
) -> pl.DataFrame:
    """The ledger's usage rows of ``window`` (see :func:`compute_ledger`), every one within
    one day (its ``day``): sealed days as sealed, the rest computed live a day at a time
    (splitting a window never changes the ledger's figures, so these add up to its totals).
    Made once per pass of a live tail as of ``now`` for whoever asks (the Idle page and the
    Overview's range, any viewer: each keeps its own rows of them)."""

    def by_day(start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
        parts: list[pl.DataFrame] = []
        t = start
        while t < min(end, now) or not parts:
            day_end = dt.datetime.combine(t.date(), dt.time(), dt.UTC) + _DAY
            parts.append(
                live_usage_frame(wh, t, min(day_end, end), now=now, idle=idle, cluster=cluster)
            )
            t = day_end
        return pl.concat(parts, how="vertical_relaxed")

    def made() -> pl.DataFrame:
        rows = usage_kept_first(
            wh, by_day, window.start, window.end, now=now, idle=idle, cluster=cluster
        )
        return rows.with_columns(pl.col("s").dt.date().alias("day"))

    return kept_made(wh, now, idle, ("daily usage", window, cluster), made)


@dataclasses.dataclass(frozen=True)
class _IdleMs:
    """The idle GPU-ms of usage rows per day, cluster, job and price segment (``_ms``): a
    row's idle cost is its direct cost x its idle GPU-hours / allocated GPU-hours, which is
    its idle GPU-ms priced over its [s, e) (rows that idled nothing are not priced)."""

    frame: pl.DataFrame  # day, cluster, job_id, seg, _ms
    segments: list[PriceSegment]

    def cost(self, keys: Sequence[str], of: pl.DataFrame | None = None) -> dict[Any, Decimal]:
        """The exact idle cost per ``keys`` (a tuple of their values; one value for one key),
        of the keys in ``of`` alone when given: the GPU-ms summed per key and segment first,
        so pricing takes one product each."""
        frame = self.frame if of is None else self.frame.join(of, on=list(keys), how="semi")
        summed = frame.group_by(*keys, "seg").agg(pl.col("_ms").sum())
        cost: dict[Any, Decimal] = defaultdict(Decimal)
        for *key, seg, ms in summed.iter_rows():
            cost[key[0] if len(key) == 1 else tuple(key)] += (
                ms_to_hours(ms) * self.segments[seg].price
            )
        return cost


def _idle_ms(usage: pl.DataFrame, prices: PriceBook) -> _IdleMs:
    idle = usage.filter(
        (pl.col("allocated_gpu_ms") > 0) & (pl.col("idle_gpu_hours").fill_null(0) > 0)
    ).with_columns((pl.col("idle_gpu_hours") * 3.6e6).alias("_idle_ms"))
    if not idle.height:
        empty = {"day": pl.Date, "cluster": pl.String, "job_id": pl.String}
        return _IdleMs(pl.DataFrame(schema={**empty, "seg": pl.Int64, "_ms": pl.Float64}), [])
    pairs = set(zip(idle["gpu_model"], idle["pool"], strict=True))
    start, end = idle["s"].min(), idle["e"].max()
    assert isinstance(start, dt.datetime) and isinstance(end, dt.datetime)
    segments = price_segments(prices, pairs, start, max(end, start + dt.timedelta(seconds=1)))
    keys = ["day", "cluster", "job_id"]
    priced, _ = priced_ms(idle.with_row_index("_row"), segments, "s", "e", "_idle_ms", keys)
    return _IdleMs(priced, segments)


def _days(
    usage: pl.DataFrame, idle: _IdleMs, window: Window, until: dt.datetime
) -> tuple[IdleDay, ...]:
    cost = idle.cost(["day"])
    return tuple(
        IdleDay(d.day, d.allocated_gpu_hours, d.used_gpu_hours, d.idle_gpu_hours,
                cost.get(d.day, Decimal(0)).quantize(CENT))
        for d in _usage_days(usage, window, until)
    )  # fmt: skip


def _usage_days(usage: pl.DataFrame, window: Window, until: dt.datetime) -> list[UsageDay]:
    """Every day of ``window`` begun before ``until``, summed from ``usage`` (a ``day`` column)."""
    per_day = {
        r["day"]: r
        for r in usage.group_by("day")
        .agg(
            pl.col("allocated_gpu_ms").sum(),
            pl.col("used_gpu_hours").sum(),
            pl.col("idle_gpu_hours").sum(),
            pl.col("used_gpu_hours").is_not_null().any().alias("measured"),
        )
        .iter_rows(named=True)
    }
    out, day = [], window.first_day
    while day <= window.last_day and dt.datetime.combine(day, dt.time(), dt.UTC) < until:
        r = per_day.get(day)
        measured = r is not None and r["measured"]
        out.append(
            UsageDay(
                day,
                r["allocated_gpu_ms"] / 3.6e6 if r else 0.0,
                r["used_gpu_hours"] if r and measured else None,
                r["idle_gpu_hours"] if r and measured else None,
            )
        )
        day += _DAY
    return out


def usage_days(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle: IdleRule,
    cluster: str = "",
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
) -> tuple[UsageDay, ...]:
    """The days of :func:`idle_report` without their cost (nothing priced): GPU-hours held,
    used and idle per day of ``window``, of ``cluster`` as ``tenant`` sees it."""
    usage = _keep(daily_usage(wh, window, now=now, idle=idle, cluster=cluster), tenant, only)
    return tuple(_usage_days(usage, window, window.until(now)))


def _worst(usage: pl.DataFrame, idle: _IdleMs, n: int) -> tuple[IdleJob, ...]:
    job = ["cluster", "job_id"]
    top = (
        usage.group_by(job)
        .agg(pl.col("idle_gpu_hours").sum())
        .filter(pl.col("idle_gpu_hours") > 0)
        .sort(["idle_gpu_hours", *job], descending=[True, False, False])
        .head(n)
        .select(job)
    )
    jobs = (
        usage.join(top, on=job, how="semi")
        .with_columns(pl.concat_str("gpu_uuid", "mig_instance", separator="/").alias("_gpu"))
        .group_by(job)
        .agg(
            pl.col("tenant").max(),
            pl.col("gpu_model").max(),
            pl.col("_gpu").n_unique().alias("gpus"),
            pl.col("allocated_gpu_ms").sum(),
            pl.col("idle_gpu_hours").sum(),
        )
        .sort(["idle_gpu_hours", *job], descending=[True, False, False])
    )
    cost = idle.cost(job, top)
    return tuple(
        IdleJob(
            r["cluster"], r["job_id"], r["tenant"], r["gpu_model"], r["gpus"],
            r["allocated_gpu_ms"] / 3.6e6, r["idle_gpu_hours"],
            cost.get((r["cluster"], r["job_id"]), Decimal(0)).quantize(CENT),
        )
        for r in jobs.iter_rows(named=True)
    )  # fmt: skip


def idle_report(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle: IdleRule,
    prices: PriceBook,
    cluster: str = "",
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
    worst: int = WORST,
) -> IdleReport:
    """Idle now (at ``now``), per day of ``window`` and the ``worst`` jobs of it, of
    ``cluster`` ('' for all), as ``tenant`` sees it (None: everyone), keeping the lines whose
    keys are ``only`` (``{"pool": "p1"}``)."""
    usage = _keep(daily_usage(wh, window, now=now, idle=idle, cluster=cluster), tenant, only)
    costs = _idle_ms(usage, prices)
    return IdleReport(
        window=window,
        computed_until=window.until(now),
        idle_rule=idle,
        currency=prices.currency,
        tenant=tenant,
        now=idle_now(wh, now, idle=idle, prices=prices, cluster=cluster, tenant=tenant, only=only),
        days=_days(usage, costs, window, window.until(now)),
        worst_jobs=_worst(usage, costs, worst),
    )
