"""The overview as the viewer may see it: GPUs allocated, used and idle now and over the range
(and, for those who see the whole cluster, its capacity), cost this month against the same
days of the month before, and the inventory now.

A tenant viewer gets its own figures alone: its allocated, used and idle GPUs, its cost —
never the cluster's capacity, inventory or other tenants' figures.

Each part is an answer of its own, so that the page asks for them side by side (a callback
each) and shows each as soon as it is ready.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

import polars as pl

from dashboards import context
from dashboards.answers import idle as idle_answers
from dashboards.answers import ledger as ledger_answers
from dashboards.answers.findings import CostToDate
from dashboards.answers.ledger import cluster_of
from dashboards.context import Viewer
from dashboards.filters import Filters
from warehouse.analytics import fleet
from warehouse.analytics.idle import open_holds
from warehouse.ledger import UsageDay, usage_days
from warehouse.ledger.tail import kept_fleet_hourly


@dataclasses.dataclass(frozen=True)
class Now:
    """GPUs at the ledger's instant ``at``: capacity (None for a tenant viewer), held, used and
    idle, and what the idle ones cost so far."""

    at: dt.datetime
    capacity_gpus: float | None
    healthy_gpus: float | None
    allocated_gpus: float
    used_gpus: float | None  # None: no utilisation sample of the held GPUs lately
    idle_gpus: float
    idle_cost: Decimal
    currency: str


@dataclasses.dataclass(frozen=True)
class Range:
    """The range's GPUs: per day as the ledger has them (allocated, used, idle) and, for those
    who see the whole cluster, hour by hour with its capacity."""

    days: tuple[UsageDay, ...]
    hourly: pl.DataFrame | None  # ts, capacity_gpus, allocated_gpus, used_gpus; None: tenant


def _month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def to_date(today: dt.date) -> tuple[tuple[dt.date, dt.date], tuple[dt.date, dt.date]]:
    """(first, last) of this month so far, and of the same days of the month before (cut at
    its last day)."""
    first = _month_start(today)
    before = _month_start(first - dt.timedelta(days=1))
    same_last = min(before + (today - first), first - dt.timedelta(days=1))
    return (first, today), (before, same_last)


def cost_to_date(filters: Filters, viewer: Viewer) -> CostToDate:
    """The ledger's cost from the 1st of this month to today, and of the same days of the
    month before (cut at its last day), as ``viewer`` sees them."""
    (first, today), (before, same_last) = to_date(context.get().ledger_now().date())
    mtd = ledger_answers.shown(dataclasses.replace(filters, first=first, last=today), viewer)
    prev = ledger_answers.shown(dataclasses.replace(filters, first=before, last=same_last), viewer)
    return CostToDate(mtd.totals.total_cost, prev.totals.total_cost, mtd.currency)


def now(filters: Filters, viewer: Viewer) -> Now:
    """The GPUs held, used and idle at the ledger's instant in the viewer's jobs (and the
    cluster's capacity for those who see it); the range plays no part."""
    ctx = context.get()
    at = ctx.ledger_now()
    scope = viewer.scope(filters.tenant)
    held = open_holds(ctx.wh, at, cluster=cluster_of(filters), tenant=scope or "")
    for column in ("pool", "gpu_model"):
        if getattr(filters, column):
            held = held.filter(pl.col(column) == getattr(filters, column))
    measured = held.filter(pl.col("util_mean").is_not_null())
    used = float((measured["fraction"] * measured["util_mean"]).sum()) if measured.height else None
    capacity = healthy = None
    if scope is None:
        fleet_now = _inventory(filters)
        capacity = float(fleet_now["capacity_gpus"].sum())
        healthy = float(fleet_now.filter(pl.col("health") == "healthy")["capacity_gpus"].sum())
    idle = idle_answers.now(filters, viewer)
    return Now(
        at=at,
        capacity_gpus=capacity,
        healthy_gpus=healthy,
        allocated_gpus=float(held["fraction"].sum()),
        used_gpus=used,
        idle_gpus=sum(r.fraction for r in idle),
        idle_cost=sum((r.cost or Decimal(0) for r in idle), Decimal(0)),
        currency=ctx.currency,
    )


def _inventory(filters: Filters) -> pl.DataFrame:
    return fleet.fleet_summary(
        context.get().wh, cluster_of(filters), pool=filters.pool, gpu_model=filters.gpu_model
    )


def inventory(filters: Filters, viewer: Viewer) -> pl.DataFrame | None:
    """The inventory now by model and health; None for a tenant viewer (the cluster's)."""
    if viewer.scope(filters.tenant) is not None:
        return None
    return _inventory(filters)


def over_range(filters: Filters, viewer: Viewer) -> Range:
    """The range's days for ``viewer`` and, for those who see the cluster, its hours."""
    ctx = context.get()
    at, scope, window = ctx.ledger_now(), viewer.scope(filters.tenant), filters.window
    hourly = None
    cluster, until = cluster_of(filters), window.until(at)
    if scope is None and not (cluster or filters.pool or filters.gpu_model):
        hourly = kept_fleet_hourly(ctx.wh, window.start, until, now=at)
    if scope is None and hourly is None:
        hourly = fleet.fleet_hourly(
            ctx.wh, cluster, window.start, until, pool=filters.pool, gpu_model=filters.gpu_model
        )
    days = usage_days(
        ctx.wh,
        window,
        now=at,
        idle=ctx.idle,
        cluster=cluster,
        tenant=scope,
        only=idle_answers.only(filters),
    )
    return Range(days, hourly)
