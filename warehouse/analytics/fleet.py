"""The fleet at a glance: which clusters the warehouse holds, GPUs by model and health, and
capacity, allocation and use hour by hour (the dashboard's overview)."""

from __future__ import annotations

import datetime as dt

import polars as pl

from collector.records import TenantRule
from collector.tenancy import TenantMapper
from gpuledger_errors import InputError
from warehouse.client import Warehouse
from warehouse.queries import run


def fleet_hourly(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    *,
    pool: str = "",
    gpu_model: str = "",
) -> pl.DataFrame:
    """Per hour: capacity_gpus, allocated_gpus, used_gpus of ``cluster``, ``pool`` and
    ``gpu_model`` ('' for all; see ``sql/fleet_hourly.sql``)."""
    return run(
        wh, "fleet_hourly", cluster=cluster, pool=pool, gpu_model=gpu_model, start=start, end=end
    )


def fleet_summary(
    wh: Warehouse, cluster: str, *, pool: str = "", gpu_model: str = ""
) -> pl.DataFrame:
    """GPUs in inventory now, by model and health, of ``cluster``, ``pool`` and ``gpu_model``
    ('' for all)."""
    return run(wh, "fleet_summary", cluster=cluster, pool=pool, gpu_model=gpu_model)


def known_clusters(wh: Warehouse) -> list[str]:
    """Every cluster with samples, inventory or job events, sorted."""
    return [str(c) for c in run(wh, "known_clusters")["cluster"].to_list()]


def pick_cluster(wh: Warehouse, given: str, *, name: str = "cluster", one: bool = True) -> str:
    """The cluster asked for (which must exist), or the only one there is; with ``one``
    False, '' (every cluster) when none was asked for. ``name`` is how the asker spells the
    parameter in the error (the CLI's ``--cluster``, the API's ``cluster``)."""
    names = known_clusters(wh)
    if given:
        if given not in names:
            known = ", ".join(names) if names else "none yet"
            raise InputError(f"{name} {given!r} is not in the warehouse (its clusters: {known})")
        return given
    if not one or len(names) == 1:
        return names[0] if len(names) == 1 and one else ""
    if not names:
        raise InputError(
            "the warehouse holds no cluster's data yet: fill it with `gpuledger demo`, "
            "`gpuledger import` or a collector"
        )
    raise InputError(
        f"the warehouse holds several clusters ({', '.join(names)}): pick one with {name}"
    )


def clusters(wh: Warehouse) -> pl.DataFrame:
    """Clusters with samples: cluster, first_hour, last_hour, samples."""
    return run(wh, "clusters")


def choices(wh: Warehouse, cluster: str = "") -> pl.DataFrame:
    """The pools and GPU models in inventory (of ``cluster``, or of all): pool, gpu_model."""
    return run(wh, "fleet_choices", cluster=cluster)


def known_tenants(wh: Warehouse) -> list[str]:
    """Every tenant ("org/project") in the tenants table or on a job, sorted."""
    return [str(t) for t in run(wh, "known_tenants")["tenant"].to_list()]


def tenant_mapper(wh: Warehouse) -> TenantMapper:
    """The tenant rules the warehouse holds, ready to resolve a namespace, label or account."""
    rows = run(wh, "tenant_rules").iter_rows()
    return TenantMapper([TenantRule(str(k), str(p), str(t), int(r)) for k, p, t, r in rows])
