"""Quota-reclaim advice: where each tenant stands in each pool and GPU model of a cluster now,
and what the scheduler should change, each recommendation with its reason in numbers and the
GPU-hours and cost it would recover.

:func:`build_advice` reads the warehouse (positions against quotas, the GPUs idle in jobs'
hands by the ledger's definition, efficiency over the trailing window, the limits' savings
over the last 30 days) and hands the facts to pure functions
(:mod:`scheduler_hooks.recommend`, :mod:`scheduler_hooks.limits`) that decide. Nothing is
written here: proposing, approving and applying advice is :mod:`scheduler_hooks.proposals`.

A condition counts only once it has held ``hold_s`` (GPUs idle that long, jobs waiting that
long), so a blip neither proposes nor withdraws anything; recovered GPU-hours are counted over
the next ``horizon_h`` hours at the price in force now.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from scheduler_hooks.policy import AdvicePolicy
from scheduler_hooks.priority import TenantPriority
from warehouse.analytics import quota
from warehouse.analytics.alerts import ANOTHER_TENANT
from warehouse.analytics.tenancy import owns
from warehouse.ledger import IdleNow, PriceBook

EPS = 1e-6
CENT = Decimal("0.01")
#: The kinds of recommendation, in the order a report lists them.
KINDS = (
    "reclaim",
    "lower_borrow_limit",
    "lend_guarantee",
    "fair_share_weight",
    "idle_limit",
    "interactive_limit",
)


@dataclasses.dataclass(frozen=True)
class JobRef:
    """A job named by advice: what the scheduler calls it, what it holds, since when idle."""

    job_id: str
    name: str
    namespace: str
    gpus: float
    idle_since: dt.datetime | None = None
    idle_gpu_hours: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class Standing:
    """A tenant's position in one (pool, model) now, with its idle GPUs and waiting demand.

    ``idle_jobs``: its jobs whose every GPU here has been idle for ``hold_s`` or more, idle
    longest first; ``waiting_held_gpus``: what its jobs waiting ``hold_s`` or more ask for;
    ``waiting_elsewhere_gpus``: what the other tenants' jobs of the pool wait for within their
    own unused guarantees (the demand a reclaim from this tenant would serve).
    """

    position: quota.Position
    idle_gpus: float
    idle_held_gpus: float
    idle_since: dt.datetime | None
    idle_jobs: tuple[JobRef, ...]
    waiting_held_gpus: float
    waiting_elsewhere_gpus: float = 0.0

    @property
    def tenant(self) -> str:
        return self.position.tenant

    @property
    def demand_gpus(self) -> float:
        """Its long-waiting demand that its own unused guarantee covers."""
        return min(self.position.unused_gpus, self.waiting_held_gpus)

    def to_json(self) -> dict[str, Any]:
        return _plain(
            {
                **self.position.facts(),
                "idle_gpus": self.idle_gpus,
                "idle_held_gpus": self.idle_held_gpus,
                "idle_since": self.idle_since,
                "idle_jobs": [j.to_json() for j in self.idle_jobs],
                "waiting_held_gpus": self.waiting_held_gpus,
                "waiting_elsewhere_gpus": self.waiting_elsewhere_gpus,
            }
        )


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """One change for the scheduler.

    ``amount`` is what the advice's stability compares between runs (the GPUs reclaimed, the
    new limit, the new weight); ``gpus`` the GPUs it moves (0 for a weight); ``change`` what
    to set (``{"field": ..., "from": ..., "to": ...}``) or whom to preempt
    (``{"preempt": [job ids]}``); ``candidates`` every job it could have named, so that
    advice naming jobs still among them is not re-proposed.
    """

    kind: str
    cluster: str
    pool: str
    gpu_model: str
    from_tenant: str
    to_tenant: str
    amount: float
    gpus: float
    reason: str
    numbers: Mapping[str, Any]
    change: Mapping[str, Any]
    jobs: tuple[JobRef, ...] = ()
    candidates: tuple[str, ...] = ()
    recovers_gpu_hours: float = 0.0
    recovers_cost: Decimal | None = None
    currency: str = ""

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        """What makes two runs' advice the same advice."""
        return (
            self.kind,
            self.cluster,
            self.pool,
            self.gpu_model,
            self.from_tenant,
            self.to_tenant,
        )

    def to_json(self) -> dict[str, Any]:
        doc = _plain(dataclasses.asdict(self) | {"jobs": [j.to_json() for j in self.jobs]})
        doc["recovers_cost"] = None if self.recovers_cost is None else str(self.recovers_cost)
        return doc


