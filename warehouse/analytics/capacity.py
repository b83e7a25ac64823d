"""Capacity: the GPU inventory by pool, model, driver, CUDA version and health; each GPU's
allocation and utilisation over one hour (the capacity page's node x GPU heatmap); and the
GPUs that are not healthy, with their Xid.

Everything is "as of" an instant, read from the inventory history (``gpu_inventory_log``,
``node_inventory_log``: the latest row at or before it), so a past range shows the fleet as it
was then. Utilisation comes from the 1-hour rollup and allocation from the allocation
intervals, so no raw sample is read.

Who sees what: the inventory and the health of GPUs name no tenant, so every viewer sees them
whole. In the grid, a tenant's view (``tenant=``) keeps how much of each GPU was held (that a
GPU was taken is a fact of the cluster) but names only the tenant's own jobs, and shows the
utilisation only of GPUs that no other tenant held during the hour: how hard another tenant
works its GPUs is that tenant's business.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from gpuledger_errors import InputError
from warehouse import queries
from warehouse.analytics.tenancy import owns
from warehouse.client import Warehouse

#: How far back the unhealthy list looks for Xid errors and health counters.
XID_LOOKBACK = dt.timedelta(days=7)
EPS = 1e-6
_HOUR = dt.timedelta(hours=1)


def _utc(ts: dt.datetime, name: str) -> dt.datetime:
    if not isinstance(ts, dt.datetime) or ts.tzinfo is None:
        raise InputError(f"{name} {ts!r} must be a timezone-aware datetime (UTC)")
    return ts.astimezone(dt.UTC)


def inventory(
    wh: Warehouse, cluster: str, at: dt.datetime, *, pool: str = "", gpu_model: str = ""
) -> pl.DataFrame:
    """GPUs in inventory at ``at`` (retired ones left out), counted by pool, gpu_model,
    driver_version, cuda_version and health: nodes, units (GPUs or MIG slices), gpus
    (physical), capacity_gpus (whole-GPU equivalents), on_unready_nodes (units on a node that
    is not ready). ``pool``/``gpu_model`` "" for all."""
    return queries.run(
        wh,
        "capacity_inventory",
        cluster=cluster,
        at=_utc(at, "at"),
        pool=pool,
        gpu_model=gpu_model,
    )


def grid_hour(at: dt.datetime) -> dt.datetime:
    """The start of the last whole hour before ``at`` (the hour the grid shows): the hour
    that ends at ``at`` when ``at`` is on the hour, else the one that ended last."""
    at = _utc(at, "at")
    return at.replace(minute=0, second=0, microsecond=0) - _HOUR


def gpu_grid(
    wh: Warehouse,
    cluster: str,
    hour: dt.datetime,
    *,
    pool: str = "",
    gpu_model: str = "",
    tenant: str | None = None,
    rows: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Each GPU over the hour starting at ``hour`` (on the hour): node, gpu_index, gpu_uuid,
    pool, gpu_model, health, capacity_gpus, held_gpus (mean share held by jobs), util_ratio
    (mean utilisation, None without samples), holders (tenant, job_id, held), and, for the
    view of ``tenant`` (see :func:`scope_grid`), own_held_gpus and hidden. ``rows``: the
    cluster's :func:`grid_rows` of that hour, when they were read already."""
    if rows is None:
        rows = grid_rows(wh, cluster, hour)
    rows = rows.filter(
        (pl.lit(pool == "") | (pl.col("pool") == pool))
        & (pl.lit(gpu_model == "") | (pl.col("gpu_model") == gpu_model))
    )
    return scope_grid(rows, tenant)


def grid_rows(wh: Warehouse, cluster: str, hour: dt.datetime) -> pl.DataFrame:
    """Each GPU of the cluster over the hour starting at ``hour``, as every viewer's and
    filter's :func:`gpu_grid` starts from (no pool, model or tenant's view taken yet)."""
    hour = _utc(hour, "hour")
    if hour != hour.replace(minute=0, second=0, microsecond=0):
        raise InputError(f"hour {hour.isoformat()} must start on the hour (e.g. 10:00)")
    return queries.run(
        wh,
        "capacity_grid",
        cluster=cluster,
        start=hour,
        end=hour + _HOUR,
    )


_GRID_SCHEMA: dict[str, Any] = {
    "node": pl.String,
    "gpu_index": pl.Int64,
    "gpu_uuid": pl.String,
    "pool": pl.String,
    "gpu_model": pl.String,
    "health": pl.String,
    "capacity_gpus": pl.Float64,
    "held_gpus": pl.Float64,
    "own_held_gpus": pl.Float64,
    "util_ratio": pl.Float64,
    "hidden": pl.Boolean,
    "holders": pl.List(pl.Struct({"tenant": pl.String, "job_id": pl.String, "held": pl.Float64})),
}


def scope_grid(frame: pl.DataFrame, tenant: str | None) -> pl.DataFrame:
    """The grid as ``tenant`` may see it (None: everything).

    held_gpus stays whole; holders keeps the tenant's own jobs alone; own_held_gpus is what
    they held (all of held_gpus for None); util_ratio is None where another tenant held part
    of the GPU in the hour, and ``hidden`` says that something was left out there.
    """
    rows = [_scoped(r, tenant) for r in frame.iter_rows(named=True)]
    return pl.DataFrame(rows, schema=_GRID_SCHEMA, orient="row")


def _scoped(row: Mapping[str, Any], tenant: str | None) -> tuple[Any, ...]:
    holders: Sequence[Mapping[str, Any]] = [
        h for h in row["holders"] or () if h["held"] and h["held"] > EPS
    ]
    held = float(row["held_gpus"] or 0.0)
    mine = [h for h in holders if tenant is None or owns(tenant, h["tenant"])]
    others = len(mine) < len(holders)
    return (
        row["node"],
        row["gpu_index"],
        row["gpu_uuid"],
        row["pool"],
        row["gpu_model"],
        row["health"],
        row["capacity_gpus"],
        held,
        held if tenant is None else float(sum(h["held"] for h in mine)),
        None if others else row["util_ratio"],
        others,
        [dict(h) for h in mine],
    )


def unhealthy(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    *,
    pool: str = "",
    gpu_model: str = "",
    lookback: dt.timedelta = XID_LOOKBACK,
) -> pl.DataFrame:
    """The GPUs (or MIG slices) not healthy at ``at``: the inventory says unhealthy or down,
    or the latest health counters say lost off the bus or awaiting a row remap.

    Columns: node, gpu_index, gpu_uuid, mig_instance, pool, gpu_model, health,
    not_healthy_since, reason (the source's text, e.g. "Xid 79: GPU has fallen off the bus"),
    reason_xid (the Xid in it), xid and xid_hour (the highest Xid of the latest hour within
    ``lookback`` whose samples carried one), gpu_lost, ecc_dbe_volatile,
    remapped_rows_uncorrectable, remapped_rows_pending, remapped_rows_failure, counters_ts.
    """
    at = _utc(at, "at")
    return queries.run(
        wh,
        "capacity_unhealthy",
        cluster=cluster,
        at=at,
        since=at - lookback,
        pool=pool,
        gpu_model=gpu_model,
    )


def latest_xid(row: Mapping[str, Any]) -> int | None:
    """The Xid to show for an unhealthy GPU: the one its samples carried last, else the one
    its inventory's reason names."""
    xid = row.get("xid")
    return int(xid) if xid is not None else row.get("reason_xid")
