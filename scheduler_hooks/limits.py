"""Idle limits, as NVIDIA Run:ai sets them per project: a GPU-idle time limit (a job whose GPUs
all stayed under X% for T is proposed for preemption) and a duration limit for interactive
workloads (one that has run longer is proposed for suspension), each shown with the GPU-hours
it would have saved over the last 30 days (:mod:`warehouse.analytics.limits`).

Proposals go the same way as the quota advice: proposed, approved by a manager, applied.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from decimal import Decimal

import polars as pl

from scheduler_hooks.advice import JobRef, LimitSaving, Recommendation, Standing, cost, price_of
from scheduler_hooks.policy import IdleLimit
from scheduler_hooks.recommend import Context
from warehouse.analytics import limits as history
from warehouse.analytics import quota
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule, idle_now

#: How far back the limits' savings are counted.
SAVINGS_DAYS = 30


def limit_advice(
    wh: Warehouse, stand: list[Standing], ctx: Context, *, idle: IdleRule
) -> tuple[list[LimitSaving], list[Recommendation]]:
    """The savings of every tenant's limits over the last 30 days, and the jobs over a limit
    now (of the tenants that stand in the cluster)."""
    limits = ctx.policy.limits
    tenants = sorted({s.tenant for s in stand})
    lo = ctx.at - dt.timedelta(days=SAVINGS_DAYS)
    savings: list[LimitSaving] = []
    recs: list[Recommendation] = []
    by_limit: dict[IdleLimit, list[str]] = {}
    for t in tenants:
        found = limits.idle_of(t)
        if found is not None:
            by_limit.setdefault(found, []).append(t)
    for limit, group in sorted(by_limit.items(), key=lambda kv: kv[1]):
        saved = history.idle_limit_savings(
            wh,
            ctx.cluster,
            lo,
            ctx.at,
            threshold_ratio=limit.threshold_ratio,
            after_s=limit.after_s,
            tenants=group,
        )
        shown = {"threshold_ratio": limit.threshold_ratio, "after_s": limit.after_s}
        savings += [_saving(t, "idle_limit", shown, saved, ctx) for t in group]
        recs += _idle_now(wh, stand, group, limit, ctx)
    interactive = {t: s for t in tenants if (s := limits.interactive_of(t)) is not None}
    if interactive:
        saved = history.interactive_savings(
            wh, ctx.cluster, lo, ctx.at, limits_s=interactive, types=limits.interactive_types
        )
        savings += [
            _saving(t, "interactive_limit", {"after_s": s}, saved, ctx)
            for t, s in interactive.items()
        ]
        recs += _interactive_now(wh, stand, interactive, ctx)
    return sorted(savings, key=lambda s: (s.tenant, s.kind)), recs


def _saving(
    tenant: str, kind: str, limit: dict[str, float], saved: pl.DataFrame, ctx: Context
) -> LimitSaving:
    rows = saved.filter(pl.col("tenant") == tenant)
    money: Decimal | None = Decimal(0)
    for r in rows.iter_rows(named=True):
        c = cost(r["saved_gpu_hours"], price_of(ctx.prices, r["gpu_model"], r["pool"], ctx.at))
        money = None if c is None or money is None else money + c
    return LimitSaving(
        tenant,
        kind,
        limit,
        float(rows["saved_gpu_hours"].sum()),
        money,
        tuple(zip(rows["job_id"].to_list(), rows["saved_gpu_hours"].to_list(), strict=True)),
    )


def _idle_now(
    wh: Warehouse, stand: list[Standing], tenants: list[str], limit: IdleLimit, ctx: Context
) -> list[Recommendation]:
    """The jobs of ``tenants`` whose every GPU has been under the limit's threshold for its
    duration or more, now."""
    rule = IdleRule(limit.threshold_ratio, int(limit.after_s))
    found = [
        g
        for g in idle_now(wh, ctx.at, idle=rule, prices=ctx.prices, cluster=ctx.cluster)
        if g.tenant in tenants
    ]
    over: dict[str, dt.datetime] = {}
    idle_gpus: dict[str, float] = {}
    hours: dict[str, float] = {}
    for g in found:
        over[g.job_id] = max(over.get(g.job_id, g.since), g.since)
        idle_gpus[g.job_id] = idle_gpus.get(g.job_id, 0.0) + g.fraction
        hours[g.job_id] = hours.get(g.job_id, 0.0) + g.idle_gpu_hours
    what = f"under {limit.threshold_ratio:.0%} for {limit.after_s / 3600:g} h"
    return _per_position(
        wh,
        stand,
        {j: (since, hours[j]) for j, since in over.items()},
        idle_gpus,
        "idle_limit",
        ctx,
        lambda s, names: (
            f"preempt {names} of {s.tenant} in {_where(s)}: every GPU they hold has stayed "
            f"{what} (its idle limit)"
        ),
        lambda _t: {"threshold_ratio": limit.threshold_ratio, "after_s": limit.after_s},
    )


def _interactive_now(
    wh: Warehouse, stand: list[Standing], limits_s: dict[str, float], ctx: Context
) -> list[Recommendation]:
    """The interactive jobs that have run longer than their tenant's limit, now."""
    held = history.holds(wh, ctx.cluster, ctx.at, ctx.at + dt.timedelta(milliseconds=1)).filter(
        pl.col("workload_type").is_in(sorted(ctx.policy.limits.interactive_types))
        & pl.col("tenant").is_in(sorted(limits_s))
    )
    over: dict[str, tuple[dt.datetime, float]] = {}
    gpus: dict[str, float] = {}
    for r in held.iter_rows(named=True):
        ran = (ctx.at - r["start_ts"]).total_seconds()
        if ran >= limits_s[r["tenant"]]:
            over[r["job_id"]] = (r["start_ts"], 0.0)
            gpus[r["job_id"]] = gpus.get(r["job_id"], 0.0) + r["fraction"]
    return _per_position(
        wh,
        stand,
        over,
        gpus,
        "interactive_limit",
        ctx,
        lambda s, names: (
            f"suspend {names} of {s.tenant} in {_where(s)}: interactive, running longer than "
            f"its limit of {limits_s[s.tenant] / 3600:g} h"
        ),
        lambda t: {"after_s": limits_s[t]},
    )


