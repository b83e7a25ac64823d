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
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import polars as pl

from warehouse import queries
from warehouse.analytics import fleet
from warehouse.analytics.stranded import stranded_over
from warehouse.analytics.tenancy import in_tenant, owns
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
    CensoredHolds,
    EnergyReport,
    IdlePolicy,
    IdleRule,
    Ledger,
    LedgerError,
    LedgerRow,
    LedgerTotals,
    UnallocatedLine,
    UnpricedHours,
    Window,
    grouping_keys,
)
from warehouse.ledger.tail import kept_made, usage_kept_first
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
    has a row per day), the rest live (today's last hours from a kept tail where one holds
    them: :mod:`warehouse.ledger.tail`).
    """
    if source not in SOURCES:
        raise LedgerError(f"source {source!r} must be rollup or raw")
    live = functools.partial(
        live_usage_frame, wh, now=now, idle=idle, cluster=cluster, source=source
    )
    if source != "rollup" or not sealed:
        return live(window.start, window.end)
    return usage_kept_first(wh, live, window.start, window.end, now=now, idle=idle, cluster=cluster)


#: A line is one combination of every grouping's key. Costs are decided and rounded once per
#: line, and every grouping's rows add those rounded lines up, so a view never disagrees with
#: another by a cent (an org is exactly the sum of its projects, under every policy).
LINE_KEYS = GROUPINGS


@dataclasses.dataclass(frozen=True)
class _Lines:
    """Usage summed per line, with each line's exact direct cost and unpriced GPU-ms."""

    frame: pl.DataFrame  # LINE_KEYS, _line, allocated_gpu_ms, used/measured/idle hours, _measured
    direct: dict[int, Decimal]
    unpriced_ms: dict[int, float]
    #: the usage rows with their line (``_line``; the keys' nulls as ''), for a finer split
    rows: pl.DataFrame


def _lines(usage: pl.DataFrame, segments: Sequence[PriceSegment]) -> _Lines:
    keyed = usage.with_columns(pl.col(k).fill_null("") for k in LINE_KEYS)
    grouped = (
        keyed.with_row_index("_row")
        .group_by(LINE_KEYS)
        .agg(
            pl.col("allocated_gpu_ms").sum(),
            pl.col("used_gpu_hours").sum(),
            pl.col("measured_gpu_hours").sum(),
            pl.col("idle_gpu_hours").sum(),
            pl.col("used_gpu_hours").is_not_null().any().alias("_measured"),
            pl.col("_row"),
        )
        .sort(LINE_KEYS)
        .with_row_index("_line")
    )
    # each row's line from the groups' own row lists: half the time of joining on nine keys
    line_of = grouped.select("_line", "_row").explode("_row").sort("_row")["_line"]
    frame = grouped.drop("_row")
    rows = keyed.with_columns(line_of).with_row_index("_row")
    priced, unpriced = priced_ms(rows, segments, "s", "e", "allocated_gpu_ms", ["_line"])
    prices = [s.price for s in segments]
    direct = dict.fromkeys(frame["_line"].to_list(), Decimal(0))
    for line, seg, ms in priced.iter_rows():
        direct[line] += ms_to_hours(ms) * prices[seg]
    unpriced_of = {int(k): float(v) for k, v in unpriced.iter_rows()}
    return _Lines(frame, direct, unpriced_of, rows.drop("_row"))


def _line_shares(
    lines: _Lines, unallocated: Decimal, policy: IdlePolicy
) -> tuple[dict[int, Decimal], Decimal]:
    """Each line's exact share of the unallocated cost, and what stays unshared.

    The policy decides each tenant's share (weighted by the tenants' direct cost, or even
    between tenants); a tenant's share is then spread over its lines by their direct cost (by
    their GPU-hours where it has none), so no grouping changes what a tenant carries.
    """
    tenant_of = dict(zip(lines.frame["_line"], lines.frame["tenant"], strict=True))
    hours_of = dict(zip(lines.frame["_line"], lines.frame["allocated_gpu_ms"], strict=True))
    by_tenant: dict[str, list[int]] = defaultdict(list)
    for line, tenant in tenant_of.items():
        by_tenant[tenant].append(line)
    tenant_direct = {
        t: sum((lines.direct[x] for x in members), Decimal(0)) for t, members in by_tenant.items()
    }
    tenant_share, unshared = share_unallocated(tenant_direct, unallocated, policy)
    shares: dict[int, Decimal] = {}
    for tenant, members in by_tenant.items():
        weights = {x: lines.direct[x] for x in members}
        if not any(weights.values()):
            weights = {x: Decimal(hours_of[x]) for x in members}
        if not any(weights.values()):
            weights = dict.fromkeys(members, Decimal(1))
        total = sum(weights.values(), Decimal(0))
        for x in members:
            shares[x] = tenant_share[tenant] * weights[x] / total
    return shares, unshared


