"""Tenants as the viewer may see them: the org → project → user tree with GPU-hours, efficiency
and cost (the ledger's cents), each tenant's quota position (guaranteed, held, borrowed), and
one tenant's jobs. Everything is limited to the viewer's tenant, server-side."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import polars as pl

from dashboards import context
from dashboards.answers.instant import at_of
from dashboards.answers.ledger import cluster_of
from dashboards.context import Viewer
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.analytics import explain, fleet
from warehouse.analytics.explain import PoolPosition
from warehouse.analytics.tenancy import owns
from warehouse.ledger import Hours, JobTable, cost_breakdown, job_table, load_price_book
from warehouse.ledger.tail import kept_made, kept_moment

#: The line a tenant or user without a name is shown under (as the ledger shows it).
NONE = "(none)"


def _ledger_args(filters: Filters, scope: str | None) -> dict[str, Any]:
    """What the ledger's breakdowns take, as :func:`dashboards.answers.ledger.ledger` passes it."""
    ctx = context.get()
    only = {k: v for k, v in (("pool", filters.pool), ("gpu_model", filters.gpu_model)) if v}
    return {
        "now": ctx.ledger_now(),
        "idle_policy": filters.idle_policy or ctx.idle_policy,
        "idle": ctx.idle,
        "prices": load_price_book(ctx.wh, ctx.currency),
        "cluster": cluster_of(filters),
        "tenant": scope,
        "only": only or None,
    }


def _hours(h: Hours) -> dict[str, Any]:
    """GPU-hours rounded as the ledger's JSON, money as exact strings."""
    efficiency = h.efficiency
    return {
        "allocated_gpu_hours": round(h.allocated_gpu_hours, 6),
        "used_gpu_hours": None if h.used_gpu_hours is None else round(h.used_gpu_hours, 6),
        "idle_gpu_hours": None if h.idle_gpu_hours is None else round(h.idle_gpu_hours, 6),
        "unmeasured_gpu_hours": round(h.unmeasured_gpu_hours, 6),
        "efficiency": None if efficiency is None else round(efficiency, 4),
        "direct_cost": str(h.direct_cost),
        "shared_cost": str(h.shared_cost),
        "total_cost": str(h.total_cost),
    }


def _sum(parts: list[Hours]) -> Hours:
    used = [p.used_gpu_hours for p in parts if p.used_gpu_hours is not None]
    idle = [p.idle_gpu_hours for p in parts if p.idle_gpu_hours is not None]
    return Hours(
        sum(p.allocated_gpu_hours for p in parts),
        sum(used) if used else None,
        sum(idle) if idle else None,
        sum(p.unmeasured_gpu_hours for p in parts),
        sum((p.direct_cost for p in parts), Decimal(0)),
        sum((p.shared_cost for p in parts), Decimal(0)),
    )


def tree(filters: Filters, viewer: Viewer) -> dict[str, Any]:
    """The org → project → user rows, in tree order: each with its level (0 org, 1 project,
    2 user), the tenant it selects (an org or org/project) and the user, its hours and cost."""
    scope = viewer.scope(filters.tenant)
    detail = cost_breakdown(
        context.get().wh, filters.window, keys=("tenant", "user"), **_ledger_args(filters, scope)
    )
    users: dict[str, dict[str, list[tuple[str, Hours]]]] = {}
    for row in detail.rows:
        tenant, user = row.key
        org, _, project = (tenant or NONE).partition("/")
        users.setdefault(org, {}).setdefault(project, []).append((user or NONE, row.hours))
    rows: list[dict[str, Any]] = []
    for org, projects in sorted(users.items()):
        org_key = org if org != NONE else ""
        everyone = [h for members in projects.values() for _u, h in members]
        rows.append(
            {"level": 0, "name": org, "tenant": org_key, "user": "", **_hours(_sum(everyone))}
        )
        for project, members in sorted(projects.items()):
            tenant = f"{org}/{project}" if project else org_key
            hours = _sum([h for _u, h in members])
            name = project or NONE
            rows.append({"level": 1, "name": name, "tenant": tenant, "user": "", **_hours(hours)})
            for user, h in sorted(members):
                picks = user if user != NONE else ""  # a user with no name picks its tenant
                rows.append(
                    {"level": 2, "name": user, "tenant": tenant, "user": picks, **_hours(h)}
                )
    return {
        **detail.window.to_json(),
        "computed_until": detail.computed_until.isoformat(),
        "idle_policy": detail.idle_policy.value,
        "currency": detail.currency,
        "tenant": scope,
        "rows": rows,
        "total_cost": str(detail.total_cost),
    }


