"""The ledger: GPU-hours, idle time and cost attributed to tenants, conserving every cent.

ClickHouse does the heavy part (``sql/ledger_usage.sql``: every allocation interval in the
window with the GPU-hours it held, used and left idle; ``sql/ledger_capacity.sql``: every
GPU's inventory states). Small pure functions then price the hours from the effective-dated
price book and share the unallocated cost under the idle policy:

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
import enum
import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import polars as pl

from warehouse import queries
from warehouse.client import Warehouse

GROUPINGS = (
    "tenant",
    "org",
    "project",
    "user",
    "gpu_model",
    "pool",
    "node",
    "queue",
    "workload_type",
)
UNALLOCATED = "__unallocated__"
UNPRICED = "__unpriced__"
_MS_PER_HOUR = Decimal(3_600_000)
_CENT = Decimal("0.01")


class IdlePolicy(enum.StrEnum):
    WEIGHTED = "weighted"
    EVEN = "even"
    NONE = "none"


class LedgerError(ValueError):
    """A ledger request that cannot be answered as asked (bad grouping, window, policy)."""


@dataclasses.dataclass(frozen=True)
class PriceSegment:
    """The price of one GPU-hour of ``gpu_model`` in ``pool`` over [start, end)."""

    gpu_model: str
    pool: str
    start: dt.datetime
    end: dt.datetime
    price: Decimal
    currency: str


@dataclasses.dataclass(frozen=True)
class LedgerRow:
    key: str
    allocated_gpu_hours: float
    used_gpu_hours: float | None
    idle_gpu_hours: float | None
    direct_cost: Decimal
    shared_cost: Decimal
    total_cost: Decimal


@dataclasses.dataclass(frozen=True)
class LedgerTotals:
    capacity_gpu_hours: float | None
    healthy_gpu_hours: float | None
    unhealthy_gpu_hours: float | None
    allocated_gpu_hours: float
    used_gpu_hours: float | None
    idle_gpu_hours: float | None
    unallocated_gpu_hours: float | None
    stranded_gpu_hours: float | None
    unpriced_gpu_hours: float
    capacity_cost: Decimal | None
    unshared_cost: Decimal
    total_cost: Decimal


@dataclasses.dataclass(frozen=True)
class Ledger:
    start: dt.datetime
    end: dt.datetime
    by: str
    idle_policy: IdlePolicy
    currency: str
    rows: tuple[LedgerRow, ...]
    totals: LedgerTotals

    @property
    def conserved(self) -> bool | None:
        """Rows plus unshared lines equal capacity cost (None without inventory)."""
        if self.totals.capacity_cost is None:
            return None
        return self.totals.total_cost == self.totals.capacity_cost

    def to_json(self) -> dict[str, Any]:
        def money(v: Decimal | None) -> str | None:
            return None if v is None else str(v)

        def hours(v: float | None) -> float | None:
            return None if v is None else round(v, 6)

        t = self.totals
        return {
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "by": self.by,
            "idle_policy": self.idle_policy.value,
            "currency": self.currency,
            "rows": [
                {
                    "key": r.key,
                    "allocated_gpu_hours": hours(r.allocated_gpu_hours),
                    "used_gpu_hours": hours(r.used_gpu_hours),
                    "idle_gpu_hours": hours(r.idle_gpu_hours),
                    "direct_cost": money(r.direct_cost),
                    "shared_cost": money(r.shared_cost),
                    "total_cost": money(r.total_cost),
                }
                for r in self.rows
            ],
            "totals": {
                "capacity_gpu_hours": hours(t.capacity_gpu_hours),
                "healthy_gpu_hours": hours(t.healthy_gpu_hours),
                "unhealthy_gpu_hours": hours(t.unhealthy_gpu_hours),
                "allocated_gpu_hours": hours(t.allocated_gpu_hours),
                "used_gpu_hours": hours(t.used_gpu_hours),
                "idle_gpu_hours": hours(t.idle_gpu_hours),
                "unallocated_gpu_hours": hours(t.unallocated_gpu_hours),
                "stranded_gpu_hours": hours(t.stranded_gpu_hours),
                "unpriced_gpu_hours": hours(t.unpriced_gpu_hours),
                "capacity_cost": money(t.capacity_cost),
                "unshared_cost": money(t.unshared_cost),
                "total_cost": money(t.total_cost),
            },
            "conserved": self.conserved,
        }


# -- reading -----------------------------------------------------------------------------------
def until_now(end: dt.datetime) -> dt.datetime:
    """A window never reaches into the future: running jobs and present GPUs count up to now,
    not up to the end of a month that has not happened yet."""
    return min(end, dt.datetime.now(dt.UTC))


def usage_margin(idle_min_duration_s: int) -> dt.timedelta:
    """How far around a window the usage query reads minutes (ledger_usage.sql's lo and hi):
    enough to judge an idle run crossing the window's edge."""
    return dt.timedelta(seconds=idle_min_duration_s + 60)


#: Settings per source, appended to the query's own: raw samples are grouped GPU by GPU in the
#: table's order (the rollup's rows are few enough that the engine's default is faster there),
#: and each reading stream hands on its GPU-days every 1 MB of them (about 90 GPU-days)
#: rather than every 50 MB (the default, more than a day's part holds), so that the minutes
#: are cut into hours and consumed on both cores while the samples are still being read, not
#: on one core once they all are: 7.6 s against 11.2 s for the minutes query alone on 265 M
#: samples, where the CPU time is about the same.
_SOURCE_SETTINGS = {
    "rollup": "",
    "raw": ", optimize_aggregation_in_order = 1, aggregation_in_order_max_block_bytes = 1000000",
}


def usage_frame(
    wh: Warehouse,
    start: dt.datetime,
    end: dt.datetime,
    *,
    cluster: str = "",
    idle_threshold_ratio: float = 0.05,
    idle_min_duration_s: int = 1800,
    source: str = "rollup",
    sealed: bool = True,
) -> pl.DataFrame:
    """Every allocation interval in [start, end) with allocated_gpu_ms, used and idle hours.

    ``source`` is ``rollup`` (the 1-minute rollup) or ``raw`` (the raw samples); both give
    the same figures, the rollup faster. With the rollup and ``sealed``, whole days sealed by
    ``gpuledger seal`` whose data has not changed since are read as sealed (see
    :mod:`warehouse.analytics.seal`; an interval then has a row per day), the rest live.
    """
    if source not in ("rollup", "raw"):
        raise LedgerError(f"source {source!r} must be rollup or raw")

    live = functools.partial(
        live_usage_frame,
        wh,
        cluster=cluster,
        idle_threshold_ratio=idle_threshold_ratio,
        idle_min_duration_s=idle_min_duration_s,
        source=source,
    )
    if source != "rollup" or not sealed:
        return live(start, end)
    from warehouse.analytics.seal import usage_with_seals

    return usage_with_seals(
        wh,
        live,
        start,
        end,
        cluster=cluster,
        idle_threshold_ratio=idle_threshold_ratio,
        idle_min_duration_s=idle_min_duration_s,
    )


def live_usage_frame(
    wh: Warehouse,
    start: dt.datetime,
    end: dt.datetime,
    *,
    cluster: str = "",
    idle_threshold_ratio: float = 0.05,
    idle_min_duration_s: int = 1800,
    source: str = "rollup",
) -> pl.DataFrame:
    """:func:`usage_frame` computed from the minutes or samples alone (no sealed days)."""
    margin = usage_margin(idle_min_duration_s)
    settings = _SOURCE_SETTINGS[source]
    materialized = wh.has_setting("enable_materialized_cte")
    if materialized:
        settings += ", enable_materialized_cte = 1"
    text = (
        queries.sql("ledger_usage")
        .replace("{{minutes}}", queries.sql(f"ledger_minutes_{source}"))
        .replace("{{materialized}}", "MATERIALIZED" if materialized else "")
        .replace("{{settings}}", settings)
    )
    return wh.frame(
        text,
        {
            "db": wh.database,
            "cluster": cluster,
            "a": start,
            "b": until_now(end),
            "lo": start - margin,
            "hi": end + margin,
            "threshold": float(idle_threshold_ratio),
            "min_idle_s": int(idle_min_duration_s),
        },
    )


def capacity_frame(
    wh: Warehouse, start: dt.datetime, end: dt.datetime, *, cluster: str = ""
) -> pl.DataFrame:
    """Every GPU's inventory states clipped to [start, end), with capacity_gpu_ms."""
    return queries.run(wh, "ledger_capacity", cluster=cluster, a=start, b=until_now(end))


def price_segments(
    rows: Iterable[Mapping[str, Any]],
    pairs: Iterable[tuple[str, str]],
    start: dt.datetime,
    end: dt.datetime,
) -> list[PriceSegment]:
    """Resolve the price book into segments for each (gpu_model, pool) in ``pairs``.

    A pool's own entries apply from the first of them on; before that, and for pools without
    entries, the entries with pool '' apply. An entry lasts until the next one of its series.
    """
    series: dict[tuple[str, str], list[tuple[dt.datetime, Decimal, str]]] = defaultdict(list)
    for r in rows:
        if r["resource"] != "gpu_hour":
            continue
        series[(r["gpu_model"], r["pool"])].append(
            (r["effective_from"], Decimal(r["price"]), r["currency"])
        )
    out: list[PriceSegment] = []
    for model, pool in sorted(set(pairs)):
        generic = sorted(series.get((model, ""), []))
        own = sorted(series.get((model, pool), [])) if pool else []
        cut = own[0][0] if own else None
        entries = [e for e in generic if cut is None or e[0] < cut] + own
        for i, (eff, price, currency) in enumerate(entries):
            seg_end = entries[i + 1][0] if i + 1 < len(entries) else end
            s, e = max(eff, start), min(seg_end, end)
            if s < e:
                out.append(PriceSegment(model, pool, s, e, price, currency))
    return out


def _segments_frame(segments: Sequence[PriceSegment]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "gpu_model": [s.gpu_model for s in segments],
            "pool": [s.pool for s in segments],
            "seg_start": [s.start for s in segments],
            "seg_end": [s.end for s in segments],
            "seg": list(range(len(segments))),
        },
        schema={
            "gpu_model": pl.String,
            "pool": pl.String,
            "seg_start": pl.Datetime("ms", "UTC"),
            "seg_end": pl.Datetime("ms", "UTC"),
            "seg": pl.Int64,
        },
    )