def _capacity(
    capacity: pl.DataFrame | None, segments: Sequence[PriceSegment]
) -> tuple[Decimal | None, float | None, float | None, dict[tuple[str, str], float]]:
    """Capacity cost (exact), capacity and healthy GPU-hours, unpriced capacity GPU-hours per
    (gpu_model, pool); Nones without inventory."""
    if capacity is None or not capacity.height:
        return None, None, None, {}
    capacity = capacity.with_row_index("_row").with_columns(
        (pl.col("gpu_model") + "\x00" + pl.col("pool")).alias("_key")
    )
    priced, unpriced = priced_ms(capacity, segments, "cs", "ce", "capacity_gpu_ms", ["_key"])
    cost = sum(
        (ms_to_hours(ms) * segments[seg].price for _k, seg, ms in priced.iter_rows()), Decimal(0)
    )
    cap_ms = float(capacity["capacity_gpu_ms"].sum())
    healthy_ms = float(capacity.filter(pl.col("health") == "healthy")["capacity_gpu_ms"].sum())
    missing = {
        (k.split("\x00")[0], k.split("\x00")[1]): ms / 3.6e6
        for k, ms in unpriced.iter_rows()
        if ms > 0
    }
    return cost, cap_ms / 3.6e6, healthy_ms / 3.6e6, missing


def _part(
    whole: Ledger,
    lines: _Lines,
    direct: dict[int, Decimal],
    shared: dict[str, Decimal],
    tenant: str | None,
    only: Mapping[str, str],
) -> Ledger:
    """The part of ``whole`` made of the lines of ``tenant`` with the keys ``only``: those
    lines, decided and rounded among everyone's (so their cents match the whole ledger), and
    totals over them alone. What belongs to nobody or to the cluster (capacity, the
    unallocated line, censored holds) is left out."""
    keep = in_tenant(tenant) if tenant is not None else pl.lit(True)
    for column, value in only.items():
        if column not in GROUPINGS:
            raise LedgerError(f"{column!r} is not one of {', '.join(GROUPINGS)}")
        keep &= pl.col(column) == value
    mine = lines.frame.filter(keep)
    kept = set(mine["_line"].to_list())
    own = _Lines(
        mine,
        {k: v for k, v in lines.direct.items() if k in kept},
        {k: v for k, v in lines.unpriced_ms.items() if k in kept},
        lines.rows.filter(keep),
    )
    rows = _rows(own, direct, shared, whole.group_by)
    measured = mine.filter(pl.col("_measured"))
    totals = LedgerTotals(
        capacity_gpu_hours=None,
        healthy_gpu_hours=None,
        unhealthy_gpu_hours=None,
        allocated_gpu_hours=float(mine["allocated_gpu_ms"].sum() or 0) / 3.6e6,
        used_gpu_hours=float(measured["used_gpu_hours"].sum()) if measured.height else None,
        idle_gpu_hours=float(measured["idle_gpu_hours"].sum()) if measured.height else None,
        unmeasured_gpu_hours=sum(r.unmeasured_gpu_hours for r in rows),
        unallocated_gpu_hours=None,
        stranded_gpu_hours=None,
        unpriced_gpu_hours=sum(own.unpriced_ms.values(), 0.0) / 3.6e6,
        capacity_cost=None,
        unshared_cost=Decimal(0),
        total_cost=sum((r.total_cost for r in rows), Decimal(0)),
    )
    return dataclasses.replace(
        whole,
        rows=tuple(rows),
        totals=totals,
        unallocated=None,
        unpriced=_unpriced(own, {}),
        tenant=tenant,
        only=tuple(sorted(only.items())),
    )


def _unpriced(
    lines: _Lines, capacity_missing: dict[tuple[str, str], float]
) -> tuple[UnpricedHours, ...]:
    allocated: dict[tuple[str, str], float] = defaultdict(float)
    for line, model, pool in lines.frame.select("_line", "gpu_model", "pool").iter_rows():
        ms = lines.unpriced_ms.get(line, 0.0)
        if ms > 0:
            allocated[(model, pool)] += ms / 3.6e6
    pairs = sorted(set(allocated) | set(capacity_missing))
    return tuple(
        UnpricedHours(m, p, allocated.get((m, p), 0.0), capacity_missing.get((m, p), 0.0))
        for m, p in pairs
    )


