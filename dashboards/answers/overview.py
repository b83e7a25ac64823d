"""The overview as the viewer may see it: GPUs allocated, used and idle now and over the range
(and, for those who see the whole cluster, its capacity), cost this month against the same
days of the month before, and the inventory now.

A tenant viewer gets its own figures alone: its allocated, used and idle GPUs, its cost —
never the cluster's capacity, inventory or other tenants' figures.
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
from warehouse.ledger import IdleReport


@dataclasses.dataclass(frozen=True)
class Now:
    """GPUs at this instant: capacity (None for a tenant viewer), held, used and idle."""

    capacity_gpus: float | None
    healthy_gpus: float | None
    allocated_gpus: float
    used_gpus: float | None  # None: no utilisation sample of the held GPUs lately
    idle_gpus: float
    idle_cost: Decimal


@dataclasses.dataclass(frozen=True)
class Overview:
    scope: str | None
    at: dt.datetime
    now: Now
    idle: IdleReport  # the range's days (allocated, used, idle) and the GPUs idle now
    cost: CostToDate
    hourly: pl.DataFrame | None  # ts, capacity_gpus, allocated_gpus, used_gpus; None: tenant
    inventory: pl.DataFrame | None  # gpu_model, health, gpus, capacity_gpus; None: tenant


def _month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def cost_to_date(filters: Filters, viewer: Viewer) -> CostToDate:
    """The ledger's cost from the 1st of this month to today, and of the same days of the
    month before (cut at its last day), as ``viewer`` sees them."""
    today = context.get().ledger_now().date()
    first = _month_start(today)
    before = _month_start(first - dt.timedelta(days=1))
    same_last = min(before + (today - first), first - dt.timedelta(days=1))
    mtd = ledger_answers.shown(dataclasses.replace(filters, first=first, last=today), viewer)
    prev = ledger_answers.shown(dataclasses.replace(filters, first=before, last=same_last), viewer)
    return CostToDate(mtd.totals.total_cost, prev.totals.total_cost, mtd.currency)


def _now(filters: Filters, viewer: Viewer, report: IdleReport) -> Now:
    ctx = context.get()
    scope = viewer.scope(filters.tenant)
    held = open_holds(ctx.wh, ctx.ledger_now(), cluster=cluster_of(filters), tenant=scope or "")
    for column in ("pool", "gpu_model"):
        if getattr(filters, column):
            held = held.filter(pl.col(column) == getattr(filters, column))
    measured = held.filter(pl.col("util_mean").is_not_null())
    used = float((measured["fraction"] * measured["util_mean"]).sum()) if measured.height else None
    capacity = healthy = None
    if scope is None:
        inventory = _inventory(filters)
        capacity = float(inventory["capacity_gpus"].sum())
        healthy = float(inventory.filter(pl.col("health") == "healthy")["capacity_gpus"].sum())
    return Now(
        capacity_gpus=capacity,
        healthy_gpus=healthy,
        allocated_gpus=float(held["fraction"].sum()),
        used_gpus=used,
        idle_gpus=sum(r.fraction for r in report.now),
        idle_cost=sum((r.cost or Decimal(0) for r in report.now), Decimal(0)),
    )


def _inventory(filters: Filters) -> pl.DataFrame:
    return fleet.fleet_summary(
        context.get().wh, cluster_of(filters), pool=filters.pool, gpu_model=filters.gpu_model
    )


def overview(filters: Filters, viewer: Viewer) -> Overview:
    """Everything the overview shows but its findings, for ``viewer``."""
    ctx = context.get()
    scope = viewer.scope(filters.tenant)
    report = idle_answers.report(filters, viewer)
    hourly = inventory = None
    if scope is None:
        window = filters.window
        hourly = fleet.fleet_hourly(
            ctx.wh,
            cluster_of(filters),
            window.start,
            window.until(ctx.ledger_now()),
            pool=filters.pool,
            gpu_model=filters.gpu_model,
        )
        inventory = _inventory(filters)
    return Overview(
        scope=scope,
        at=ctx.ledger_now(),
        now=_now(filters, viewer, report),
        idle=report,
        cost=cost_to_date(filters, viewer),
        hourly=hourly,
        inventory=inventory,
    )
