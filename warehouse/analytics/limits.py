"""What per-tenant limits would have saved over a past window, job by job: Run:ai's GPU-idle
limit (a job whose GPU stayed under a utilisation threshold for a duration is preempted) and
its duration limit for interactive workloads (stopped once they have run that long).

A limit saves the GPU-hours a job would no longer have held once stopped. Counted here, on
the safe side: for the idle limit, the rest of each idle run past the limit (the job might have
become busy again later; that time is not counted as saved); for the duration limit, the time
each interactive hold ran past the limit. Both are clipped to the window and weighted by the
share of the GPU held. Runs of low minutes are those of :mod:`warehouse.analytics.idle` (the
ledger's definition of a low minute), cut to each hold and to the window.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection

import polars as pl

from warehouse import queries
from warehouse.analytics.idle import merge_runs
from warehouse.client import Warehouse

_SAVED_SCHEMA = {
    "tenant": pl.String,
    "job_id": pl.String,
    "pool": pl.String,
    "gpu_model": pl.String,
    "saved_gpu_hours": pl.Float64,
}
_GPU = ("gpu_uuid", "mig_instance")


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def holds(wh: Warehouse, cluster: str, lo: dt.datetime, hi: dt.datetime) -> pl.DataFrame:
    """The allocations of ``cluster`` overlapping [lo, hi) (``sql/advice_holds.sql``)."""
    return queries.run(wh, "advice_holds", cluster=cluster, lo=lo, hi=hi)


def idle_limit_savings(
    wh: Warehouse,
    cluster: str,
    lo: dt.datetime,
    hi: dt.datetime,
    *,
    threshold_ratio: float,
    after_s: float,
    tenants: Collection[str],
) -> pl.DataFrame:
    """Per job of ``tenants`` (exact "org/project" keys): the GPU-hours an idle limit (under
    ``threshold_ratio`` for ``after_s``) would have saved in [lo, hi).

    Columns: tenant, job_id, pool, gpu_model, saved_gpu_hours (jobs that would have saved
    nothing left out).
    """
    held = holds(wh, cluster, lo, hi).filter(pl.col("tenant").is_in(sorted(tenants)))
    if not held.height:
        return pl.DataFrame(schema=_SAVED_SCHEMA)
    pieces = queries.run(
        wh, "advice_low_pieces", cluster=cluster, lo=lo, hi=hi, threshold=float(threshold_ratio)
    )
    runs = merge_runs(pieces, _GPU)
    lo_ms, hi_ms = _ms(lo), _ms(hi)
    start = pl.col("start_ts").dt.epoch("ms")
    end = pl.col("end_ts").dt.epoch("ms").fill_null(hi_ms)
    cut = (
        held.join(runs, on=list(_GPU))
        .with_columns(
            pl.max_horizontal(pl.col("start_ms"), start, pl.lit(lo_ms)).alias("rs"),
            pl.min_horizontal(pl.col("end_ms"), end, pl.lit(hi_ms)).alias("re"),
        )
        .with_columns(((pl.col("re") - pl.col("rs")) / 1000 - after_s).alias("past_s"))
        .filter(pl.col("past_s") > 0)
    )
    return _per_job(cut.with_columns(saved_gpu_hours=pl.col("past_s") * pl.col("fraction") / 3600))


def interactive_savings(
    wh: Warehouse,
    cluster: str,
    lo: dt.datetime,
    hi: dt.datetime,
    *,
    limits_s: dict[str, float],
    types: Collection[str],
) -> pl.DataFrame:
    """Per interactive job (``types`` of workload) of the tenants in ``limits_s`` (tenant →
    its duration limit): the GPU-hours held in [lo, hi) after the job had run its limit.

    Columns: tenant, job_id, pool, gpu_model, saved_gpu_hours.
    """
    held = holds(wh, cluster, lo, hi).filter(
        pl.col("workload_type").is_in(sorted(types)) & pl.col("tenant").is_in(sorted(limits_s))
    )
    if not held.height:
        return pl.DataFrame(schema=_SAVED_SCHEMA)
    limit = pl.col("tenant").replace_strict(limits_s, return_dtype=pl.Float64)
    start = pl.col("start_ts").dt.epoch("ms")
    end = pl.col("end_ts").dt.epoch("ms").fill_null(_ms(hi))
    over = held.with_columns(
        pl.max_horizontal(start + (limit * 1000).cast(pl.Int64), pl.lit(_ms(lo))).alias("from"),
        pl.min_horizontal(end, pl.lit(_ms(hi))).alias("to"),
    ).with_columns(
        ((pl.col("to") - pl.col("from")) / 3_600_000 * pl.col("fraction")).alias("saved_gpu_hours")
    )
    return _per_job(over.filter(pl.col("saved_gpu_hours") > 0))


def _per_job(rows: pl.DataFrame) -> pl.DataFrame:
    """``saved_gpu_hours`` summed per tenant, job, pool and model, largest first."""
    return (
        rows.group_by("tenant", "job_id", "pool", "gpu_model")
        .agg(pl.col("saved_gpu_hours").sum())
        .sort(["saved_gpu_hours", "job_id"], descending=[True, False])
        .cast(_SAVED_SCHEMA)  # type: ignore[arg-type]
    )