@dataclasses.dataclass(frozen=True)
class DecidedLines:
    """Every line of a ledger with its cents decided and rounded: what each grouping's rows
    add up (see :data:`LINE_KEYS`), and what a finer breakdown (per job) splits further."""

    lines: _Lines
    direct: dict[int, Decimal]  # per line, rounded
    shared: dict[str, Decimal]  # per line (its number as text), rounded; "u": the unshared
    capacity: tuple[Decimal | None, float | None, float | None, dict[tuple[str, str], float]]
    grand: Decimal  # capacity cost (or, without inventory, direct cost) to the cent


@dataclasses.dataclass(frozen=True)
class PricedLines:
    """Every line of a ledger with its exact direct cost, and the capacity's cost: what
    :func:`decide_lines` decides under any idle policy."""

    lines: _Lines
    capacity: tuple[Decimal | None, float | None, float | None, dict[tuple[str, str], float]]


def price_lines(
    usage: pl.DataFrame, capacity: pl.DataFrame | None, segments: Sequence[PriceSegment]
) -> PricedLines:
    """The lines of ``usage`` and the capacity, priced (pure: no I/O; no policy yet)."""
    return PricedLines(_lines(usage, segments), _capacity(capacity, segments))


def decide_lines(
    usage: pl.DataFrame,
    capacity: pl.DataFrame | None,
    segments: Sequence[PriceSegment],
    policy: IdlePolicy,
) -> DecidedLines:
    """Price every line and share the unallocated cost under ``policy`` (pure: no I/O)."""
    return decide(price_lines(usage, capacity, segments), policy)


def decide(priced: PricedLines, policy: IdlePolicy) -> DecidedLines:
    """Share the unallocated cost of ``priced`` under ``policy`` and round every line.

    Direct cost is rounded on its own, so it never depends on the policy; the shares of the
    unallocated cost are rounded to what is left of capacity cost, so the lines plus the
    unshared part equal it to the cent.
    """
    lines, capacity_of = priced.lines, priced.capacity
    capacity_cost = capacity_of[0]
    direct_exact = sum(lines.direct.values(), Decimal(0))
    direct = round_conserving(lines.direct, direct_exact)
    grand = (capacity_cost if capacity_cost is not None else direct_exact).quantize(CENT)
    unallocated_exact = capacity_cost - direct_exact if capacity_cost is not None else Decimal(0)
    shares_exact, unshared_exact = _line_shares(lines, unallocated_exact, policy)
    shared = round_conserving(
        {**{str(k): v for k, v in shares_exact.items()}, "u": unshared_exact},
        grand - sum(direct.values(), Decimal(0)),
    )
    return DecidedLines(lines, direct, shared, capacity_of, grand)


@dataclasses.dataclass(frozen=True)
class Decided:
    """What a ledger of a window is built from, its lines decided under one policy."""

    usage: pl.DataFrame
    capacity: pl.DataFrame
    segments: list[PriceSegment]
    lines: DecidedLines


def decided_inputs(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle: IdleRule,
    prices: PriceBook,
    policy: IdlePolicy,
    cluster: str = "",
    source: str = "rollup",
    sealed: bool = True,
) -> Decided:
    """:func:`priced_inputs` of the window with its lines decided under ``policy``: the whole
    fleet's (or cluster's), which every tenant's view, grouping and job split takes its cents
    from. Where a kept tail is as of ``now``, each is made once per pass (the priced lines
    once for every policy) and shared by whoever asks it (:func:`~warehouse.ledger.tail.
    kept_made`)."""

    def priced() -> tuple[pl.DataFrame, pl.DataFrame, list[PriceSegment], PricedLines]:
        usage, capacity, segments = priced_inputs(
            wh,
            window,
            now=now,
            idle=idle,
            prices=prices,
            cluster=cluster,
            source=source,
            sealed=sealed,
        )
        return (
            usage,
            capacity,
            segments,
            price_lines(usage, capacity if capacity.height else None, segments),
        )

    def decided() -> Decided:
        key = ("priced lines", window, cluster, prices)
        usage, capacity, segments, lines = kept_made(wh, now, idle, key, priced)
        return Decided(usage, capacity, segments, decide(lines, policy))

    if source != "rollup" or not sealed:  # asked of the warehouse itself: nothing kept
        usage, capacity, segments, lines = priced()
        return Decided(usage, capacity, segments, decide(lines, policy))
    return kept_made(wh, now, idle, ("decided lines", window, cluster, prices, policy), decided)


