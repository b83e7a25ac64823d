"""One GPU over a time range: what the inventory says of it, its telemetry from the 1-minute
rollup (what a DCGM dashboard draws), which jobs held it and when, and how much of each hold
was idle by the ledger's definition (:mod:`warehouse.analytics.idle`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import polars as pl

from warehouse.analytics.idle import gpu_idle_runs, idle_in_holds
from warehouse.client import Warehouse
from warehouse.queries import run

#: Buckets a range is drawn in: the smallest step that keeps a chart under ~500 points.
_STEPS_S = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 86400)
_POINTS = 500


def identity(wh: Warehouse, gpu_uuid: str, cluster: str = "") -> pl.DataFrame:
    """The GPU's latest inventory rows (one per MIG slice), in ``cluster`` or every cluster
    that names it: cluster, pool, node, gpu_uuid, gpu_index, mig_instance, mig_profile,
    vendor, gpu_model, capacity_fraction, memory_total_bytes, health, health_reason,
    driver_version, cuda_version, ts."""
    return run(wh, "gpu_identity", gpu_uuid=gpu_uuid, cluster=cluster)


def holds(
    wh: Warehouse, cluster: str, gpu_uuid: str, a: dt.datetime, b: dt.datetime, tenant: str = ""
) -> pl.DataFrame:
    """The allocation intervals of the GPU overlapping [a, b), of every tenant ('') or of one
    (an org takes in its projects), oldest first, each numbered (``hold``)."""
    frame = run(wh, "gpu_holds", cluster=cluster, gpu_uuid=gpu_uuid, a=a, b=b, tenant=tenant)
    return frame.with_row_index("hold")


def step_for(start: dt.datetime, end: dt.datetime) -> int:
    """The bucket, in seconds, a chart of [start, end) is drawn in."""
    span = (end - start).total_seconds()
    return next((s for s in _STEPS_S if span / s <= _POINTS), _STEPS_S[-1])


def telemetry(
    wh: Warehouse,
    cluster: str,
    gpu_uuid: str,
    start: dt.datetime,
    end: dt.datetime,
    *,
    within: Sequence[tuple[dt.datetime, dt.datetime]] | None = None,
    step_s: int | None = None,
) -> pl.DataFrame:
    """The GPU's telemetry over [start, end) per bucket (``sql/gpu_telemetry.sql``): bucket,
    t (its first minute read), util_mean, util_max, memory_used_bytes, memory_total_bytes,
    power_watts, temperature_celsius, xid, sm_clock_mhz, tensor_active_ratio (means; null
    where no sample had them), minutes. ``within``: only the minutes wholly inside
    these intervals (what a tenant may see: the time its own jobs held the GPU); empty:
    nothing."""
    if within is not None and not within:
        return run(
            wh,
            "gpu_telemetry",
            cluster=cluster,
            gpu_uuid=gpu_uuid,
            start=start,
            end=start,
            step_s=60,
            within=False,
            starts=[],
            ends=[],
        )
    return run(
        wh,
        "gpu_telemetry",
        cluster=cluster,
        gpu_uuid=gpu_uuid,
        start=start,
        end=end,
        step_s=step_s or step_for(start, end),
        within=within is not None,
        starts=[s for s, _ in within or ()],
        ends=[e for _, e in within or ()],
    )


def idle_runs(
    wh: Warehouse,
    cluster: str,
    gpu_uuid: str,
    *,
    a: dt.datetime,
    b: dt.datetime,
    threshold_ratio: float,
    min_duration_s: int,
) -> pl.DataFrame:
    """The GPU's runs of low minutes that :func:`hold_idle` judges its holds in [a, b) by:
    those over the range and the ledger's usage margin each side of it."""
    margin = _margin(min_duration_s)
    return gpu_idle_runs(
        wh, cluster, gpu_uuid, a - margin, b + margin, threshold_ratio=threshold_ratio
    )


def _margin(min_duration_s: int) -> dt.timedelta:
    return dt.timedelta(seconds=min_duration_s + 60)  # the ledger's usage margin


def hold_idle(
    wh: Warehouse,
    held: pl.DataFrame,
    *,
    a: dt.datetime,
    b: dt.datetime,
    threshold_ratio: float,
    min_duration_s: int,
    runs: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The idle stretches of the GPU's ``held`` intervals (from :func:`holds`) counted in
    [a, b), as the ledger counts them (see :func:`warehouse.analytics.idle.idle_in_holds`):
    hold, start, end, idle_gpu_hours. ``runs``: the GPU's :func:`idle_runs` over the same
    range and rule, when they were read already (beside the holds)."""
    margin = _margin(min_duration_s)
    empty = pl.DataFrame(
        schema={
            "hold": pl.UInt32,
            "start": pl.Datetime("ms", "UTC"),
            "end": pl.Datetime("ms", "UTC"),
            "idle_gpu_hours": pl.Float64,
        }
    )
    if not held.height or b <= a:
        return empty
    if runs is None:
        runs = idle_runs(
            wh,
            held["cluster"][0],
            held["gpu_uuid"][0],
            a=a,
            b=b,
            threshold_ratio=threshold_ratio,
            min_duration_s=min_duration_s,
        )
    if not runs.height:
        return empty
    return idle_in_holds(held, runs, a=a, b=b, margin=margin, min_duration_s=min_duration_s)
