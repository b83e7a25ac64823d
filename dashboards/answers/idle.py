"""Idle allocated GPUs as the viewer may see them: the GPUs idle in a job's hands now, the
idle GPU-hours and their cost per day of the range, and the jobs that left the most idle
(``GET /api/v1/idle``; the Idle page and the overview show the same)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dashboards import context
from dashboards.answers.ledger import cluster_of
from dashboards.context import Viewer
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.ledger import WORST, IdleNow, IdleReport, idle_now, idle_report, load_price_book

#: The most jobs ``?worst=`` may ask for.
MAX_WORST = 200


def only(filters: Filters) -> dict[str, str] | None:
    """The pool and GPU model asked for, as the ledger's ``only``."""
    kept = {k: v for k, v in (("pool", filters.pool), ("gpu_model", filters.gpu_model)) if v}
    return kept or None


def report(filters: Filters, viewer: Viewer, *, worst: int = WORST) -> IdleReport:
    """The range's idle report for ``viewer``: a tenant viewer gets its own jobs alone."""
    ctx = context.get()
    return idle_report(
        ctx.wh,
        filters.window,
        now=ctx.ledger_now(),
        idle=ctx.idle,
        prices=load_price_book(ctx.wh, ctx.currency),
        cluster=cluster_of(filters),
        tenant=viewer.scope(filters.tenant),
        only=only(filters),
        worst=worst,
    )


def now(filters: Filters, viewer: Viewer) -> tuple[IdleNow, ...]:
    """The GPUs idle in the viewer's jobs' hands now (the range plays no part)."""
    ctx = context.get()
    return idle_now(
        ctx.wh,
        ctx.ledger_now(),
        idle=ctx.idle,
        prices=load_price_book(ctx.wh, ctx.currency),
        cluster=cluster_of(filters),
        tenant=viewer.scope(filters.tenant),
        only=only(filters),
    )


def _worst(params: Mapping[str, str]) -> int:
    text = params.get("worst", "")
    if not text:
        return WORST
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORST:
        raise InputError(f"worst {text[:20]!r} is not a number of jobs: give 1 to {MAX_WORST}")
    return int(text)


def answer(filters: Filters, viewer: Viewer, params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/idle?from=&to=&cluster=&tenant=&pool=&gpu_model=&worst=``."""
    return report(filters, viewer, worst=_worst(params)).to_json()
