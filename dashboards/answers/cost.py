"""Why cost changed month over month, as the viewer may see it: the month of the window's last
day against the month before, for the viewer's tenant (or the one asked within it), or for
the cluster when a manager asks for no tenant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dashboards import context
from dashboards.answers.ledger import cluster_of
from dashboards.context import Viewer
from dashboards.filters import Filters
from warehouse.ledger import CostChange, load_price_book, why_cost


def change(filters: Filters, viewer: Viewer) -> CostChange:
    """The month of ``filters.last`` against the month before. A tenant viewer gets its own
    figures alone, and an error about a tenant that held nothing names no other tenant."""
    ctx = context.get()
    return why_cost(
        ctx.wh,
        filters.last.strftime("%Y-%m"),
        now=ctx.ledger_now(),
        tenant=viewer.scope(filters.tenant) or "",
        cluster=cluster_of(filters),
        idle=ctx.idle,
        prices=load_price_book(ctx.wh, ctx.currency),
        idle_policy=filters.idle_policy or ctx.idle_policy,
        name_others=viewer.tenant is None,
    )


def answer(filters: Filters, viewer: Viewer, _params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/cost_change?to=YYYY-MM-DD&tenant=&cluster=&idle_policy=``."""
    return change(filters, viewer).to_json()
