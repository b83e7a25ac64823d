"""What the alert rules watch, as of one instant: GPUs that show bad health, whole GPUs that no
job holds while jobs wait, and each tenant's position against its guarantees.

These return the facts only; the rules (``reports.alerts``) judge them against their settings.
Everything is read "as of ``at``", as :mod:`warehouse.analytics.explain` reads it: the inventory
history, the allocations open at ``at``, the job events before it, the quotas in force, the
health counters and the 1-minute rollup.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence

import polars as pl

from warehouse import queries
from warehouse.analytics.explain import (
    EPS,
    PoolPosition,
    Reason,
    pool_position,
    waiting_at,
    waiting_reasons,
)
from warehouse.analytics.fragmentation import free_state
from warehouse.client import Warehouse

#: How recent a GPU's latest health counters must be to say anything about it now.
COUNTERS_FRESH_S = 900
#: How far back a run of bad counters is traced to tell since when it has lasted.
COUNTERS_LOOKBACK_S = 7 * 86_400


def unhealthy_gpus(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    *,
    xids: Sequence[int] | None,
    xid_window_s: int,
    fresh_s: int = COUNTERS_FRESH_S,
    lookback_s: int = COUNTERS_LOOKBACK_S,
) -> pl.DataFrame:
    """The GPUs of ``cluster`` with a sign of bad health at ``at`` (``sql/
    watch_unhealthy_gpus.sql``): inventory unhealthy or down, counters saying lost, ECC
    double-bit errors or a row remap pending or failed, or an Xid among ``xids`` (None: any)
    within the last ``xid_window_s``.

    Columns: gpu_uuid, node, pool, gpu_model, health, health_reason, health_since, gpu_lost,
    ecc_dbe_volatile, remapped_rows_pending, remapped_rows_failure, counters_since, xid,
    xid_first, xid_last, job_ids, tenants.
    """
    return queries.run(
        wh,
        "watch_unhealthy_gpus",
        cluster=cluster,
        at=at,
        fresh_s=fresh_s,
        lookback_s=lookback_s,
        xid_window_s=xid_window_s,
        all_xids=xids is None,
        xids=sorted(xids or ()),
    )


def unallocated_gpus(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """The schedulable GPUs (or MIG slices) of ``cluster`` that no job holds any share of at
    ``at`` (healthy, on a ready node: see :func:`free_state`), with since when nobody has.

    Columns: node, pool, gpu_model, gpu_uuid, mig_instance, capacity, free_since.
    """
    free = free_state(wh, cluster, at).filter(pl.col("held") <= EPS)
    since = queries.run(wh, "watch_free_since", cluster=cluster, at=at)
    return (
        free.join(since, on=["gpu_uuid", "mig_instance"], how="left")
        .select("node", "pool", "gpu_model", "gpu_uuid", "mig_instance", "capacity", "free_since")
        .sort("gpu_model", "node", "gpu_uuid", "mig_instance")
    )


def why_waiting(
    wh: Warehouse, cluster: str, at: dt.datetime, waiting: pl.DataFrame
) -> dict[tuple[str, int], list[Reason]]:
    """The reasons each of ``waiting`` (rows of :func:`waiting_at`) does not start, keyed by
    (job_id, attempt), as ``gpuledger why job`` gives them."""
    if not waiting.height:
        return {}
    quotas = queries.run(wh, "why_quotas_at", cluster=cluster, at=at)
    allocs = queries.run(
        wh, "why_open_allocations", cluster=cluster, at=at, tenant="", util_window_s=3600
    )
    free = free_state(wh, cluster, at)
    return {
        (job["job_id"], job["attempt"]): waiting_reasons(
            job["job_id"], job, quotas, allocs, free, waiting
        )
        for job in waiting.iter_rows(named=True)
    }


@dataclasses.dataclass(frozen=True)
class TenantPosition:
    """A tenant's position in one (pool, GPU model) of a cluster, from :func:`pool_position`."""

    cluster: str
    tenant: str
    position: PoolPosition


def tenant_positions(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    *,
    threshold_ratio: float,
    util_window_s: int,
    waiting: Callable[[], pl.DataFrame] | None = None,
) -> list[TenantPosition]:
    """Every tenant's position at ``at`` in each (pool, model) of ``cluster`` where it holds GPUs
    and some tenant has a quota (a pool nobody has a guarantee in lends nothing, so borrowing
    means nothing there), as ``gpuledger why tenant`` computes it. ``waiting`` gives the
    attempts waiting at ``at`` when the caller has them (default: :func:`waiting_at`)."""
    quotas = queries.run(wh, "why_quotas_at", cluster=cluster, at=at)
    allocs = queries.run(
        wh,
        "why_open_allocations",
        cluster=cluster,
        at=at,
        tenant="",
        util_window_s=util_window_s,
    )
    managed = set(quotas["pool"].to_list())
    held = allocs.filter(pl.col("pool").is_in(sorted(managed)))
    if not held.height:
        return []
    queue = waiting() if waiting is not None else waiting_at(wh, cluster, at)
    keys: set[tuple[str, str, str]] = set()
    for tenant, pool, model in held.select("tenant", "pool", "gpu_model").unique().iter_rows():
        own = quotas.filter((pl.col("tenant") == tenant) & (pl.col("pool") == pool))
        # a pool-wide guarantee (model '') covers every model of the pool, as Kueue's does
        models = set(own["gpu_model"].to_list())
        keys.add((tenant, pool, model if model in models or "" not in models else ""))
    return [
        TenantPosition(
            cluster,
            tenant,
            pool_position(tenant, pool, model, quotas, allocs, queue, threshold_ratio),
        )
        for tenant, pool, model in sorted(keys)
    ]
