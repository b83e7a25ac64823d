"""The ledger, finer: cost by several keys at once (org → project → user) and per job.

A ledger row adds up lines (one combination of every grouping's key, see
:data:`warehouse.ledger.compute.LINE_KEYS`), each priced and rounded once. A breakdown by
several keys adds up the same lines, so its cents are the ledger's. A job is finer than a
line: each line's rounded direct cost and share are split between its jobs (by each job's
exact direct cost, largest remainder), so a tenant's jobs add up to its ledger row to the cent.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import polars as pl

from warehouse.client import Warehouse
from warehouse.ledger.compute import (
    LINE_KEYS,
    DecidedLines,
    compute_ledger,
    decided_inputs,
    in_tenant,
)
from warehouse.ledger.pricing import PriceBook, PriceSegment, load_price_book, priced_ms
from warehouse.ledger.result import IdlePolicy, IdleRule, LedgerError, Window


@dataclasses.dataclass(frozen=True)
class Hours:
    """GPU-hours and cost of a group of lines or of a job (the ledger row's fields)."""

    allocated_gpu_hours: float
    used_gpu_hours: float | None  # None: no sample measured these hours
    idle_gpu_hours: float | None
    unmeasured_gpu_hours: float
    direct_cost: Decimal
    shared_cost: Decimal

    @property
    def total_cost(self) -> Decimal:
        return self.direct_cost + self.shared_cost

    @property
    def efficiency(self) -> float | None:
        """Used ÷ allocated GPU-hours (None when nothing was held or nothing measured)."""
        if self.used_gpu_hours is None or not self.allocated_gpu_hours:
            return None
        return self.used_gpu_hours / self.allocated_gpu_hours


@dataclasses.dataclass(frozen=True)
class BreakdownRow:
    """One combination of the breakdown's keys (in the order asked) and its hours and cost."""

    key: tuple[str, ...]
    hours: Hours


@dataclasses.dataclass(frozen=True)
class JobCost:
    """One job's share of the ledger in the window (all its attempts, clipped to the window)."""

    cluster: str
    job_id: str
    tenant: str
    user: str
    gpu_model: str  # several models (rare) are joined with ", "
    pool: str
    attempts: int
    gpus: float  # GPUs held at once by its largest attempt (fractions of shared GPUs)
    start: dt.datetime  # its first hold in the window
    end: dt.datetime  # its last hold's end in the window (the window's cut when running)
    running: bool  # some attempt had not ended when the data was read (its end is the cut)
    hours: Hours


@dataclasses.dataclass(frozen=True)
class Detail:
    """What :func:`cost_breakdown` and :func:`job_costs` answer, with what they were asked."""

    window: Window
    computed_until: dt.datetime
    idle_policy: IdlePolicy
    currency: str
    tenant: str | None
    rows: tuple[Any, ...]  # BreakdownRow or JobCost

    @property
    def total_cost(self) -> Decimal:
        return sum((r.hours.total_cost for r in self.rows), Decimal(0))


def _inputs(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle_policy: str | IdlePolicy,
    idle: IdleRule | None,
    prices: PriceBook | None,
    cluster: str,
) -> tuple[pl.DataFrame, DecidedLines, Any, IdlePolicy, PriceBook]:
    """The usage rows, the lines with their cents, the price segments: as compute_ledger's."""
    policy = IdlePolicy.parse(idle_policy)
    book = prices if prices is not None else load_price_book(wh)
    made = decided_inputs(
        wh, window, now=now, idle=idle or IdleRule(), prices=book, policy=policy, cluster=cluster
    )
    return made.usage, made.lines, made.segments, policy, book


def _keep(tenant: str | None, only: Mapping[str, str] | None) -> pl.Expr:
    keep = in_tenant(tenant) if tenant is not None else pl.lit(True)
    for column, value in (only or {}).items():
        if column not in LINE_KEYS:
            raise LedgerError(f"{column!r} is not one of {', '.join(LINE_KEYS)}")
        keep &= pl.col(column) == value
    return keep


def cost_breakdown(
    wh: Warehouse,
    window: Window,
    *,
    keys: Sequence[str],
    now: dt.datetime,
    idle_policy: str | IdlePolicy = IdlePolicy.WEIGHTED,
    idle: IdleRule | None = None,
    prices: PriceBook | None = None,
    cluster: str = "",
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
) -> Detail:
    """The ledger by every combination of ``keys`` (e.g. ``("tenant", "user")``), with the
    cents the ledger's lines carry (so summing these rows by any one key gives that grouping's
    ledger rows). ``tenant`` and ``only`` keep lines as :func:`compute_ledger` does."""
    unknown = [k for k in keys if k not in LINE_KEYS]
    if not keys or unknown:
        raise LedgerError(f"keys {list(keys)!r}: give some of {', '.join(LINE_KEYS)}")
    # the ledger grouped by every key at once: its rows are these combinations, same cents
    ledger = compute_ledger(
        wh,
        window,
        now=now,
        group_by=",".join(keys),
        idle_policy=idle_policy,
        idle=idle,
        prices=prices,
        cluster=cluster,
        tenant=tenant,
        only=only,
        stranded=False,
    )
    rows = [
        BreakdownRow(
            r.parts or (r.key,),
            Hours(
                r.allocated_gpu_hours,
                r.used_gpu_hours,
                r.idle_gpu_hours,
                r.unmeasured_gpu_hours,
                r.direct_cost,
                r.shared_cost,
            ),
        )
        for r in ledger.rows
    ]
    return Detail(
        window, ledger.computed_until, ledger.idle_policy, ledger.currency, tenant, tuple(rows)
    )


#: The columns of :class:`JobTable`'s frame: a :class:`JobCost`'s fields, its hours as
#: floats (used and idle null where nothing was measured) and its cost in whole cents.
JOB_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "cluster": pl.String,
    "job_id": pl.String,
    "tenant": pl.String,
    "user": pl.String,
    "gpu_model": pl.String,
    "pool": pl.String,
    "attempts": pl.Int64,
    "gpus": pl.Float64,
    "start": pl.Datetime("ms", "UTC"),
    "end": pl.Datetime("ms", "UTC"),
    "running": pl.Boolean,
    "allocated_gpu_hours": pl.Float64,
    "used_gpu_hours": pl.Float64,
    "idle_gpu_hours": pl.Float64,
    "unmeasured_gpu_hours": pl.Float64,
    "direct_cents": pl.Int64,
    "shared_cents": pl.Int64,
}


