"""The advice of one cluster at one instant, read from the warehouse and decided by the pure
functions of :mod:`scheduler_hooks.recommend` and :mod:`scheduler_hooks.limits`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import polars as pl

from scheduler_hooks import limits, recommend
from scheduler_hooks.advice import KINDS, AdviceReport, standings
from scheduler_hooks.policy import AdvicePolicy
from scheduler_hooks.priority import priority_classes
from warehouse.analytics import quota
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule, PriceBook, idle_now


def build_advice(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    policy: AdvicePolicy,
    *,
    idle: IdleRule,
    prices: PriceBook,
    quotas: pl.DataFrame | None = None,
    weights: Mapping[str, float] | None = None,
) -> AdviceReport:
    """The advice for ``cluster`` at ``at``. ``quotas`` replaces the warehouse's quotas (a
    Kueue cluster's ClusterQueues, :data:`warehouse.analytics.quota.QUOTA_COLUMNS`);
    ``weights`` are the tenants' fair-share weights now (missing: the schedulers' default 1).
    """
    positions = quota.positions(wh, cluster, at, quotas=quotas)
    now_idle = idle_now(wh, at, idle=idle, prices=prices, cluster=cluster)
    names = quota.job_details(wh, cluster, [g.job_id for g in now_idle])
    hold = policy.hysteresis.hold_s
    stand = standings(positions, now_idle, names, at, hold)
    tenants = sorted({s.tenant for s in stand})
    priorities = {
        t: p
        for t, p in priority_classes(
            wh, at, policy.priority, idle=idle, prices=prices, cluster=cluster
        ).items()
        if t in tenants
    }
    context = recommend.Context(cluster, at, policy, prices)
    recs = [
        *recommend.reclaims(stand, context),
        *recommend.borrow_limits(stand, context),
        *recommend.lending(stand, context),
        *recommend.weights(priorities, weights or {}, context),
    ]
    savings, limit_recs = limits.limit_advice(wh, stand, context, idle=idle)
    return AdviceReport(
        cluster,
        at,
        prices.currency,
        policy,
        tuple(stand),
        priorities,
        tuple(savings),
        tuple(sorted([*recs, *limit_recs], key=lambda r: (KINDS.index(r.kind), r.key))),
    )
