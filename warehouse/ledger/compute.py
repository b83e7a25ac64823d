"""The ledger: GPU-hours, idle time and cost attributed to tenants, conserving every cent.

:func:`compute_ledger` is the one entry point every consumer calls. ClickHouse does the heavy
part (:mod:`warehouse.ledger.usage`, or sealed days from :mod:`warehouse.ledger.seal`); small
pure functions (:func:`build_ledger`, :mod:`warehouse.ledger.pricing`) then price the hours
from the effective-dated price book and share the unallocated cost under the idle policy:

- ``weighted``: each group carries unallocated cost in proportion to its direct cost;
- ``even``: each group carries the same share;
- ``none``: unallocated cost stays on its own ``__unallocated__`` line.

Money is ``Decimal`` and is rounded once, at the end, to the currency's cents; the rounding
residue goes to the largest fractional parts (largest-remainder), so that the rows plus the
unshared line equal capacity GPU-hours x price to the cent, for every policy and grouping.
Where the data has no inventory (a trace without a node list), capacity and everything
derived from it are ``None``, never invented.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal

import polars as pl

from warehouse.analytics import fleet
from warehouse.analytics.fragmentation import stranded_gpu_hours
from warehouse.client import Warehouse
from warehouse.ledger.energy import energy_cost
from warehouse.ledger.pricing import (
    CENT,
    PriceBook,
    PriceSegment,
    load_price_book,
    ms_to_hours,
    price_segments,
    priced_ms,
    round_conserving,
    share_unallocated,
)
from warehouse.ledger.result import (
    GROUPINGS,
    UNALLOCATED,
    IdlePolicy,
    IdleRule,
    Ledger,
    LedgerError,
    LedgerRow,
    LedgerTotals,
    Window,
)
from warehouse.ledger.seal import usage_with_seals
from warehouse.ledger.usage import SOURCES, capacity_frame, live_usage_frame


def usage_frame(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle: IdleRule,
    cluster: str = "",
    source: str = "rollup",
    sealed: bool = True,
) -> pl.DataFrame:
    """Every allocation interval in the window with allocated_gpu_ms, used and idle hours.

    ``source`` is ``rollup`` (the 1-minute rollup) or ``raw`` (the raw samples); both give
    the same figures, the rollup faster. With the rollup and ``sealed``, whole days sealed by
    ``gpuledger seal`` whose data has not changed since are read as sealed (an interval then
    has a row per day), the rest live.
    """
    if source not in SOURCES:
        raise LedgerError(f"source {source!r} must be rollup or raw")
    live = functools.partial(
        live_usage_frame, wh, now=now, idle=idle, cluster=cluster, source=source
    )
    if source != "rollup" or not sealed:
        return live(window.start, window.end)
    return usage_with_seals(wh, live, window.start, window.end, now=now, cluster=cluster, idle=idle)


def build_ledger(
    usage: pl.DataFrame,
    capacity: pl.DataFrame | None,
    segments: Sequence[PriceSegment],
    *,
    group_by: str,
    policy: IdlePolicy,
    window: Window,
    computed_until: dt.datetime,
    idle: IdleRule,
    currency: str,
    stranded_gpu_hours: float | None = None,
) -> Ledger:
    """Turn usage rows and capacity states into the ledger (pure: no I/O)."""
    if group_by not in GROUPINGS:
        raise LedgerError(f"--by {group_by!r} is not one of {', '.join(GROUPINGS)}")
    prices = {i: s.price for i, s in enumerate(segments)}
    usage = usage.with_row_index("_row").with_columns(pl.col(group_by).fill_null("").alias("_key"))
    priced, unpriced = priced_ms(usage, segments, "s", "e", "allocated_gpu_ms", ["_key"])
    direct: dict[str, Decimal] = defaultdict(Decimal)
    for key, seg, ms in priced.iter_rows():
        direct[key] += ms_to_hours(ms) * prices[seg]
    unpriced_ms = float(unpriced["_ms"].sum() or 0)
    per_key = usage.group_by("_key").agg(
        pl.col("allocated_gpu_ms").sum(),
        pl.col("used_gpu_hours").sum(),
        pl.col("idle_gpu_hours").sum(),
        pl.col("used_gpu_hours").is_not_null().any().alias("_m"),
    )
    for key in per_key["_key"]:
        direct.setdefault(key, Decimal(0))

    capacity_cost: Decimal | None = None
    cap_hours = healthy = unhealthy = None
    if capacity is not None and capacity.height:
        capacity = capacity.with_row_index("_row").with_columns(pl.lit("").alias("_key"))
        cap_priced, _ = priced_ms(capacity, segments, "cs", "ce", "capacity_gpu_ms", ["_key"])
        capacity_cost = sum(
            (ms_to_hours(ms) * prices[seg] for _k, seg, ms in cap_priced.iter_rows()), Decimal(0)
        )
        cap_ms = float(capacity["capacity_gpu_ms"].sum())
        healthy_ms = float(capacity.filter(pl.col("health") == "healthy")["capacity_gpu_ms"].sum())
        cap_hours, healthy = cap_ms / 3.6e6, healthy_ms / 3.6e6
        unhealthy = cap_hours - healthy

    direct_total = sum(direct.values(), Decimal(0))
    unallocated_cost = (capacity_cost - direct_total) if capacity_cost is not None else Decimal(0)
    shares, unshared = share_unallocated(direct, unallocated_cost, policy)
    exact = {
        **{f"d:{k}": v for k, v in direct.items()},
        **{f"s:{k}": v for k, v in shares.items()},
        "u": unshared,
    }
    grand = capacity_cost if capacity_cost is not None else direct_total
    rounded = round_conserving(exact, grand)

    stats = {r["_key"]: r for r in per_key.iter_rows(named=True)}
    rows = []
    for key in sorted(direct):
        st = stats.get(key)
        d, sh = rounded[f"d:{key}"], rounded[f"s:{key}"]
        rows.append(
            LedgerRow(
                key=key or "(none)",
                allocated_gpu_hours=(st["allocated_gpu_ms"] / 3.6e6) if st else 0.0,
                used_gpu_hours=st["used_gpu_hours"] if st and st["_m"] else None,
                idle_gpu_hours=st["idle_gpu_hours"] if st and st["_m"] else None,
                direct_cost=d,
                shared_cost=sh,
                total_cost=d + sh,
            )
        )
    if capacity_cost is not None and policy is IdlePolicy.NONE:
        rows.append(LedgerRow(UNALLOCATED, 0.0, None, None, Decimal(0), rounded["u"], rounded["u"]))
    allocated_hours = float(usage["allocated_gpu_ms"].sum() or 0) / 3.6e6
    measured = usage.filter(pl.col("used_gpu_hours").is_not_null())
    totals = LedgerTotals(
        capacity_gpu_hours=cap_hours,
        healthy_gpu_hours=healthy,
        unhealthy_gpu_hours=unhealthy,
        allocated_gpu_hours=allocated_hours,
        used_gpu_hours=float(measured["used_gpu_hours"].sum()) if measured.height else None,
        idle_gpu_hours=float(measured["idle_gpu_hours"].sum()) if measured.height else None,
        unallocated_gpu_hours=(cap_hours - allocated_hours) if cap_hours is not None else None,
        stranded_gpu_hours=stranded_gpu_hours,
        unpriced_gpu_hours=unpriced_ms / 3.6e6,
        capacity_cost=capacity_cost.quantize(CENT) if capacity_cost is not None else None,
        unshared_cost=rounded["u"],
        total_cost=sum((r.total_cost for r in rows), Decimal(0)),
    )
    return Ledger(window, computed_until, group_by, policy, idle, currency, tuple(rows), totals)


def priced_inputs(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle: IdleRule,
    prices: PriceBook,
    cluster: str = "",
    source: str = "rollup",
    sealed: bool = True,
) -> tuple[pl.DataFrame, pl.DataFrame, list[PriceSegment]]:
    """What a ledger of the window is built from: usage rows, capacity states, price segments."""
    usage = usage_frame(
        wh, window, now=now, idle=idle, cluster=cluster, source=source, sealed=sealed
    )
    capacity = capacity_frame(wh, window.start, window.end, now=now, cluster=cluster)
    pairs = set(zip(usage["gpu_model"], usage["pool"], strict=True)) | set(
        zip(capacity["gpu_model"], capacity["pool"], strict=True)
    )
    return usage, capacity, price_segments(prices, pairs, window.start, window.end)


def compute_ledger(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    group_by: str = "tenant",
    idle_policy: str | IdlePolicy = IdlePolicy.WEIGHTED,
    idle: IdleRule | None = None,
    prices: PriceBook | None = None,
    cluster: str = "",
    source: str = "rollup",
    sealed: bool = True,
    energy: bool = False,
    stranded: bool = True,
) -> Ledger:
    """The whole ledger of ``window`` grouped by ``group_by`` (one of :data:`GROUPINGS`).

    ``now`` cuts a window that reaches into the future (it is never read from the clock
    here). ``prices`` defaults to the warehouse's price book. ``stranded`` measures the
    stranded (FGD) GPU-hours of the one cluster asked for or held; ``energy`` adds energy
    and its cost beside the GPU-hour ledger.
    """
    if group_by not in GROUPINGS:
        raise LedgerError(f"--by {group_by!r} is not one of {', '.join(GROUPINGS)}")
    policy = IdlePolicy.parse(idle_policy)
    idle = idle or IdleRule()
    book = prices if prices is not None else load_price_book(wh)
    currency = book.currency
    usage, capacity, segments = priced_inputs(
        wh,
        window,
        now=now,
        idle=idle,
        prices=book,
        cluster=cluster,
        source=source,
        sealed=sealed,
    )
    until = window.until(now)
    ledger = build_ledger(
        usage,
        capacity if capacity.height else None,
        segments,
        group_by=group_by,
        policy=policy,
        window=window,
        computed_until=until,
        idle=idle,
        currency=currency,
        stranded_gpu_hours=_stranded(wh, cluster, window.start, until) if stranded else None,
    )
    if energy:
        report = energy_cost(
            wh, window.start, until, group_by=group_by, cluster=cluster, prices=book
        )
        ledger = dataclasses.replace(ledger, energy=report)
    return ledger


def _stranded(wh: Warehouse, cluster: str, start: dt.datetime, until: dt.datetime) -> float | None:
    """Stranded (FGD) GPU-hours of one cluster, sampled hourly; None when the warehouse holds
    several clusters and none was named, or there is no time or inventory to measure."""
    if until <= start:
        return None
    if not cluster:
        names = fleet.known_clusters(wh)
        if len(names) != 1:
            return None
        cluster = str(names[0])
    frame = stranded_gpu_hours(wh, cluster, start, until)
    return round(float(frame["stranded_gpu_hours"].sum()), 6) if frame.height else None
