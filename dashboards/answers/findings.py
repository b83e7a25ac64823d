"""The findings of the moment in words: what a manager should look at first this morning.

:func:`gather` reads the numbers (the viewer's idle GPUs now, waiting jobs, stranded and
unhealthy GPUs, tenants against their guarantees, cost against last month) and
:func:`findings` turns them into ranked sentences — a pure function, so each kind of finding
is checked on numbers whose truth is known. A tenant viewer's facts hold only its own jobs,
holdings and cost: nothing of the cluster's capacity (stranded or unhealthy GPUs) or of
other tenants.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence
from decimal import Decimal

import polars as pl

from dashboards import context
from dashboards.answers import idle as idle_answers
from dashboards.answers.ledger import cluster_of
from dashboards.context import Viewer
from dashboards.filters import Filters
from warehouse.analytics import fleet, moment
from warehouse.analytics.tenancy import owns
from warehouse.ledger import IdleNow
from warehouse.ledger.tail import kept_moment

#: How long an idle GPU must have been idle to be worth a sentence (or the idle rule's
#: minimum, when that is longer).
LONG_IDLE_H = 2.0
#: How long a job must have waited to be worth a sentence.
LONG_WAIT_S = 600
#: A tenant is "far over" its guarantee above this multiple of it (and a whole GPU over).
OVER_RATIO = 1.5
#: A change in cost worth a sentence (against the same days of last month).
COST_CHANGE = 0.25
TOP = 5


@dataclasses.dataclass(frozen=True)
class Waiting:
    job_id: str
    tenant: str
    gpu_model: str
    gpus: float
    wait_s: float


@dataclasses.dataclass(frozen=True)
class Holding:
    tenant: str
    held_gpus: float
    guaranteed_gpus: float


@dataclasses.dataclass(frozen=True)
class Stranded:
    gpu_model: str
    gpus: float
    nodes: int


@dataclasses.dataclass(frozen=True)
class OutOfService:
    node: str
    gpu_uuid: str
    gpu_model: str
    reason: str


@dataclasses.dataclass(frozen=True)
class CostToDate:
    """Cost from the 1st of the month to today, against the same days of the month before."""

    month_to_date: Decimal
    same_days_before: Decimal
    currency: str


@dataclasses.dataclass(frozen=True)
class Facts:
    """The numbers the findings are made of, as one viewer may see them (``scope`` None:
    everyone's; else only that tenant's, with no stranded or unhealthy GPUs)."""

    scope: str | None
    idle_rule_s: int
    currency: str
    idle_now: Sequence[IdleNow] = ()
    waiting: Sequence[Waiting] = ()
    stranded: Sequence[Stranded] = ()
    unhealthy: Sequence[OutOfService] = ()
    holdings: Sequence[Holding] = ()
    cost: CostToDate | None = None


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str  # idle, waiting, unhealthy, over_guarantee, cost
    weight: float  # GPUs concerned: how findings of different kinds are ranked
    text: str


def _n(value: float) -> str:
    """A count of GPUs as people write it: 14, 2.5."""
    return f"{value:,.1f}".removesuffix(".0")


def _gpus(value: float) -> str:
    return f"{_n(value)} GPU" + ("" if value == 1 else "s")


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes % 60 else f"{minutes // 60} h"


def _money(amount: Decimal, currency: str) -> str:
    return f"{amount:,.2f} {currency}"


def _idle(facts: Facts) -> list[Finding]:
    long_h = max(LONG_IDLE_H, facts.idle_rule_s / 3600)
    long = [r for r in facts.idle_now if r.idle_hours >= long_h]
    if not long:
        return []
    total = sum(r.fraction for r in long)
    cost = sum((r.cost or Decimal(0) for r in long), Decimal(0))
    tail = f", {_money(cost, facts.currency)} so far"
    if facts.scope is not None:
        jobs = sorted({r.job_id for r in long})
        named = ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
        text = (
            f"{_gpus(total)} of {facts.scope} allocated but idle for more than {long_h:g} h "
            f"(jobs {named}){tail}"
        )
        return [Finding("idle", total, text)]
    by_org: dict[str, float] = defaultdict(float)
    for r in long:
        by_org[r.tenant.split("/")[0] or "(no tenant)"] += r.fraction
    top, most = min(by_org.items(), key=lambda kv: (-kv[1], kv[0]))
    whose = f"all {top}'s" if len(by_org) == 1 else f"{_n(most)} of them {top}'s"
    text = f"{_gpus(total)} allocated but idle for more than {long_h:g} h — {whose}{tail}"
    return [Finding("idle", total, text)]


def _waiting(facts: Facts) -> list[Finding]:
    by_model: dict[str, list[Waiting]] = defaultdict(list)
    for w in facts.waiting:
        if w.wait_s >= LONG_WAIT_S:
            by_model[w.gpu_model].append(w)
    stranded = {s.gpu_model: s for s in facts.stranded}
    out = []
    for model, jobs in sorted(by_model.items()):
        kind = f"{model} GPUs" if model else "GPUs"
        asked = sum(w.gpus for w in jobs)
        who = "" if facts.scope is None else f" of {facts.scope}"
        count = f"{len(jobs)} job{'s' if len(jobs) != 1 else ''}{who}"
        text = (
            f"{count} waiting up to {_duration(max(w.wait_s for w in jobs))} for {kind} "
            f"({_gpus(asked)} asked)"
        )
        s = stranded.get(model)
        if s is not None and s.gpus > 1e-6:
            many = _n(round(s.gpus, 1)) != "1"
            what = kind if many else kind.removesuffix("s")
            text += (
                f" while {_n(round(s.gpus, 1))} {what} {'are' if many else 'is'} stranded on "
                f"{s.nodes} node{'s' if s.nodes != 1 else ''}"
            )
        out.append(Finding("waiting", asked, text))
    return out


def _unhealthy(facts: Facts) -> list[Finding]:
    if not facts.unhealthy:
        return []
    nodes = {u.node for u in facts.unhealthy}
    reasons = Counter(u.reason for u in facts.unhealthy if u.reason)
    why = f" (most often: {reasons.most_common(1)[0][0]})" if reasons else ""
    n = len(facts.unhealthy)
    text = (
        f"{n} GPU{'s' if n != 1 else ''} out of service on {len(nodes)} "
        f"node{'s' if len(nodes) != 1 else ''}{why}"
    )
    return [Finding("unhealthy", float(n), text)]


def _over(facts: Facts) -> list[Finding]:
    out = []
    for h in facts.holdings:
        g = h.guaranteed_gpus
        if g > 0 and h.held_gpus > g * OVER_RATIO and h.held_gpus - g >= 1:
            text = (
                f"{h.tenant} holds {_gpus(h.held_gpus)}, {h.held_gpus / g:.1f}× its guarantee "
                f"of {_n(g)} ({_n(h.held_gpus - g)} borrowed)"
            )
            out.append(Finding("over_guarantee", h.held_gpus - g, text))
    return out


def _cost(facts: Facts) -> list[Finding]:
    c = facts.cost
    if c is None or c.same_days_before <= 0:
        return []
    change = float((c.month_to_date - c.same_days_before) / c.same_days_before)
    if abs(change) < COST_CHANGE:
        return []
    way = "above" if change > 0 else "below"
    whose = "" if facts.scope is None else f" of {facts.scope}"
    text = (
        f"Cost{whose} this month so far, {_money(c.month_to_date, c.currency)}, is "
        f"{abs(change):.0%} {way} the same days of last month "
        f"({_money(c.same_days_before, c.currency)})"
    )
    return [Finding("cost", 0.0, text)]


def findings(facts: Facts, top: int = TOP) -> list[Finding]:
    """The ``top`` findings in ``facts``: the weightiest of each kind first (so one kind does
    not crowd out the others), then the rest, each group by weight."""
    every = [
        f
        for kind in (_unhealthy, _idle, _waiting, _over, _cost)
        for f in sorted(kind(facts), key=lambda f: -f.weight)
    ]
    firsts: list[Finding] = []
    rest: list[Finding] = []
    seen: set[str] = set()
    for f in every:
        (rest if f.kind in seen else firsts).append(f)
        seen.add(f.kind)
    ranked = sorted(firsts, key=lambda f: -f.weight) + sorted(rest, key=lambda f: -f.weight)
    return ranked[:top]


def _in_scope(tenant: str, scope: str | None) -> bool:
    return scope is None or owns(scope, tenant)


def gather(
    filters: Filters,
    viewer: Viewer,
    *,
    idle_now: Sequence[IdleNow] | None = None,
    cost: CostToDate | None = None,
) -> Facts:
    """The numbers of the moment for ``viewer`` (``idle_now`` and ``cost`` when the caller
    has them already)."""
    ctx = context.get()
    scope = viewer.scope(filters.tenant)
    at = ctx.ledger_now()  # the instant of the tiles beside them
    clusters = [cluster_of(filters)] if filters.cluster else fleet.known_clusters(ctx.wh)
    waiting: list[Waiting] = []
    stranded: dict[str, Stranded] = {}
    holdings: list[Holding] = []
    for cluster in clusters:
        then = kept_moment(ctx.wh, at, cluster=cluster)
        rows = then.waiting if then is not None else moment.waiting(ctx.wh, cluster, at)
        held = then.held if then is not None else moment.held_vs_guaranteed(ctx.wh, cluster, at)
        waiting += [
            Waiting(r["job_id"], r["tenant"], r["gpu_model"], float(r["gpus_requested"] or 0),
                    r["wait_s"])
            for r in rows.iter_rows(named=True)
            if _in_scope(r["tenant"], scope)
        ]  # fmt: skip
        holdings += [
            Holding(r["tenant"], r["held_gpus"], r["guaranteed_gpus"])
            for r in held.iter_rows(named=True)
            if _in_scope(r["tenant"], scope)
        ]
        if scope is None and rows.height:
            per_model = (
                moment.stranded_in(then.fragmentation)
                if then is not None
                else moment.stranded_by_model(ctx.wh, cluster, at)
            )
            for r in per_model.iter_rows(named=True):
                s = stranded.get(r["gpu_model"], Stranded(r["gpu_model"], 0.0, 0))
                stranded[r["gpu_model"]] = Stranded(
                    s.gpu_model, s.gpus + r["stranded_gpus"], s.nodes + r["nodes"]
                )
    unhealthy: list[OutOfService] = []
    if scope is None:
        sick = moment.unhealthy(ctx.wh, cluster_of(filters))
        if filters.gpu_model:
            sick = sick.filter(pl.col("gpu_model") == filters.gpu_model)
        unhealthy = [
            OutOfService(r["node"], r["gpu_uuid"], r["gpu_model"], r["health_reason"])
            for r in sick.iter_rows(named=True)
        ]
    return Facts(
        scope=scope,
        idle_rule_s=ctx.idle.min_duration_s,
        currency=ctx.currency,
        idle_now=idle_now if idle_now is not None else idle_answers.now(filters, viewer),
        waiting=[w for w in waiting if not filters.gpu_model or w.gpu_model == filters.gpu_model],
        stranded=list(stranded.values()),
        unhealthy=unhealthy,
        holdings=holdings,
        cost=cost,
    )


def top_findings(
    filters: Filters,
    viewer: Viewer,
    *,
    idle_now: Sequence[IdleNow] | None = None,
    cost: CostToDate | None = None,
) -> list[Finding]:
    """:func:`findings` of :func:`gather`."""
    return findings(gather(filters, viewer, idle_now=idle_now, cost=cost))
