"""The rules about idle allocated GPUs: a GPU held by a job and idle for too long (``idle``),
and a tenant above its guarantee whose borrowed GPUs sit idle (``borrowed``)."""

from __future__ import annotations

import functools
from urllib.parse import quote

from reports.alerts.findings import Finding, listed, money, total, when
from reports.alerts.look import EPS, Look
from reports.alerts.rules import IdleLimit, duration_text
from warehouse.analytics.watch import TenantPosition, tenant_positions
from warehouse.ledger import IdleNow


def gpu_name(gpu_uuid: str, mig_instance: str = "") -> str:
    return gpu_uuid + (f" (MIG {mig_instance})" if mig_instance else "")


def idle_findings(look: Look) -> list[Finding]:
    """One finding per GPU (or MIG slice, or share) idle in a job's hands for at least its
    tenant's idle limit; exempt tenants are left out."""
    found = []
    for limit in sorted(look.rules.limits(), key=lambda x: (x.util_percent, x.for_s)):
        for item in look.idle(limit):
            if look.rules.idle_limit(item.tenant) == limit:
                found.append(_idle(look, item, limit))
    return found


def _idle(look: Look, item: IdleNow, limit: IdleLimit) -> Finding:
    gpu = gpu_name(item.gpu_uuid, item.mig_instance)
    share = f"a {item.fraction:g} share of " if item.fraction < 1 - EPS else ""
    subject = f"{share}GPU {gpu} on node {item.node} held by job {item.job_id} of {item.tenant}"
    seconds = (item.until - item.since).total_seconds()
    summary = (
        f"{subject} ({item.gpu_model}, pool {item.pool or '-'}) has been under "
        f"{limit.util_percent:g}% utilisation for {duration_text(seconds)} (since "
        f"{when(item.since)}; alert from {duration_text(limit.for_s)}); idle cost so far "
        f"{money(item.cost, look.currency)}"
    )
    return Finding(
        rule="idle",
        key="|".join(
            ("idle", item.cluster, item.gpu_uuid, item.mig_instance, item.job_id, str(item.attempt))
        ),
        cluster=item.cluster,
        subject=subject,
        summary=summary,
        at=look.at,
        since=item.since,
        node=item.node,
        gpus=(item.gpu_uuid,),
        jobs=(item.job_id,),
        tenant=item.tenant,
        cost=item.cost,
        currency=look.currency,
        value=seconds,
        threshold=float(limit.for_s),
        link=look.rules.link(
            f"/gpu/{quote(item.gpu_uuid, safe='')}",
            cluster=item.cluster,
            **{"from": item.since.date().isoformat(), "to": look.at.date().isoformat()},
        ),
        facts={
            "gpu_model": item.gpu_model,
            "pool": item.pool,
            "fraction": item.fraction,
            "attempt": item.attempt,
            "mig_instance": item.mig_instance,
            "idle_gpu_hours": item.idle_gpu_hours,
            "util_percent_under": limit.util_percent,
            "idle_until": item.until,
        },
    )


def borrowed_findings(look: Look) -> list[Finding]:
    """One finding per tenant, pool and model where the tenant holds more than its guarantee
    and at least ``borrowed_min_gpus`` of what it borrowed is idle (idle by its idle limit:
    the GPUs :func:`warehouse.ledger.idle_now` finds)."""
    found = []
    for cluster in look.clusters:
        positions = tenant_positions(
            look.wh,
            cluster,
            look.at,
            threshold_ratio=look.rules.idle.threshold_ratio,
            # the positions' own idle figures are not used (idle is idle_now's, below): the
            # shortest utilisation window keeps the query light
            util_window_s=60,
            waiting=functools.partial(look.waiting, cluster),
        )
        for tp in positions:
            finding = _borrowed(look, tp)
            if finding is not None:
                found.append(finding)
    return found


def _borrowed(look: Look, tp: TenantPosition) -> Finding | None:
    p = tp.position
    if p.borrowed_gpus <= EPS:
        return None
    idle = sorted(
        (
            i
            for i in look.idle_of(tp.tenant)
            if i.cluster == tp.cluster
            and i.pool == p.pool
            and (not p.gpu_model or i.gpu_model == p.gpu_model)
        ),
        key=lambda i: (i.since, i.gpu_uuid, i.mig_instance),
    )
    idle_borrowed = min(p.borrowed_gpus, sum(i.fraction for i in idle))
    if idle_borrowed + EPS < look.rules.borrowed_min_gpus:
        return None
    # the longest-idle GPUs that make up the idle borrowed ones: as many as were borrowed have
    # been idle at least since the last of them went idle
    counted, held = [], 0.0
    for item in idle:
        counted.append(item)
        held += item.fraction
        if held >= idle_borrowed - EPS:
            break
    since = counted[-1].since
    model = p.gpu_model or "any-model"
    limit = look.rules.idle_limit(tp.tenant) or look.rules.idle
    gpus = [
        f"{gpu_name(i.gpu_uuid, i.mig_instance)} on {i.node} (job {i.job_id}, "
        f"{duration_text((i.until - i.since).total_seconds())})"
        for i in counted
    ]
    lenders = listed(
        [f"{x.tenant} {x.unused_gpus:g} unused ({x.waiting_jobs} waiting)" for x in p.lenders]
    )
    cost = total([i.cost for i in counted])
    subject = f"tenant {tp.tenant} in pool {p.pool} ({model})"
    summary = (
        f"tenant {tp.tenant} holds {p.held_gpus:g} {model} GPUs in pool {p.pool}, "
        f"{p.borrowed_gpus:g} above its guarantee of {p.guaranteed_gpus:g}, and {idle_borrowed:g} "
        f"of them sit idle ({limit.text()}) since {when(since)}: {listed(gpus)}; their idle "
        f"cost so far {money(cost, look.currency)}; unused guarantee it borrows: "
        f"{lenders or 'none with a quota'}"
    )
    return Finding(
        rule="borrowed",
        key="|".join(("borrowed", tp.cluster, tp.tenant, p.pool, p.gpu_model)),
        cluster=tp.cluster,
        subject=subject,
        summary=summary,
        at=look.at,
        since=since,
        node=counted[0].node,
        gpus=tuple(dict.fromkeys(i.gpu_uuid for i in counted)),
        jobs=tuple(dict.fromkeys(i.job_id for i in counted)),
        tenant=tp.tenant,
        cost=cost,
        currency=look.currency,
        value=idle_borrowed,
        threshold=look.rules.borrowed_min_gpus,
        link=look.rules.link(
            "/tenants", cluster=tp.cluster, tenant=tp.tenant, pool=p.pool, gpu_model=p.gpu_model
        ),
        facts={
            "pool": p.pool,
            "gpu_model": p.gpu_model,
            "held_gpus": p.held_gpus,
            "guaranteed_gpus": p.guaranteed_gpus,
            "borrowed_gpus": p.borrowed_gpus,
            "idle_borrowed_gpus": idle_borrowed,
            "nodes": sorted({i.node for i in counted}),
            "lenders": [[x.tenant, x.unused_gpus, x.waiting_jobs] for x in p.lenders],
        },
    )