@dataclasses.dataclass(frozen=True)
class LimitSaving:
    """What one tenant's limit would have saved over the last 30 days."""

    tenant: str
    kind: str  # idle_limit | interactive_limit
    limit: Mapping[str, float]
    saved_gpu_hours: float
    saved_cost: Decimal | None
    jobs: tuple[tuple[str, float], ...]  # (job, GPU-hours saved), most first

    def to_json(self) -> dict[str, Any]:
        doc = _plain(dataclasses.asdict(self))
        doc["saved_cost"] = None if self.saved_cost is None else str(self.saved_cost)
        doc["jobs"] = [{"job_id": j, "saved_gpu_hours": round(h, 4)} for j, h in self.jobs]
        return doc


@dataclasses.dataclass(frozen=True)
class AdviceReport:
    """A cluster's standings, priorities, limits and recommendations at ``at``."""

    cluster: str
    at: dt.datetime
    currency: str
    policy: AdvicePolicy
    standings: tuple[Standing, ...]
    priorities: Mapping[str, TenantPriority]
    savings: tuple[LimitSaving, ...]
    recommendations: tuple[Recommendation, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "at": self.at.isoformat(),
            "currency": self.currency,
            "hold_s": self.policy.hysteresis.hold_s,
            "horizon_h": self.policy.hysteresis.horizon_h,
            "priority_window_days": self.policy.priority.window_days,
            "standings": [s.to_json() for s in self.standings],
            "priorities": [p.to_json() for _, p in sorted(self.priorities.items())],
            "limits": [s.to_json() for s in self.savings],
            "recommendations": [r.to_json() for r in self.recommendations],
        }

    def seen_by(self, tenant: str | None) -> AdviceReport:
        """The report as ``tenant`` (an org or org/project; None: everyone) may see it: its
        own standings, priorities and limits, and the advice that takes from or gives to it,
        with the tenant on the other side unnamed and that side's jobs unlisted."""
        if tenant is None:
            return self
        recs = []
        for r in self.recommendations:
            giver, taker = (
                owns(tenant, r.from_tenant),
                bool(r.to_tenant) and owns(tenant, r.to_tenant),
            )
            if giver or taker:
                recs.append(_told_to(r, giver, taker))
        return dataclasses.replace(
            self,
            standings=tuple(s for s in self.standings if owns(tenant, s.tenant)),
            priorities={t: p for t, p in self.priorities.items() if owns(tenant, t)},
            savings=tuple(s for s in self.savings if owns(tenant, s.tenant)),
            recommendations=tuple(recs),
        )


def _told_to(r: Recommendation, giver: bool, taker: bool) -> Recommendation:
    if giver and (taker or not r.to_tenant):
        return r
    return dataclasses.replace(
        r,
        from_tenant=r.from_tenant if giver else ANOTHER_TENANT,
        to_tenant=r.to_tenant if taker else ANOTHER_TENANT,
        jobs=r.jobs if giver else (),
        candidates=r.candidates if giver else (),
        reason="",
        numbers={},
        change={k: v for k, v in r.change.items() if k != "preempt"} if not giver else r.change,
    )


