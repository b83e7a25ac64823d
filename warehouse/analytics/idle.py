"""Idle allocated GPUs as stretches of time: which GPUs sit idle in a job's hands right now,
since when, and the idle runs of one GPU — by the ledger's definition of idle.

The ledger (``sql/ledger_usage.sql``) counts allocated time as idle where the GPU's minutes
were low (a utilisation sample, every sample under the threshold) in a run of at least the
minimum duration, the run cut where the job starts or ends. The ledger sums those runs into
GPU-hours; these functions find the runs themselves, from the same minutes (``gpu_minutes_1h``),
so that a page can say "idle since 09:12, for 3 h 05 min".

The idle threshold and minimum duration are parameters (the settings' ``ledger.idle_*``); the
ledger's door (:mod:`warehouse.ledger.idle`) prices what these return.
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from warehouse.client import Warehouse
from warehouse.queries import run

#: How recent a GPU's latest minute must be for its idle run to count as "now": a GPU whose
#: samples stopped is not known to be idle, only not known.
FRESH_S = 900
#: The run columns a GPU is keyed by.
GPU_KEYS = ("cluster", "gpu_uuid", "mig_instance")

_RUNS_SCHEMA = {"start_ms": pl.Int64, "end_ms": pl.Int64}


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def _time(column: str) -> pl.Expr:
    return pl.from_epoch(pl.col(column), time_unit="ms").dt.replace_time_zone("UTC")


def merge_runs(pieces: pl.DataFrame, keys: tuple[str, ...]) -> pl.DataFrame:
    """Runs of low time per ``keys``: the pieces (a list column of (start_ms, end_ms) per
    row) joined where one ends as the next starts. Columns: ``keys``, start_ms, end_ms."""
    flat = (
        pieces.select(*keys, "pieces")
        .explode("pieces")
        .drop_nulls("pieces")
        .unnest("pieces")
        .sort([*keys, "start_ms"])
    )
    if not flat.height:
        return pl.DataFrame(schema={**pieces.select(keys).schema, **_RUNS_SCHEMA})
    starts_run = (pl.col("start_ms") != pl.col("end_ms").shift(1).over(keys)).fill_null(True)
    return (
        flat.with_columns(starts_run.cum_sum().over(keys).alias("_run"))
        .group_by([*keys, "_run"], maintain_order=True)
        .agg(pl.col("start_ms").min(), pl.col("end_ms").max())
        .drop("_run")
    )


def open_holds(
    wh: Warehouse, at: dt.datetime, *, cluster: str = "", tenant: str = "", util_window_s: int = 600
) -> pl.DataFrame:
    """The allocations open at ``at`` (of ``cluster`` and ``tenant``, '' for all; an org takes
    in its projects) with their GPU's mean utilisation over the last ``util_window_s``
    (``sql/idle_open_holds.sql``). Columns: cluster, pool, node, gpu_uuid, mig_instance,
    gpu_model, job_id, attempt, tenant, fraction, start_ts, util_mean."""
    return run(
        wh, "idle_open_holds", at=at, cluster=cluster, tenant=tenant, util_window_s=util_window_s
    )


def idle_now(
    wh: Warehouse,
    at: dt.datetime,
    *,
    threshold_ratio: float,
    min_duration_s: int,
    cluster: str = "",
    tenant: str = "",
    fresh_s: int = FRESH_S,
) -> pl.DataFrame:
    """Every allocation open at ``at`` whose GPU is idle now: its run of low minutes reaches
    the GPU's latest minute with samples (no older than ``fresh_s`` before ``at``) and, cut
    at the job's start, has lasted ``min_duration_s`` or more.

    Columns: those of :func:`open_holds` less util_mean, plus since (the run's start, or the
    job's when it started idle), until (the latest low minute's end, at most ``at``) and
    idle_s; longest first.
    """
    holds = open_holds(wh, at, cluster=cluster, tenant=tenant).drop("util_mean")
    pieces = run(
        wh,
        "idle_open_pieces",
        at=at,
        cluster=cluster,
        tenant=tenant,
        threshold=float(threshold_ratio),
    )
    latest = pieces.group_by(GPU_KEYS).agg(pl.col("last_ms").max())
    last_runs = (
        merge_runs(pieces, GPU_KEYS)
        .sort("start_ms")
        .group_by(GPU_KEYS)
        .agg(pl.col("start_ms").last(), pl.col("end_ms").last())
        .join(latest, on=GPU_KEYS)
        # the run must reach the latest minute: a busy (or unmeasured) minute after it ends it
        .filter(
            (pl.col("end_ms") >= pl.col("last_ms"))
            & (pl.col("last_ms") >= _ms(at) - fresh_s * 1000)
        )
    )
    at_ms = _ms(at)
    found = holds.join(last_runs, on=GPU_KEYS).with_columns(
        pl.max_horizontal(pl.col("start_ms"), pl.col("start_ts").dt.epoch("ms")).alias("_since"),
        pl.min_horizontal(pl.col("last_ms"), pl.lit(at_ms)).alias("_until"),
    )
    return (
        found.with_columns(
            _time("_since").alias("since"),
            _time("_until").alias("until"),
            ((pl.col("_until") - pl.col("_since")) / 1000).alias("idle_s"),
        )
        .filter(pl.col("idle_s") >= min_duration_s)
        .drop("start_ms", "end_ms", "last_ms", "_since", "_until")
        .sort(["idle_s", "cluster", "gpu_uuid", "job_id"], descending=[True, False, False, False])
    )


def gpu_idle_runs(
    wh: Warehouse,
    cluster: str,
    gpu_uuid: str,
    lo: dt.datetime,
    hi: dt.datetime,
    *,
    threshold_ratio: float,
) -> pl.DataFrame:
    """One GPU's runs of low minutes over the hours overlapping [lo, hi), per MIG slice
    ('' for a whole GPU), uncut and unjudged: mig_instance, start_ms, end_ms."""
    return run(
        wh,
        "gpu_low_runs",
        cluster=cluster,
        gpu_uuid=gpu_uuid,
        lo=lo,
        hi=hi,
        threshold=float(threshold_ratio),
    )


def idle_in_holds(
    holds: pl.DataFrame,
    runs: pl.DataFrame,
    *,
    a: dt.datetime,
    b: dt.datetime,
    margin: dt.timedelta,
    min_duration_s: int,
) -> pl.DataFrame:
    """The idle stretches of each hold (a row of ``holds``: mig_instance, start_ts, end_ts
    (NULL: open), fraction, and a ``hold`` number) counted in [a, b), as the ledger counts
    them: each run cut to the hold's interval (judged over [a - margin, b + margin)), kept
    when at least ``min_duration_s`` long, then clipped to [a, b).

    Columns: hold, start (UTC), end (UTC), idle_gpu_hours (the stretch's length x fraction).
    """
    lo_ms, hi_ms, a_ms, b_ms = (_ms(t) for t in (a - margin, b + margin, a, b))
    start, end = pl.col("start_ts").dt.epoch("ms"), pl.col("end_ts").dt.epoch("ms")
    judged = holds.select(
        "hold",
        "mig_instance",
        "fraction",
        pl.max_horizontal(start, pl.lit(lo_ms)).alias("js"),
        pl.min_horizontal(end.fill_null(hi_ms), pl.lit(hi_ms)).alias("je"),
        pl.max_horizontal(start, pl.lit(a_ms)).alias("s"),
        pl.min_horizontal(end.fill_null(b_ms), pl.lit(b_ms)).alias("e"),
    )
    cut = (
        judged.join(runs, on="mig_instance")
        .with_columns(
            pl.max_horizontal("start_ms", "js").alias("rs"),
            pl.min_horizontal("end_ms", "je").alias("re"),
        )
        .filter(pl.col("re") - pl.col("rs") >= min_duration_s * 1000)
        .with_columns(
            pl.max_horizontal("rs", "s").alias("_start"), pl.min_horizontal("re", "e").alias("_end")
        )
        .filter(pl.col("_end") > pl.col("_start"))
    )
    return cut.sort("hold", "_start").select(
        "hold",
        _time("_start").alias("start"),
        _time("_end").alias("end"),
        ((pl.col("_end") - pl.col("_start")) * pl.col("fraction") / 3_600_000).alias(
            "idle_gpu_hours"
        ),
    )