def _where(s: Standing) -> str:
    p = s.position
    return f"pool {p.pool}" + (f" ({p.gpu_model})" if p.gpu_model else "")


def _per_position(
    wh: Warehouse,
    stand: list[Standing],
    jobs: dict[str, tuple[dt.datetime, float]],
    gpus: dict[str, float],
    kind: str,
    ctx: Context,
    say: Callable[[Standing, str], str],
    limit_of: Callable[[str], dict[str, float]],
) -> list[Recommendation]:
    """One recommendation per standing holding some of ``jobs`` (each wholly covered by
    ``gpus``: a job with a GPU that is not over the limit is left alone)."""
    names = quota.job_details(wh, ctx.cluster, jobs)
    out = []
    for s in stand:
        held = dict(s.position.holders)
        refs = tuple(
            JobRef(
                j, names.get(j, {}).get("name", ""), names.get(j, {}).get("namespace", ""),
                held[j], since, hours,
            )
            for j, (since, hours) in sorted(jobs.items())
            if j in held and gpus.get(j, 0.0) + 1e-6 >= held[j]
        )  # fmt: skip
        if not refs:
            continue
        n = sum(r.gpus for r in refs)
        hours, money = ctx.recovers(n, s.position.pool, s.position.gpu_model)
        ids = [r.job_id for r in refs]
        out.append(
            Recommendation(
                kind,
                ctx.cluster,
                s.position.pool,
                s.position.gpu_model,
                s.tenant,
                "",
                amount=n,
                gpus=n,
                reason=say(s, ", ".join(ids)),
                numbers={"limit": limit_of(s.tenant), "jobs": len(refs)},
                change={"preempt": ids},
                jobs=refs,
                candidates=_all(jobs),
                recovers_gpu_hours=hours,
                recovers_cost=money,
                currency=ctx.prices.currency,
            )
        )
    return out


def _all(jobs: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(jobs))