def _priced_ms(
    frame: pl.DataFrame,
    segments: Sequence[PriceSegment],
    s: str,
    e: str,
    weight: str,
    keys: Sequence[str],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split [s, e) intervals over price segments: (GPU-ms per key and segment, unpriced)."""
    joined = frame.join(_segments_frame(segments), on=["gpu_model", "pool"], how="left")
    clipped = joined.with_columns(
        pl.max_horizontal(s, "seg_start").alias("_s"), pl.min_horizontal(e, "seg_end").alias("_e")
    )
    overlap = (pl.col("_e") - pl.col("_s")).dt.total_milliseconds().clip(lower_bound=0)
    span = (pl.col(e) - pl.col(s)).dt.total_milliseconds()
    priced = (
        clipped.filter(pl.col("seg").is_not_null())
        .with_columns((pl.col(weight) * overlap / span).alias("_ms"))
        .group_by([*keys, "seg"])
        .agg(pl.col("_ms").sum())
    )
    covered = clipped.group_by([*keys, "_row"]).agg(
        (pl.col(weight).first() - (pl.col(weight) * overlap / span).fill_null(0).sum()).alias("_ms")
    )
    unpriced = covered.group_by(keys).agg(pl.col("_ms").sum())
    return priced, unpriced


# -- pure ledger arithmetic ---------------------------------------------------------------------
def _hours(ms: float) -> Decimal:
    return Decimal(ms) / _MS_PER_HOUR


def share_unallocated(
    direct: Mapping[str, Decimal], unallocated: Decimal, policy: IdlePolicy
) -> tuple[dict[str, Decimal], Decimal]:
    """Each key's share of ``unallocated`` under ``policy``, and what stays unshared.

    Exact (unrounded) Decimals; :func:`round_conserving` rounds them once.
    """
    keys = sorted(direct)
    if policy is IdlePolicy.NONE or not keys:
        return dict.fromkeys(keys, Decimal(0)), unallocated
    if policy is IdlePolicy.EVEN:
        each = unallocated / len(keys)
        return dict.fromkeys(keys, each), Decimal(0)
    total = sum(direct.values(), Decimal(0))
    if total == 0:  # nothing to weight by: fall back to even shares
        return share_unallocated(direct, unallocated, IdlePolicy.EVEN)
    return {k: unallocated * direct[k] / total for k in keys}, Decimal(0)


def round_conserving(amounts: Mapping[str, Decimal], total: Decimal) -> dict[str, Decimal]:
    """Round each amount to cents so that they sum to ``total`` rounded to cents.

    Largest remainder: floor everything, then hand the missing cents to the largest fractional
    parts (ties broken by key, so the result is deterministic).
    """
    target = total.quantize(_CENT)
    floors = {k: v.quantize(_CENT, rounding=ROUND_FLOOR) for k, v in amounts.items()}
    missing = int((target - sum(floors.values(), Decimal(0))) / _CENT)
    order = sorted(amounts, key=lambda k: (-(amounts[k] - floors[k]), k))
    if missing < 0:
        order = sorted(amounts, key=lambda k: (amounts[k] - floors[k], k))
    step = _CENT if missing >= 0 else -_CENT
    for k in order[: abs(missing)]:
        floors[k] += step
    return floors


def build_ledger(
    usage: pl.DataFrame,
    capacity: pl.DataFrame | None,
    segments: Sequence[PriceSegment],
    *,
    by: str,
    policy: IdlePolicy,
    start: dt.datetime,
    end: dt.datetime,
    currency: str,
    stranded_gpu_hours: float | None = None,
) -> Ledger:
    """Turn usage rows and capacity states into the ledger (pure: no I/O)."""
    if by not in GROUPINGS:
        raise LedgerError(f"--by {by!r} is not one of {', '.join(GROUPINGS)}")
    prices = {i: s.price for i, s in enumerate(segments)}
    usage = usage.with_row_index("_row").with_columns(pl.col(by).fill_null("").alias("_key"))
    priced, unpriced = _priced_ms(usage, segments, "s", "e", "allocated_gpu_ms", ["_key"])
    direct: dict[str, Decimal] = defaultdict(Decimal)
    for key, seg, ms in priced.iter_rows():
        direct[key] += _hours(ms) * prices[seg]
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
        cap_priced, _ = _priced_ms(capacity, segments, "cs", "ce", "capacity_gpu_ms", ["_key"])
        capacity_cost = sum(
            (_hours(ms) * prices[seg] for _k, seg, ms in cap_priced.iter_rows()), Decimal(0)
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
        capacity_cost=capacity_cost.quantize(_CENT) if capacity_cost is not None else None,
        unshared_cost=rounded["u"],
        total_cost=sum((r.total_cost for r in rows), Decimal(0)),
    )
    return Ledger(start, end, by, policy, currency, tuple(rows), totals)


def compute_ledger(
    wh: Warehouse,
    start: dt.datetime,
    end: dt.datetime,
    *,
    by: str = "tenant",
    idle_policy: str | IdlePolicy = IdlePolicy.WEIGHTED,
    cluster: str = "",
    idle_threshold_ratio: float = 0.05,
    idle_min_duration_s: int = 1800,
    source: str = "rollup",
    sealed: bool = True,
    currency: str = "USD",
) -> Ledger:
    """The ledger of [start, end), grouped ``by`` one of :data:`GROUPINGS` (``source`` and
    ``sealed`` as for :func:`usage_frame`)."""
    if end <= start:
        raise LedgerError(
            f"the window is empty: --to {end:%Y-%m-%d} must be after --from {start:%Y-%m-%d}"
        )
    if by not in GROUPINGS:
        raise LedgerError(f"--by {by!r} is not one of {', '.join(GROUPINGS)}")
    try:
        policy = IdlePolicy(idle_policy)
    except ValueError:
        raise LedgerError(
            f"idle policy {idle_policy!r} is not one of weighted, even, none"
        ) from None
    usage = usage_frame(
        wh,
        start,
        end,
        cluster=cluster,
        idle_threshold_ratio=idle_threshold_ratio,
        idle_min_duration_s=idle_min_duration_s,
        source=source,
        sealed=sealed,
    )
    capacity = capacity_frame(wh, start, end, cluster=cluster)
    pairs = set(zip(usage["gpu_model"], usage["pool"], strict=True)) | set(
        zip(capacity["gpu_model"], capacity["pool"], strict=True)
    )
    price_rows = queries.run(wh, "ledger_prices").to_dicts()
    currencies = {r["currency"] for r in price_rows if r["resource"] == "gpu_hour"}
    if len(currencies) > 1:
        raise LedgerError(
            f"the price book mixes currencies {sorted(currencies)}: convert them "
            "to one before computing a ledger"
        )
    segments = price_segments(price_rows, pairs, start, end)
    return build_ledger(
        usage,
        capacity if capacity.height else None,
        segments,
        by=by,
        policy=policy,
        start=start,
        end=end,
        currency=currencies.pop() if currencies else currency,
    )