@dataclasses.dataclass(frozen=True)
class JobTable:
    """What :func:`job_table` answers: every job a row of ``frame`` (:data:`JOB_COLUMNS`),
    newest first, with what it was asked."""

    window: Window
    computed_until: dt.datetime
    idle_policy: IdlePolicy
    currency: str
    tenant: str | None
    frame: pl.DataFrame

    @property
    def total_cost(self) -> Decimal:
        cents = self.frame.select(pl.col("direct_cents", "shared_cents").sum()).row(0)
        return Decimal(sum(c or 0 for c in cents)).scaleb(-2)


def job_table(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle_policy: str | IdlePolicy = IdlePolicy.WEIGHTED,
    idle: IdleRule | None = None,
    prices: PriceBook | None = None,
    cluster: str = "",
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
) -> JobTable:
    """:func:`job_costs`' jobs as one frame, for those who page, sort or filter many jobs
    (a tenant's month can hold tens of thousands) without an object per job."""
    _usage, decided, segments, policy, book = _inputs(
        wh, window, now=now, idle_policy=idle_policy, idle=idle, prices=prices, cluster=cluster
    )
    rows = (
        decided.lines.rows.filter(_keep(tenant, only))
        .with_columns((pl.col("cluster") + "\x00" + pl.col("job_id")).alias("_job"))
        .with_row_index("_row")
    )
    per_job = _per_job(rows).join(_job_cents(rows, decided, segments), on="_job", how="left")
    allocated = pl.col("allocated_gpu_ms").fill_null(0).cast(pl.Float64) / 3.6e6
    measured = pl.col("measured")
    frame = (
        per_job.with_columns(
            allocated.alias("allocated_gpu_hours"),
            pl.when(measured).then(pl.col("used_gpu_hours")).alias("used_gpu_hours"),
            pl.when(measured).then(pl.col("idle_gpu_hours")).alias("idle_gpu_hours"),
            (allocated - pl.col("measured_gpu_hours").fill_null(0.0))
            .clip(lower_bound=0.0)
            .alias("unmeasured_gpu_hours"),
            pl.col("widest").fill_null(0.0).round(6).alias("gpus"),
            pl.col("_direct").fill_null(0).alias("direct_cents"),
            pl.col("_shared").fill_null(0).alias("shared_cents"),
        )
        .select(pl.col(name).cast(kind) for name, kind in JOB_COLUMNS.items())
        .sort("start", "cluster", "job_id", descending=True)
    )
    return JobTable(window, window.until(now), policy, book.currency, tenant, frame)