def warm_lines(
    wh: Warehouse,
    windows: Sequence[Window],
    *,
    now: dt.datetime,
    idle: IdleRule,
    prices: PriceBook,
    policy: str | IdlePolicy,
) -> None:
    """Make the whole fleet's decided lines of each of ``windows`` as of ``now``
    (:func:`decided_inputs`), so that the pages asking them of a kept tail as of ``now`` find
    them made: what a live tail's ``warm`` calls after its pass."""
    for window in windows:
        decided_inputs(
            wh, window, now=now, idle=idle, prices=prices, policy=IdlePolicy.parse(policy)
        )


def build_ledger(
    decided: DecidedLines,
    *,
    group_by: str,
    policy: IdlePolicy,
    window: Window,
    computed_until: dt.datetime,
    idle: IdleRule,
    currency: str,
    stranded_gpu_hours: float | None = None,
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
) -> Ledger:
    """Turn lines decided under ``policy`` (:func:`decide_lines`) into the ledger (pure: no
    I/O). ``tenant`` (an org, or org/project) keeps that tenant's lines alone, with the very
    cents they carry in the whole ledger; ``only`` keeps the lines whose keys (``pool``,
    ``gpu_model``, any of :data:`GROUPINGS`) have those values.
    """
    grouping_keys(group_by)  # a grouping that is not one is refused before any work
    lines, direct, shared = decided.lines, decided.direct, decided.shared
    capacity_cost, cap_hours, healthy, capacity_missing = decided.capacity
    grand = decided.grand
    rows = _rows(lines, direct, shared, group_by)
    allocated_hours = float(lines.frame["allocated_gpu_ms"].sum() or 0) / 3.6e6
    measured = lines.frame.filter(pl.col("_measured"))
    unallocated_hours = (cap_hours - allocated_hours) if cap_hours is not None else None
    unallocated_line = None
    if capacity_cost is not None and policy is IdlePolicy.NONE:
        unallocated_line = UnallocatedLine(unallocated_hours or 0.0, shared["u"])
    totals = LedgerTotals(
        capacity_gpu_hours=cap_hours,
        healthy_gpu_hours=healthy,
        unhealthy_gpu_hours=(cap_hours - healthy)
        if cap_hours is not None and healthy is not None
        else None,
        allocated_gpu_hours=allocated_hours,
        used_gpu_hours=float(measured["used_gpu_hours"].sum()) if measured.height else None,
        idle_gpu_hours=float(measured["idle_gpu_hours"].sum()) if measured.height else None,
        unmeasured_gpu_hours=sum(r.unmeasured_gpu_hours for r in rows),
        unallocated_gpu_hours=unallocated_hours,
        stranded_gpu_hours=stranded_gpu_hours,
        unpriced_gpu_hours=sum(lines.unpriced_ms.values(), 0.0) / 3.6e6,
        capacity_cost=grand if capacity_cost is not None else None,
        unshared_cost=shared["u"],
        total_cost=sum((r.total_cost for r in rows), Decimal(0)) + shared["u"],
    )
    ledger = Ledger(
        window,
        computed_until,
        group_by,
        policy,
        idle,
        currency,
        tuple(rows),
        totals,
        unallocated=unallocated_line,
        unpriced=_unpriced(lines, capacity_missing),
    )
    if tenant is None and not only:
        return ledger
    return _part(ledger, lines, direct, shared, tenant, only or {})