def _within(tenant: str, scope: str | None) -> bool:
    return scope is None or owns(scope, tenant)


def quotas(filters: Filters, viewer: Viewer) -> dict[str, Any]:
    """Each tenant's position per cluster, pool and GPU model at the window's end (or the
    ledger's now, if sooner: the live tail's instant, whose queue it keeps): guaranteed,
    borrow limit, held, borrowed from the cohort, and idle GPUs. Other tenants (the lenders)
    are never named."""
    scope = viewer.scope(filters.tenant)
    ctx = context.get()
    at = at_of(filters)
    clusters = [cluster_of(filters)] if filters.cluster else fleet.known_clusters(ctx.wh)
    rows = []
    for cluster in clusters:
        for tenant, pools in quota_positions(cluster, at).items():
            if not _within(tenant, scope):
                continue
            for p in pools:
                if filters.pool and p.pool != filters.pool:
                    continue
                if filters.gpu_model and p.gpu_model not in (filters.gpu_model, ""):
                    continue
                limit = p.borrow_limit_gpus
                rows.append(
                    {
                        "cluster": cluster,
                        "tenant": tenant,
                        "pool": p.pool,
                        "gpu_model": p.gpu_model or "(any)",
                        "has_quota": p.has_quota,
                        "guaranteed_gpus": p.guaranteed_gpus,
                        "borrow_limit_gpus": limit,
                        "quota_gpus": None if limit is None else p.guaranteed_gpus + limit,
                        "held_gpus": round(p.held_gpus, 4),
                        "borrowed_gpus": round(p.borrowed_gpus, 4),
                        "idle_gpus": round(p.idle_gpus, 4),
                        "idle_borrowed_gpus": round(p.idle_borrowed_gpus, 4),
                        "no_samples_gpus": round(p.no_samples_gpus, 4),
                    }
                )
    return {"at": at.isoformat(), "tenant": scope, "rows": rows}


def quota_positions(cluster: str, at: dt.datetime) -> dict[str, list[PoolPosition]]:
    """Every tenant's :func:`~warehouse.analytics.explain.quota_positions` in ``cluster`` at
    ``at`` under the settings' idle threshold: made once per pass of the live tail as of
    ``at`` for every viewer (and warmed by it), from the queue its moment keeps; else read."""
    ctx = context.get()

    def made() -> dict[str, list[PoolPosition]]:
        then = kept_moment(ctx.wh, at, cluster=cluster)
        return explain.quota_positions(
            ctx.wh,
            cluster,
            at,
            idle_threshold_ratio=ctx.idle.threshold_ratio,
            kept=None
            if then is None
            else (then.queue.quotas, then.queue.allocs, then.queue.waiting),
        )

    return kept_made(ctx.wh, at, ctx.idle, ("quota positions", cluster), made)


def _jobs_of(filters: Filters, viewer: Viewer, of: str, user: str) -> tuple[JobTable, str]:
    """The job table of ``of`` (default: the filters' tenant), of ``user`` alone when given,
    and the tenant it is of; asking outside the viewer's tenant is refused."""
    viewer.scope(filters.tenant)
    scope = viewer.scope(of or filters.tenant)
    if scope is None:
        raise InputError("of: name the tenant (an org or org/project) whose jobs to list")
    only = {"user": user} if user else {}
    args = _ledger_args(filters, scope)
    args["only"] = {**(args["only"] or {}), **only} or None
    return job_table(context.get().wh, filters.window, **args), scope


