"""The quota recommendations, as pure functions of the standings: reclaim borrowed GPUs that
sit idle for a tenant whose jobs wait within its guarantee, lower a borrowing limit that lets a
tenant squat, lend a guarantee that goes unused while others wait, and move fair-share weights
with efficiency.

Never below a guarantee: a reclaim preempts only jobs whose GPUs the tenant borrowed, so it
keeps at least its guarantee, and only jobs whose every GPU has been idle ``hold_s``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterator, Mapping
from decimal import Decimal

from scheduler_hooks.advice import (
    EPS,
    JobRef,
    Recommendation,
    Standing,
    cost,
    price_of,
    same_pool,
)
from scheduler_hooks.policy import AdvicePolicy
from scheduler_hooks.priority import TenantPriority
from warehouse.ledger import PriceBook

#: The weight a queue has when nobody set one (Kueue, Volcano and Slurm alike).
DEFAULT_WEIGHT = 1.0


@dataclasses.dataclass(frozen=True)
class Context:
    """What every recommendation needs besides the standings."""

    cluster: str
    at: dt.datetime
    policy: AdvicePolicy
    prices: PriceBook

    def recovers(self, gpus: float, pool: str, model: str) -> tuple[float, Decimal | None]:
        """GPU-hours and cost of ``gpus`` over the horizon, at the price in force now."""
        hours = gpus * self.policy.hysteresis.horizon_h
        return hours, cost(hours, price_of(self.prices, model, pool, self.at))


def _label(s: Standing) -> str:
    p = s.position
    return f"pool {p.pool}" + (f" ({p.gpu_model})" if p.gpu_model else "")


def _hours(since: dt.datetime | None, at: dt.datetime) -> float:
    return 0.0 if since is None else (at - since).total_seconds() / 3600


def reclaims(stand: list[Standing], ctx: Context) -> Iterator[Recommendation]:
    """For each tenant whose jobs wait within its unused guarantee (longest-waiting demand
    first), the borrowers of its pool with idle jobs: preempt those idle longest first, as
    far as they borrowed and as the demand needs."""
    left = {id(s): s.position.borrowed_gpus for s in stand}
    taken: set[str] = set()
    lenders = sorted((s for s in stand if s.demand_gpus > EPS), key=lambda s: -s.demand_gpus)
    for lender in lenders:
        need = lender.demand_gpus
        borrowers = sorted(
            (
                s
                for s in stand
                if s.tenant != lender.tenant
                and same_pool(s.position, lender.position)
                and s.position.borrowed_gpus > EPS
                and s.idle_jobs
            ),
            key=lambda s: (-s.idle_held_gpus, s.tenant),
        )
        for borrower in borrowers:
            picked: list[JobRef] = []
            for job in borrower.idle_jobs:
                if sum(j.gpus for j in picked) >= need - EPS:
                    break
                if job.job_id not in taken and job.gpus <= left[id(borrower)] + EPS:
                    picked.append(job)
                    left[id(borrower)] -= job.gpus
            if not picked:
                continue
            taken.update(j.job_id for j in picked)
            yield _reclaim(borrower, lender, tuple(picked), need, ctx)
            need -= sum(j.gpus for j in picked)
            if need <= EPS:
                break


def _reclaim(
    a: Standing, b: Standing, jobs: tuple[JobRef, ...], need: float, ctx: Context
) -> Recommendation:
    pa, pb = a.position, b.position
    n = sum(j.gpus for j in jobs)
    hours, money = ctx.recovers(n, pa.pool, pa.gpu_model)
    idle_for = min(_hours(j.idle_since, ctx.at) for j in jobs)
    names = ", ".join(j.job_id for j in jobs)
    reason = (
        f"reclaim {n:g} GPUs in {_label(a)} from {a.tenant} for {b.tenant}: {a.tenant} holds "
        f"{pa.held_gpus:g} against a guarantee of {pa.guaranteed_gpus:g} (borrows "
        f"{pa.borrowed_gpus:g}), and jobs {names} have left their {n:g} GPUs idle for "
        f"{idle_for:.1f} h or more; {b.tenant} holds {pb.held_gpus:g} of its guarantee "
        f"{pb.guaranteed_gpus:g} and its jobs have waited {ctx.policy.hysteresis.hold_s / 60:g} "
        f"min or more for {b.waiting_held_gpus:g} GPUs; preempting {names} leaves {a.tenant} "
        f"{pa.held_gpus - n:g}, not below its guarantee"
    )
    return Recommendation(
        "reclaim",
        ctx.cluster,
        pa.pool,
        pa.gpu_model,
        a.tenant,
        b.tenant,
        amount=n,
        gpus=n,
        reason=reason,
        numbers={
            "held_gpus": pa.held_gpus,
            "guaranteed_gpus": pa.guaranteed_gpus,
            "borrowed_gpus": pa.borrowed_gpus,
            "idle_gpus": a.idle_held_gpus,
            "to_held_gpus": pb.held_gpus,
            "to_guaranteed_gpus": pb.guaranteed_gpus,
            "to_waiting_gpus": b.waiting_held_gpus,
            "to_demand_gpus": need,
            "idle_gpu_hours_so_far": sum(j.idle_gpu_hours for j in jobs),
        },
        change={"preempt": [j.job_id for j in jobs]},
        jobs=jobs,
        candidates=tuple(j.job_id for j in a.idle_jobs),
        recovers_gpu_hours=hours,
        recovers_cost=money,
    )


def borrow_limits(stand: list[Standing], ctx: Context) -> Iterator[Recommendation]:
    """A tenant that leaves borrowed GPUs idle: its borrowing limit down to what it borrows
    and uses (never raised; a limit already that low is left alone)."""
    for s in stand:
        p = s.position
        idle_borrowed = min(p.borrowed_gpus, s.idle_held_gpus)
        if idle_borrowed < 1 - EPS:
            continue  # quotas are whole GPUs: nothing to lower by
        target = float(math.ceil(p.borrowed_gpus - idle_borrowed - EPS))
        now = p.borrow_limit_gpus
        if now is not None and now <= target + EPS:
            continue
        lowered = (p.borrowed_gpus if now is None else now) - target
        hours, money = ctx.recovers(idle_borrowed, p.pool, p.gpu_model)
        was = "no limit" if now is None else f"{now:g}"
        yield Recommendation(
            "lower_borrow_limit",
            ctx.cluster,
            p.pool,
            p.gpu_model,
            s.tenant,
            "",
            amount=target,
            gpus=lowered,
            reason=(
                f"lower {s.tenant}'s borrowing limit in {_label(s)} from {was} to {target:g}: it "
                f"borrows {p.borrowed_gpus:g} GPUs above its guarantee of {p.guaranteed_gpus:g}, "
                f"{idle_borrowed:g} of them idle for "
                f"{ctx.policy.hysteresis.hold_s / 60:g} min or more"
            ),
            numbers={
                "held_gpus": p.held_gpus,
                "guaranteed_gpus": p.guaranteed_gpus,
                "borrowed_gpus": p.borrowed_gpus,
                "idle_borrowed_gpus": idle_borrowed,
            },
            change={"field": "borrow_limit_gpus", "from": now, "to": target},
            candidates=tuple(j.job_id for j in s.idle_jobs),
            recovers_gpu_hours=hours,
            recovers_cost=money,
            currency=ctx.prices.currency,
        )


def lending(stand: list[Standing], ctx: Context) -> Iterator[Recommendation]:
    """A tenant whose unused guarantee its lending limit keeps back while other tenants' jobs
    of the pool wait (and none of its own do): the limit up to what they wait for."""
    for s in stand:
        p = s.position
        if p.lend_limit_gpus is None or s.waiting_held_gpus > EPS:
            continue
        others = sum(
            o.waiting_held_gpus for o in stand if o.tenant != s.tenant and same_pool(o.position, p)
        )
        target = float(math.floor(min(p.unused_gpus, p.lend_limit_gpus + others) + EPS))
        if target <= p.lend_limit_gpus + EPS:
            continue
        lent = target - p.lend_limit_gpus
        hours, money = ctx.recovers(lent, p.pool, p.gpu_model)
        yield Recommendation(
            "lend_guarantee",
            ctx.cluster,
            p.pool,
            p.gpu_model,
            s.tenant,
            "",
            amount=target,
            gpus=lent,
            reason=(
                f"let {s.tenant} lend {lent:g} more GPUs in {_label(s)} (lending limit "
                f"{p.lend_limit_gpus:g} to {target:g}): it holds {p.held_gpus:g} of its "
                f"guarantee of {p.guaranteed_gpus:g}, so {p.unused_gpus:g} go unused with no job "
                f"of its own waiting, while other tenants' jobs wait for {others:g}"
            ),
            numbers={
                "held_gpus": p.held_gpus,
                "guaranteed_gpus": p.guaranteed_gpus,
                "unused_gpus": p.unused_gpus,
                "others_waiting_gpus": others,
            },
            change={"field": "lend_limit_gpus", "from": p.lend_limit_gpus, "to": target},
            recovers_gpu_hours=hours,
            recovers_cost=money,
            currency=ctx.prices.currency,
        )


def weights(
    priorities: Mapping[str, TenantPriority], current: Mapping[str, float], ctx: Context
) -> Iterator[Recommendation]:
    """Each tenant's fair-share weight to its priority class's, where that differs from the
    weight it has (unknown: the schedulers' default, 1)."""
    policy = ctx.policy.priority
    for tenant, p in sorted(priorities.items()):
        if p.priority_class is None or p.score is None:
            continue
        target = policy.weights[p.priority_class]
        now = current.get(tenant, DEFAULT_WEIGHT)
        if abs(target - now) < EPS:
            continue
        band = _band(policy.classes, p.priority_class)
        yield Recommendation(
            "fair_share_weight",
            ctx.cluster,
            "",
            "",
            tenant,
            "",
            amount=target,
            gpus=0.0,
            reason=(
                f"{'raise' if target > now else 'lower'} {tenant}'s fair-share weight from "
                f"{now:g} to {target:g}: it used {p.score:.0%} of the {p.measured_gpu_hours:.1f} "
                f"measured GPU-hours it held over the last {policy.window_days:g} days, priority "
                f"class {p.priority_class} (efficiency {band})"
            ),
            numbers={
                "score": p.score,
                "used_gpu_hours": p.used_gpu_hours,
                "allocated_gpu_hours": p.allocated_gpu_hours,
                "priority_class": p.priority_class,
            },
            change={"field": "fair_share_weight", "from": now, "to": target},
        )


def _band(classes: tuple[tuple[float, str], ...], name: str) -> str:
    """The efficiencies a class covers: "30% to under 60%", "60% or more"."""
    i = next(i for i, (_, c) in enumerate(classes) if c == name)
    floor = classes[i][0]
    return f"{floor:.0%} or more" if i == 0 else f"{floor:.0%} to under {classes[i - 1][0]:.0%}"
