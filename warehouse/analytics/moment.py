"""The cluster at one instant, in the figures a morning summary needs: the jobs waiting and
for how long, what each tenant holds against its guarantee, the GPUs out of service, and the
free GPUs stranded by fragmentation per model. Each function reads one cluster ('' where it
says so: all)."""

from __future__ import annotations

import datetime as dt

import polars as pl

from warehouse.analytics import explain
from warehouse.analytics.fragmentation import FragmentationReport, fragmentation_at
from warehouse.analytics.idle import open_holds
from warehouse.client import Warehouse
from warehouse.queries import run


def waiting(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """The job attempts waiting at ``at`` (queued at or before it, not yet started or gone),
    with wait_s, how long each has waited. Columns: those of
    :func:`warehouse.analytics.queues.attempts`, plus wait_s."""
    return waited(explain.waiting_at(wh, cluster, at), at)


def waited(rows: pl.DataFrame, at: dt.datetime) -> pl.DataFrame:
    """:func:`~warehouse.analytics.explain.waiting_at`'s attempts with wait_s, how long each
    has waited at ``at``."""
    return rows.with_columns(
        ((pl.lit(at) - pl.col("queued_ts")).dt.total_seconds()).alias("wait_s")
    )


def held_vs_guaranteed(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """Per tenant with a quota or a GPU held at ``at``: held_gpus (the shares its open
    allocations hold) and guaranteed_gpus (its guarantees in force, summed over pools and
    models). Columns: tenant, held_gpus, guaranteed_gpus."""
    quotas = run(wh, "why_quotas_at", cluster=cluster, at=at)
    guaranteed = quotas.group_by("tenant").agg(pl.col("guaranteed_gpus").cast(pl.Float64).sum())
    held = (
        open_holds(wh, at, cluster=cluster)
        .group_by("tenant")
        .agg(pl.col("fraction").sum().alias("held_gpus"))
    )
    return (
        guaranteed.join(held, on="tenant", how="full", coalesce=True)
        .with_columns(pl.col("held_gpus", "guaranteed_gpus").fill_null(0.0))
        .select("tenant", "held_gpus", "guaranteed_gpus")
        .sort("tenant")
    )


def unhealthy(wh: Warehouse, cluster: str = "") -> pl.DataFrame:
    """The GPUs out of service now (``sql/moment_unhealthy.sql``; cluster '' = all):
    cluster, pool, node, gpu_uuid, mig_instance, gpu_model, health, health_reason,
    capacity_fraction, since."""
    return run(wh, "moment_unhealthy", cluster=cluster)


def stranded_by_model(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """Per GPU model, the free GPUs stranded at ``at`` (FGD, see
    :mod:`warehouse.analytics.fragmentation`) and the nodes they sit on: gpu_model,
    stranded_gpus, nodes."""
    return stranded_in(fragmentation_at(wh, cluster, at))


def stranded_in(report: FragmentationReport) -> pl.DataFrame:
    """:func:`stranded_by_model` of a fragmentation report already at hand."""
    return (
        report.per_node.filter(pl.col("fgd_gpus") > 1e-6)
        .group_by("gpu_model")
        .agg(
            pl.col("fgd_gpus").sum().alias("stranded_gpus"),
            pl.col("node").n_unique().alias("nodes"),
        )
        .sort("gpu_model")
    )