def job_costs(
    wh: Warehouse,
    window: Window,
    *,
    now: dt.datetime,
    idle_policy: str | IdlePolicy = IdlePolicy.WEIGHTED,
    idle: IdleRule | None = None,
    prices: PriceBook | None = None,
    cluster: str = "",
    tenant: str | None = None,
    only: Mapping[str, str] | None = None,
) -> Detail:
    """Every job that held GPUs in ``window`` (of ``tenant``, with the line keys ``only``),
    with its GPU-hours and its cost: its hours x the price in force (direct) plus its part of
    its lines' share of unallocated capacity. Each line's cents are split between its jobs, so
    the jobs of any ledger row add up to that row to the cent. Newest first."""
    table = job_table(
        wh,
        window,
        now=now,
        idle_policy=idle_policy,
        idle=idle,
        prices=prices,
        cluster=cluster,
        tenant=tenant,
        only=only,
    )
    jobs = tuple(_job(r) for r in table.frame.iter_rows(named=True))
    return Detail(window, table.computed_until, table.idle_policy, table.currency, tenant, jobs)


def _job_cents(
    rows: pl.DataFrame, decided: DecidedLines, segments: Sequence[PriceSegment]
) -> pl.DataFrame:
    """Each job's direct cost and share in whole cents (``_direct``, ``_shared``): every
    line's rounded cents split between its jobs, in one pass over all lines."""
    priced, _unpriced = priced_ms(rows, segments, "s", "e", "allocated_gpu_ms", ["_line", "_job"])
    prices = pl.DataFrame(
        {"seg": range(len(segments)), "_price": [float(s.price) for s in segments]},
        schema={"seg": pl.Int64, "_price": pl.Float64},
    )
    # proportions only: the exact amounts' common factor (ms per hour) cancels
    exact = (
        priced.join(prices, on="seg")
        .group_by("_line", "_job")
        .agg((pl.col("_ms") * pl.col("_price")).sum().alias("_exact"))
    )
    line_type = rows.schema["_line"]
    cents = pl.DataFrame(
        {
            "_line": list(decided.direct),
            "_direct": [int(v.scaleb(2)) for v in decided.direct.values()],
            "_shared": [int(decided.shared[str(k)].scaleb(2)) for k in decided.direct],
        },
        schema={"_line": line_type, "_direct": pl.Int64, "_shared": pl.Int64},
    )
    pairs = (
        rows.group_by("_line", "_job")
        .agg(pl.col("allocated_gpu_ms").sum().cast(pl.Float64).alias("_held"))
        .join(exact, on=["_line", "_job"], how="left")
        .with_columns(pl.col("_exact").fill_null(0.0))
        .join(cents, on="_line")
    )
    direct = _split_cents(pairs, "_direct")
    shared = _split_cents(pairs, "_shared")
    return (
        direct.join(shared, on=["_line", "_job"])
        .group_by("_job")
        .agg(pl.col("_direct", "_shared").sum())
    )