def jobs(filters: Filters, viewer: Viewer, of: str = "", user: str = "") -> dict[str, Any]:
    """The jobs of ``of`` (an org or org/project; default: the filters' tenant) in the window,
    of ``user`` alone when given, newest first. Asking outside the viewer's tenant, in ``of``
    or in the filters, is refused."""
    table, scope = _jobs_of(filters, viewer, of, user)
    return {
        **table.window.to_json(),
        "computed_until": table.computed_until.isoformat(),
        "idle_policy": table.idle_policy.value,
        "currency": table.currency,
        "tenant": scope,
        "user": user or None,
        "jobs": _job_rows(table.frame),
        "total_cost": str(table.total_cost),
    }


def job_grid(filters: Filters, viewer: Viewer, of: str = "", user: str = "") -> dict[str, Any]:
    """:func:`jobs` as the Tenants page's grid shows them (``frame``: its columns alone, times
    to the minute, money as numbers to the cent, the exact text being the API's; newest
    first), for the grid to ask a block of at a time (:func:`dashboards.grids.block`)."""
    table, scope = _jobs_of(filters, viewer, of, user)
    used, allocated = pl.col("used_gpu_hours"), pl.col("allocated_gpu_hours")
    minute = "%Y-%m-%d %H:%M"
    direct, shared = pl.col("direct_cents"), pl.col("shared_cents")
    rows = table.frame.select(
        "job_id",
        "user",
        "tenant",
        "gpu_model",
        "gpus",
        pl.col("start").dt.strftime(minute),
        pl.col("end").dt.strftime(minute),
        pl.when(pl.col("running"))
        .then(pl.lit("running"))
        .otherwise(pl.lit("ended"))
        .alias("state"),
        pl.col("unmeasured_gpu_hours").round(6),
        allocated.round(6),
        used.round(6),
        pl.col("idle_gpu_hours").round(6),
        pl.when(used.is_not_null() & (allocated != 0))
        .then((used / allocated).round(4))
        .alias("efficiency"),
        # through the exact text: polars' division by 100 can miss the nearest number
        _money(direct).cast(pl.Float64).alias("direct_cost"),
        _money(shared).cast(pl.Float64).alias("shared_cost"),
        _money(direct + shared).cast(pl.Float64).alias("total_cost"),
    )
    return {
        "tenant": scope,
        "user": user or None,
        "currency": table.currency,
        "total_cost": str(table.total_cost),
        "frame": rows,
    }


def _money(cents: pl.Expr) -> pl.Expr:
    """Whole cents as the exact text of the amount ('-0.05'), as the ledger's JSON has it."""
    whole = (cents.abs() // 100).cast(pl.String)
    part = (cents.abs() % 100).cast(pl.String).str.zfill(2)
    return pl.when(cents < 0).then(pl.lit("-")).otherwise(pl.lit("")) + whole + "." + part


def _job_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """The jobs' JSON rows, made by the frame (tens of thousands of jobs, no object each): the
    hours rounded as :func:`_hours` rounds them, times to the second."""
    allocated, used = pl.col("allocated_gpu_hours"), pl.col("used_gpu_hours")
    iso = "%Y-%m-%dT%H:%M:%S+00:00"
    return frame.select(
        "cluster",
        "job_id",
        "tenant",
        "user",
        "gpu_model",
        "pool",
        "gpus",
        "attempts",
        pl.col("start").dt.strftime(iso),
        pl.col("end").dt.strftime(iso),
        "running",
        allocated.round(6),
        used.round(6),
        pl.col("idle_gpu_hours").round(6),
        pl.col("unmeasured_gpu_hours").round(6),
        pl.when(used.is_not_null() & (allocated != 0))
        .then((used / allocated).round(4))
        .alias("efficiency"),
        _money(pl.col("direct_cents")).alias("direct_cost"),
        _money(pl.col("shared_cents")).alias("shared_cost"),
        _money(pl.col("direct_cents") + pl.col("shared_cents")).alias("total_cost"),
    ).to_dicts()


def answer(filters: Filters, viewer: Viewer, _params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/tenants``: the tree and the quota positions."""
    return {**tree(filters, viewer), "quotas": quotas(filters, viewer)}


def jobs_answer(filters: Filters, viewer: Viewer, params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/jobs?of=ORG[/PROJECT]&user=``: one tenant's jobs."""
    return jobs(filters, viewer, params.get("of", ""), params.get("user", ""))
