"""Open alerts and the advice in force, as the viewer may see them (see
:mod:`warehouse.analytics.alerts` for what a tenant's view holds), and advice approved or
rejected by a viewer who may."""

from __future__ import annotations

import logging

import polars as pl

from dashboards import context
from dashboards.answers.instant import clock_at_of
from dashboards.context import Forbidden, Viewer
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.analytics import alerts, fleet
from warehouse.client import WarehouseError

log = logging.getLogger(__name__)
#: The steps the page offers (applying changes the scheduler: the command line's alone).
VERBS = ("approve", "reject")


def _cluster(filters: Filters) -> str:
    """The cluster asked (which must exist), or "" for every cluster."""
    return fleet.pick_cluster(context.get().wh, filters.cluster, one=False)


def open_alerts(filters: Filters, viewer: Viewer) -> pl.DataFrame:
    """The alerts open at the range's end (or now, if earlier), newest first."""
    return alerts.open_alerts(
        context.get().wh,
        clock_at_of(filters),
        cluster=_cluster(filters),
        tenant=viewer.scope(filters.tenant),
    )


def current_advice(filters: Filters, viewer: Viewer) -> pl.DataFrame:
    """The advice in force at the range's end (or now, if earlier), newest first."""
    return alerts.current_advice(
        context.get().wh,
        clock_at_of(filters),
        cluster=_cluster(filters),
        tenant=viewer.scope(filters.tenant),
    )


def written() -> tuple[int, int]:
    """Rows alerting and advice have written in all (no tenant in them: counts only)."""
    return alerts.written(context.get().wh)


def decide(verb: str, advice_id: str, viewer: Viewer) -> str:
    """Approve or reject ``advice_id`` as ``viewer``, who must be an admin or a manager: the
    advice's new status (the step is audited under the viewer's name). Anyone else is refused
    with :class:`~dashboards.context.Forbidden`, and the refusal audited
    (``advice.<verb>.denied``), whatever the page showed them: a callback can be forged."""
    if verb not in VERBS:
        raise InputError(f"{verb!r} is not a step the page takes: approve or reject")
    ctx = context.get()
    if not viewer.manages:
        why = f"{viewer.name} ({viewer.role}) may not {verb} advice: an admin or a manager does"
        _refused(viewer.name, verb, advice_id, why)
        raise Forbidden(why)
    if ctx.decide is None:
        raise InputError(
            f"advice is not approved from this dashboard: `gpuledger advise {verb} ID --user NAME`"
        )
    if not advice_id:
        raise InputError(f"pick the advice to {verb} in the table first")
    return ctx.decide(advice_id, verb, viewer.name)


def _refused(name: str, verb: str, advice_id: str, why: str) -> None:
    """Audit a refused step (the id as sent, cut to 100 characters: a forged one may be
    anything); best effort: the refusal stands when the log cannot take it."""
    try:
        context.get().wh.audit(
            name, f"advice.{verb}.denied", advice_id[:100], f"{why} (dashboard)", outcome="denied"
        )
    except WarehouseError as exc:
        log.warning("cannot audit a refused advice %s (%s): %s", verb, why, exc)
