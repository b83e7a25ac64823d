"""Capacity and fragmentation as the viewer may see them: the inventory, each GPU's hour, the
GPUs that are not healthy, the stranded capacity and the largest job that fits.

``GET /api/v1/fragmentation?cluster=&at=&window_days=&scope=&tenant=`` answers the same
document as ``gpuledger fragmentation --format json`` (:meth:`FragmentationReport.to_dict`).
``at`` defaults to the end of the range asked (``to``, the last day, included) or now,
whichever is earlier: with no range given, now, as the CLI.

Capacity, inventory and fragmentation are facts of the cluster: every viewer sees them. What
names a tenant or a job is limited to the viewer's own (see :mod:`warehouse.analytics.capacity`
and :meth:`FragmentationReport.for_tenant`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import polars as pl

from dashboards import context
from dashboards.answers.instant import at_of, one_cluster
from dashboards.context import Viewer
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.analytics import capacity
from warehouse.analytics.fragmentation import (
    DEFAULT_WINDOW,
    SCOPES,
    FragmentationReport,
    fragmentation_at,
    trailing_days,
)
from warehouse.analytics.stranded import stranded_over
from warehouse.analytics.tenancy import in_tenant
from warehouse.ledger.tail import kept_made, kept_moment, kept_stranded
from warehouse.times import instant

_EXAMPLE = "2026-11-30T12:00"


def fragmentation(
    filters: Filters, viewer: Viewer, params: Mapping[str, str] | None = None
) -> FragmentationReport:
    """The cluster's fragmentation at ``at`` (param, else :func:`at_of`) for ``viewer``."""
    params = params or {}
    at = instant(params["at"], "at", _EXAMPLE) if params.get("at") else at_of(filters)
    text = params.get("window_days") or "7"
    try:
        days = float(text)
    except ValueError:
        raise InputError(f"window_days {text!r} is not a number of days (e.g. 7)") from None
    scope = params.get("scope") or "model"
    if scope not in SCOPES:
        raise InputError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    tenant = viewer.scope(filters.tenant)
    wh, cluster, window = context.get().wh, one_cluster(filters), trailing_days(days, at)
    # the live tail keeps each cluster's report at its instant, with the defaults
    defaults = (window, scope) == (DEFAULT_WINDOW, "model")
    then = kept_moment(wh, at, cluster=cluster) if defaults else None
    if then is not None:
        report = then.fragmentation
    else:
        report = fragmentation_at(wh, cluster, at, window=window, scope=scope)
    return report if tenant is None else report.for_tenant(tenant)