def _split_cents(frame: pl.DataFrame, cents: str) -> pl.DataFrame:
    """Each (line, job) row's whole cents of its line's ``cents``, in proportion to the job's
    exact amount (else to its GPU-ms held, else evenly), by largest remainder with ties broken
    by job key, so a line's jobs add up to the line to the cent."""
    line = pl.col("_line")
    basis = (
        pl.when(pl.col("_exact").abs().sum().over(line) > 0)
        .then(pl.col("_exact"))
        .when(pl.col("_held").sum().over(line) > 0)
        .then(pl.col("_held"))
        .otherwise(1.0)
    )
    share = pl.col(cents).cast(pl.Float64) * basis / basis.sum().over(line)
    step = frame.with_columns(share.alias("_share")).with_columns(
        pl.col("_share").floor().cast(pl.Int64).alias("_floor")
    )
    missing = pl.col(cents) - pl.col("_floor").sum().over(line)
    remainder = pl.col("_share") - pl.col("_floor")
    ranked = step.with_columns(
        missing.alias("_missing"),
        pl.when(missing >= 0).then(-remainder).otherwise(remainder).alias("_order"),
    ).sort("_line", "_order", "_job")
    given = pl.int_range(pl.len()).over(line) < pl.col("_missing").abs()
    return ranked.select(
        "_line",
        "_job",
        (pl.col("_floor") + pl.when(given).then(pl.col("_missing").sign()).otherwise(0)).alias(
            cents
        ),
    )


def _per_job(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per job from its usage rows (one per GPU, attempt and sealed day), in one pass:
    a job's widest attempt is the sum of its GPUs' largest fractions."""
    widest = (
        rows.group_by("_job", "attempt", "gpu_uuid", "mig_instance")
        .agg(pl.col("fraction").max().cast(pl.Float64))
        .group_by("_job", "attempt")
        .agg(pl.col("fraction").sum())
        .group_by("_job")
        .agg(pl.len().alias("attempts"), pl.col("fraction").max().alias("widest"))
    )
    measured = pl.col("used_gpu_hours").is_not_null()
    return (
        rows.group_by("_job", maintain_order=True)
        .agg(
            pl.col("cluster", "job_id", "tenant", "user").first(),
            pl.col("gpu_model").unique().sort().str.join(", "),
            pl.col("pool").unique().sort().str.join(", "),
            pl.col("s").min().alias("start"),
            pl.col("e").max().alias("end"),
            (pl.col("end_event").fill_null("") == "").any().alias("running"),
            pl.col("allocated_gpu_ms").sum(),
            measured.any().alias("measured"),
            pl.col("used_gpu_hours").filter(measured).sum(),
            pl.col("idle_gpu_hours").filter(measured).sum(),
            pl.col("measured_gpu_hours").fill_null(0.0).sum(),
        )
        .join(widest, on="_job")
    )


def _job(row: Mapping[str, Any]) -> JobCost:
    """One job from its row of a :class:`JobTable`."""
    return JobCost(
        cluster=row["cluster"],
        job_id=row["job_id"],
        tenant=row["tenant"],
        user=row["user"],
        gpu_model=row["gpu_model"],
        pool=row["pool"],
        attempts=row["attempts"],
        gpus=row["gpus"],
        start=row["start"],
        end=row["end"],
        running=row["running"],
        hours=Hours(
            row["allocated_gpu_hours"],
            row["used_gpu_hours"],
            row["idle_gpu_hours"],
            row["unmeasured_gpu_hours"],
            Decimal(row["direct_cents"]).scaleb(-2),
            Decimal(row["shared_cents"]).scaleb(-2),
        ),
    )