def _rows(
    lines: _Lines, direct: dict[int, Decimal], shared: dict[str, Decimal], group_by: str
) -> list[LedgerRow]:
    """The rounded lines added up by ``group_by``'s key (or keys, see :func:`grouping_keys`)."""
    keys = grouping_keys(group_by)
    acc: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in lines.frame.iter_rows(named=True):
        line, key = r["_line"], tuple(r[k] for k in keys)
        a = acc.setdefault(
            key,
            {
                "ms": 0.0,
                "used": 0.0,
                "idle": 0.0,
                "measured_h": 0.0,
                "measured": False,
                "unpriced": 0.0,
                "direct": Decimal(0),
                "shared": Decimal(0),
            },
        )
        a["ms"] += r["allocated_gpu_ms"]
        a["used"] += r["used_gpu_hours"] or 0.0
        a["idle"] += r["idle_gpu_hours"] or 0.0
        a["measured_h"] += r["measured_gpu_hours"] or 0.0
        a["measured"] |= r["_measured"]
        a["unpriced"] += lines.unpriced_ms.get(line, 0.0)
        a["direct"] += direct[line]
        a["shared"] += shared[str(line)]
    return [
        LedgerRow(
            key="/".join(k or "(none)" for k in key),
            allocated_gpu_hours=a["ms"] / 3.6e6,
            used_gpu_hours=a["used"] if a["measured"] else None,
            idle_gpu_hours=a["idle"] if a["measured"] else None,
            # clipped at 0: the two sums differ in their last bits when all was measured
            unmeasured_gpu_hours=max(0.0, a["ms"] / 3.6e6 - a["measured_h"]),
            direct_cost=a["direct"],
            shared_cost=a["shared"],
            total_cost=a["direct"] + a["shared"],
            unpriced_gpu_hours=a["unpriced"] / 3.6e6,
            parts=tuple(k or "(none)" for k in key) if len(keys) > 1 else (),
        )
        for key, a in sorted(acc.items())
    ]


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
    pairs = {
        pair
        for frame in (usage, capacity)
        for pair in frame.select("gpu_model", "pool").unique().iter_rows()
    }
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
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
) -> Ledger:
    """The whole ledger of ``window`` grouped by ``group_by`` (one of :data:`GROUPINGS`, or
    several joined by commas: every combination held).

    ``now`` cuts a window that reaches into the future (it is never read from the clock
    here). ``prices`` defaults to the warehouse's price book. ``stranded`` measures the
    stranded (FGD) GPU-hours of the one cluster asked for or held; ``energy`` adds energy
    and its cost beside the GPU-hour ledger. ``tenant`` (an org or org/project) gives that
    tenant's view: its own lines and totals over them, nothing of the cluster's (see
    :func:`build_ledger`); its energy is kept only where each row is a whole tenant (or org).
    ``only`` keeps lines by their keys (``{"pool": "a100-pool"}``), with the same totals.
    """
    grouping_keys(group_by)  # a grouping that is not one is refused before any work
    policy = IdlePolicy.parse(idle_policy)
    idle = idle or IdleRule()
    book = prices if prices is not None else load_price_book(wh)
    currency = book.currency
    decided = decided_inputs(
        wh,
        window,
        now=now,
        idle=idle,
        prices=book,
        policy=policy,
        cluster=cluster,
        source=source,
        sealed=sealed,
    )
    until = window.until(now)
    ledger = build_ledger(
        decided.lines,
        group_by=group_by,
        policy=policy,
        window=window,
        computed_until=until,
        idle=idle,
        currency=currency,
        stranded_gpu_hours=_stranded(wh, cluster, window.start, until)
        if stranded and tenant is None and not only
        else None,
        tenant=tenant,
        only=only,
    )
    whole = tenant is None and not only
    censored = _censored(wh, cluster, window.start, until) if whole else ()
    if censored:
        ledger = dataclasses.replace(ledger, censored=censored)
    whole_rows = group_by == "tenant" or (group_by == "org" and "/" not in (tenant or ""))
    energy = energy and "," not in group_by  # energy is kept under one grouping
    if energy and (whole or (whole_rows and not only)):
        report = energy_cost(
            wh, window.start, until, group_by=group_by, cluster=cluster, prices=book
        )
        if tenant is not None:
            report = _energy_of(report, tenant)
        ledger = dataclasses.replace(ledger, energy=report)
    return ledger


def _energy_of(report: EnergyReport, tenant: str) -> EnergyReport:
    """A tenant's or org's energy rows alone (their unpriced energy is not told apart)."""
    rows = tuple(r for r in report.rows if owns(tenant, r.key))
    return EnergyReport(
        rows,
        sum((r.energy_kwh for r in rows), 0.0),
        sum((r.energy_cost for r in rows), Decimal(0)),
        0.0,
    )


def _censored(
    wh: Warehouse, cluster: str, start: dt.datetime, until: dt.datetime
) -> tuple[CensoredHolds, ...]:
    """The allocations the window holds up to a source's observation end, per cluster."""
    if until <= start:
        return ()
    frame = queries.run(wh, "ledger_censored", a=start, b=until, cluster=cluster)
    return tuple(
        CensoredHolds(r["cluster"], r["allocations"], r["observation_end"], r["gpu_hours"])
        for r in frame.iter_rows(named=True)
    )


def _stranded(wh: Warehouse, cluster: str, start: dt.datetime, until: dt.datetime) -> float | None:
    """Stranded (FGD) GPU-hours of one cluster, sampled hourly (sealed hours read); None when
    the warehouse holds several clusters and none was named, or there is no time or inventory
    to measure."""
    if until <= start:
        return None
    if not cluster:
        names = fleet.known_clusters(wh)
        if len(names) != 1:
            return None
        cluster = str(names[0])
    frame, _tenants = stranded_over(wh, cluster, start, until)
    return round(float(frame["stranded_gpu_hours"].sum()), 6) if frame.height else None
