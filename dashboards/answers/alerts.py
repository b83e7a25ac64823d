"""Open alerts and the advice in force, as the viewer may see them (see
:mod:`warehouse.analytics.alerts` for what a tenant's view holds)."""

from __future__ import annotations

import polars as pl

from dashboards import context
from dashboards.answers.instant import at_of
from dashboards.context import Viewer
from dashboards.filters import Filters
from warehouse.analytics import alerts, fleet


def _cluster(filters: Filters) -> str:
    """The cluster asked (which must exist), or "" for every cluster."""
    return fleet.pick_cluster(context.get().wh, filters.cluster, one=False)


def open_alerts(filters: Filters, viewer: Viewer) -> pl.DataFrame:
    """The alerts open at the range's end (or now, if earlier), newest first."""
    return alerts.open_alerts(
        context.get().wh,
        at_of(filters),
        cluster=_cluster(filters),
        tenant=viewer.scope(filters.tenant),
    )


def current_advice(filters: Filters, viewer: Viewer) -> pl.DataFrame:
    """The advice in force at the range's end (or now, if earlier), newest first."""
    return alerts.current_advice(
        context.get().wh,
        at_of(filters),
        cluster=_cluster(filters),
        tenant=viewer.scope(filters.tenant),
    )


def written() -> tuple[int, int]:
    """Rows alerting and advice have written in all (no tenant in them: counts only)."""
    return alerts.written(context.get().wh)
