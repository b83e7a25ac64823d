"""Waiting and failure as the viewer may see them: wait-time percentiles, outcomes, top
reasons and lost GPU-hours over the range, and the jobs waiting at its end with why.

``GET /api/v1/queues?from=&to=&cluster=&by=&tenant=`` answers the document of ``gpuledger
queues --format json`` (wait_times, outcomes, top_reasons, lost_gpu_hours; durations in
seconds), plus ``waiting``: the job attempts waiting at the range's end (or now, if earlier)
with their reasons, and ``tenant``, the tenant the answer is limited to. A ``tenant:`` viewer's
answer is computed from its own job attempts alone, so its percentiles and rates are its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dashboards import context
from dashboards.answers.instant import at_of, one_cluster
from dashboards.context import Viewer
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.analytics import pending, queues
from warehouse.ledger.tail import kept_attempts, kept_moment


def group_of(filters: Filters, by: str | None = None) -> str:
    """The grouping asked (``by``, else the filters'), which must be one queues know."""
    chosen = by or filters.by
    if chosen not in queues.GROUPS:
        raise InputError(
            f"by {chosen!r} is not one of {', '.join(queues.GROUPS)} (what waits and failures "
            "are grouped by)"
        )
    return chosen


def report(filters: Filters, viewer: Viewer, by: str | None = None) -> queues.QueueReport:
    """Waits and failures over the range, grouped by ``by`` (else the filters' grouping)."""
    window, ctx, cluster = filters.window, context.get(), one_cluster(filters)
    return queues.report(
        ctx.wh,
        cluster,
        window.start,
        window.end,
        by=(group_of(filters, by),),
        tenant=viewer.scope(filters.tenant),
        pool=filters.pool,
        gpu_model=filters.gpu_model,
        # a range up to today as of the live tail's instant: the attempts it keeps
        rows=kept_attempts(ctx.wh, cluster, window.start, window.end, now=ctx.ledger_now()),
    )


def waiting(filters: Filters, viewer: Viewer) -> list[pending.Waiting]:
    """The job attempts waiting at the range's end (or now), longest first, with why."""
    wh, cluster, at = context.get().wh, one_cluster(filters), at_of(filters)
    then = kept_moment(wh, at, cluster=cluster)  # at the live tail's instant: what it kept
    return pending.waiting_jobs(
        wh,
        cluster,
        at,
        tenant=viewer.scope(filters.tenant),
        pool=filters.pool,
        gpu_model=filters.gpu_model,
        queue=then.queue if then is not None else None,
    )


def answer(filters: Filters, viewer: Viewer, _params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/queues``."""
    found = report(filters, viewer)
    return {
        **found.to_dict(),
        "waiting": [w.to_dict() for w in waiting(filters, viewer)],
        "tenant": found.tenant,
    }
