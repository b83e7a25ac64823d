"""Priority feedback: each tenant's efficiency over a trailing window, and the priority class
it earns (``[scheduler] priority_classes``), for the advice (fair-share weights) and the
admission webhook (the Kueue priority class of a tenant's next job).

Efficiency is the ledger's used ÷ allocated GPU-hours, over the hours that were measured: the
hours held without a utilisation sample (``unmeasured_gpu_hours``) count neither for nor
against a tenant, since nobody knows whether they were used. A tenant with no measured hour in
the window gets no score and no class.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from scheduler_hooks.policy import PriorityPolicy
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule, PriceBook, Window, compute_ledger

_EPS = 1e-9


@dataclasses.dataclass(frozen=True)
class TenantPriority:
    """A tenant's efficiency over the window and the class it maps to (None: nothing measured)."""

    tenant: str
    score: float | None
    priority_class: str | None
    used_gpu_hours: float
    allocated_gpu_hours: float
    measured_gpu_hours: float

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "score": None if self.score is None else round(self.score, 4),
            "priority_class": self.priority_class,
            "used_gpu_hours": round(self.used_gpu_hours, 4),
            "allocated_gpu_hours": round(self.allocated_gpu_hours, 4),
            "measured_gpu_hours": round(self.measured_gpu_hours, 4),
        }


def trailing_window(now: dt.datetime, days: float) -> Window:
    """The ``days`` before ``now``."""
    return Window(now - dt.timedelta(days=days), now)


def priority_classes(
    wh: Warehouse,
    now: dt.datetime,
    policy: PriorityPolicy,
    *,
    idle: IdleRule | None = None,
    prices: PriceBook | None = None,
    cluster: str = "",
) -> dict[str, TenantPriority]:
    """Every tenant that held GPUs in the ``policy.window_days`` before ``now`` (of ``cluster``,
    '' for all): its efficiency and priority class, keyed by tenant ("org/project")."""
    ledger = compute_ledger(
        wh,
        trailing_window(now, policy.window_days),
        now=now,
        group_by="tenant",
        idle=idle,
        prices=prices or PriceBook(()),
        cluster=cluster,
        stranded=False,
    )
    out = {}
    for row in ledger.rows:
        if not row.key or row.key.startswith("__") or row.allocated_gpu_hours <= _EPS:
            continue  # the unallocated line, and jobs no tenant rule maps, earn no class
        measured = row.allocated_gpu_hours - row.unmeasured_gpu_hours
        used = row.used_gpu_hours or 0.0
        score = min(1.0, used / measured) if measured > _EPS else None
        out[row.key] = TenantPriority(
            row.key,
            score,
            None if score is None else policy.class_of(score),
            used,
            row.allocated_gpu_hours,
            max(0.0, measured),
        )
    return out


def class_names(
    wh: Warehouse, now: dt.datetime, policy: PriorityPolicy, **kw: Any
) -> Mapping[str, str]:
    """Tenant → priority class, for the admission webhook's snapshot (tenants with no class
    are left out)."""
    return {
        t: p.priority_class
        for t, p in priority_classes(wh, now, policy, **kw).items()
        if p.priority_class is not None
    }


class CachedClassNames:
    """:func:`class_names` for the admission webhook's snapshot, worked out again only once
    ``max_age_s`` has passed: the snapshot is rebuilt every few seconds, and efficiency over
    days does not change in seconds."""

    def __init__(self, policy: PriorityPolicy, max_age_s: float = 600.0, **kw: Any):
        self.policy, self.max_age_s, self.kw = policy, max_age_s, kw
        self._at: dt.datetime | None = None
        self._names: Mapping[str, str] = {}

    def __call__(self, wh: Warehouse, now: dt.datetime) -> Mapping[str, str]:
        if self._at is None or (now - self._at).total_seconds() >= self.max_age_s or now < self._at:
            self._names = class_names(wh, now, self.policy, **self.kw)
            self._at = now
        return self._names