def _plain(value: Any) -> Any:
    """Plain JSON types: times in ISO 8601, floats to 1e-4, money as strings."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# -- reading the facts ------------------------------------------------------------------------
def _position_of(
    positions: Mapping[tuple[str, str, str], quota.Position], tenant: str, pool: str, model: str
) -> quota.Position | None:
    """The position an allocation of (pool, model) counts in: its model's, else the pool's."""
    return positions.get((tenant, pool, model)) or positions.get((tenant, pool, ""))


def standings(
    positions: list[quota.Position],
    idle: tuple[IdleNow, ...],
    names: Mapping[str, Mapping[str, str]],
    at: dt.datetime,
    hold_s: float,
) -> list[Standing]:
    """Each position with its idle GPUs (``idle``: the ledger's idle-now GPUs) and the
    demand waiting long enough, in it and under the other tenants' guarantees of its pool."""
    by_key = {(p.tenant, p.pool, p.gpu_model): p for p in positions}
    idle_by: dict[tuple[str, str, str], list[IdleNow]] = {}
    for gpu in idle:
        found = _position_of(by_key, gpu.tenant, gpu.pool, gpu.gpu_model)
        if found is not None:
            idle_by.setdefault((found.tenant, found.pool, found.gpu_model), []).append(gpu)
    held_since = at - dt.timedelta(seconds=hold_s)
    out = []
    for key, p in by_key.items():
        gpus = idle_by.get(key, [])
        jobs = _idle_jobs(p, gpus, names, held_since)
        waiting = sum(w.gpus for w in p.waiting if w.since is not None and w.since <= held_since)
        out.append(
            Standing(
                p,
                sum(g.fraction for g in gpus),
                sum(g.fraction for g in gpus if g.since <= held_since),
                min((g.since for g in gpus), default=None),
                jobs,
                waiting,
            )
        )
    return [
        dataclasses.replace(s, waiting_elsewhere_gpus=_elsewhere(s, out))
        for s in sorted(out, key=lambda s: (s.tenant, s.position.pool, s.position.gpu_model))
    ]


def _idle_jobs(
    p: quota.Position,
    gpus: list[IdleNow],
    names: Mapping[str, Mapping[str, str]],
    held_since: dt.datetime,
) -> tuple[JobRef, ...]:
    """The jobs whose every GPU in ``p`` has been idle since ``held_since`` or before."""
    held = dict(p.holders)
    per_job: dict[str, list[IdleNow]] = {}
    for g in gpus:
        per_job.setdefault(g.job_id, []).append(g)
    jobs = []
    for job_id, parts in per_job.items():
        since = max(g.since for g in parts)  # the whole job is idle from its last GPU's start
        if sum(g.fraction for g in parts) + EPS < held.get(job_id, 0.0) or since > held_since:
            continue
        name = names.get(job_id, {})
        jobs.append(
            JobRef(
                job_id,
                name.get("name", ""),
                name.get("namespace", ""),
                held.get(job_id, 0.0),
                since,
                sum(g.idle_gpu_hours for g in parts),
            )
        )
    return tuple(sorted(jobs, key=lambda j: (j.idle_since, j.job_id)))


def _elsewhere(s: Standing, every: list[Standing]) -> float:
    return sum(
        o.demand_gpus for o in every if o.tenant != s.tenant and same_pool(o.position, s.position)
    )


def same_pool(a: quota.Position, b: quota.Position) -> bool:
    """Whether GPUs of one position can serve the other: one pool, one model (or pool-wide)."""
    return a.pool == b.pool and (a.gpu_model == b.gpu_model or "" in (a.gpu_model, b.gpu_model))


def price_of(prices: PriceBook, model: str, pool: str, at: dt.datetime) -> Decimal | None:
    return prices.price_at(model, pool, at) if model else None


def cost(gpu_hours: float, price: Decimal | None) -> Decimal | None:
    """``gpu_hours`` at ``price``, to the cent (None: no price)."""
    return None if price is None else (Decimal(str(round(gpu_hours, 6))) * price).quantize(CENT)