def answer(filters: Filters, viewer: Viewer, params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/fragmentation``: measured for the whole cluster, so a pool or GPU model
    is refused rather than silently ignored."""
    for name in ("pool", "gpu_model"):
        if getattr(filters, name):
            raise InputError(
                f"{name} {getattr(filters, name)!r}: fragmentation is measured for the whole "
                f"cluster; leave {name} out and read the per-node and per-model rows"
            )
    return fragmentation(filters, viewer, params).to_dict()


def inventory(filters: Filters, viewer: Viewer) -> pl.DataFrame:
    """The inventory at :func:`at_of` by pool, model, driver, CUDA version and health (no
    tenant in it, so every viewer sees it whole; the tenant asked is still checked)."""
    viewer.scope(filters.tenant)
    wh, cluster, at = context.get().wh, one_cluster(filters), at_of(filters)
    then = kept_moment(wh, at, cluster=cluster)  # at the live tail's instant: what it kept
    if then is not None:
        return then.inventory.filter(_narrowing(filters))
    return capacity.inventory(wh, cluster, at, pool=filters.pool, gpu_model=filters.gpu_model)


def grid(filters: Filters, viewer: Viewer) -> tuple[dt.datetime, pl.DataFrame]:
    """(the hour's start, each GPU's allocation and utilisation over it) for ``viewer``: the
    last whole hour before :func:`at_of`."""
    tenant = viewer.scope(filters.tenant)
    at, cluster = at_of(filters), one_cluster(filters)
    hour = capacity.grid_hour(at)
    frame = capacity.gpu_grid(
        context.get().wh,
        cluster,
        hour,
        pool=filters.pool,
        gpu_model=filters.gpu_model,
        tenant=tenant,
        rows=grid_rows(cluster, at),
    )
    return hour, frame


def grid_rows(cluster: str, at: dt.datetime) -> pl.DataFrame:
    """The cluster's :func:`~warehouse.analytics.capacity.grid_rows` of the last whole hour
    before ``at``, made once per pass of the live tail as of ``at`` for every viewer and
    filter (and warmed by it), else read."""
    ctx = context.get()
    hour = capacity.grid_hour(at)
    return kept_made(
        ctx.wh,
        at,
        ctx.idle,
        ("capacity grid", cluster, hour),
        lambda: capacity.grid_rows(ctx.wh, cluster, hour),
    )


def unhealthy(filters: Filters, viewer: Viewer) -> pl.DataFrame:
    """The GPUs not healthy at :func:`at_of`, with their Xid (cluster facts: seen whole)."""
    viewer.scope(filters.tenant)
    wh, cluster, at = context.get().wh, one_cluster(filters), at_of(filters)
    then = kept_moment(wh, at, cluster=cluster)
    if then is not None:
        frame = then.unhealthy.filter(_narrowing(filters))
    else:
        frame = capacity.unhealthy(wh, cluster, at, pool=filters.pool, gpu_model=filters.gpu_model)
    xids = [capacity.latest_xid(r) for r in frame.iter_rows(named=True)]
    return frame.with_columns(pl.Series("shown_xid", xids, dtype=pl.Int64))


@dataclasses.dataclass(frozen=True)
class Stranded:
    """Stranded capacity for a page: now (the report), over the range (hourly, per pool and
    model), and attributed to tenants over the range (the viewer's own rows alone)."""

    report: FragmentationReport
    series: pl.DataFrame
    by_tenant: pl.DataFrame


def stranded(filters: Filters, viewer: Viewer) -> Stranded:
    """The stranded capacity of the range and at its end, narrowed to the pool and GPU model
    asked (every row is per pool or model, so narrowing changes no figure)."""
    report = fragmentation(filters, viewer)
    until = at_of(filters)
    start = filters.window.start
    if until > start:
        wh, now = context.get().wh, context.get().ledger_now()
        kept = kept_stranded(wh, report.cluster, start, until, now=now)
        series, tenants = kept or stranded_over(wh, report.cluster, start, until)
    else:  # a range wholly in the future: nothing measured yet
        series, tenants = _no_series(), _no_tenants()
    if report.tenant is not None:
        tenants = tenants.filter(in_tenant(report.tenant))
    keep = _narrowing(filters)
    largest = report.largest_startable
    if filters.gpu_model:
        largest = largest.filter(pl.col("gpu_model") == filters.gpu_model)
    report = dataclasses.replace(
        report,
        per_node=report.per_node.filter(keep),
        per_tenant_stranded=report.per_tenant_stranded.filter(keep),
        largest_startable=largest,
    )
    return Stranded(report, series.filter(keep), tenants.filter(keep))


def _narrowing(filters: Filters) -> pl.Expr:
    keep = pl.lit(True)
    if filters.pool:
        keep = keep & (pl.col("pool") == filters.pool)
    if filters.gpu_model:
        keep = keep & (pl.col("gpu_model") == filters.gpu_model)
    return keep


def _no_series() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "ts": pl.Datetime("ms", "UTC"),
            "pool": pl.String,
            "gpu_model": pl.String,
            "capacity_gpus": pl.Float64,
            "free_gpus": pl.Float64,
            "stranded_gpus": pl.Float64,
            "stranded_gpu_hours": pl.Float64,
        }
    )


def _no_tenants() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "tenant": pl.String,
            "pool": pl.String,
            "gpu_model": pl.String,
            "stranded_gpu_hours": pl.Float64,
        }
    )
