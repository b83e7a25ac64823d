"""The ledger as the viewer may see it: the same document as `gpuledger ledger --format json`,
limited to the viewer's tenant (and to the tenant, pool and GPU model asked for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dashboards import context
from dashboards.context import Viewer
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.analytics import fleet
from warehouse.ledger import Ledger, compute_ledger, load_price_book


def cluster_of(filters: Filters) -> str:
    """The cluster asked for, which must be one the warehouse holds ("" for all)."""
    if not filters.cluster:
        return ""
    names = fleet.known_clusters(context.get().wh)
    if filters.cluster not in names:
        known = ", ".join(names) if names else "none yet"
        raise InputError(
            f"cluster {filters.cluster!r} is not in the warehouse (its clusters: {known})"
        )
    return filters.cluster


def ledger(
    filters: Filters, viewer: Viewer, *, group_by: str | None = None, stranded: bool = True
) -> Ledger:
    """The window's ledger for ``viewer``: a tenant viewer gets its own lines alone (see
    :func:`warehouse.ledger.compute_ledger`'s ``tenant``). ``stranded`` False leaves out the
    stranded GPU-hours, which sample the cluster's fragmentation hour by hour (most of the
    ledger's time over a month) for a figure only the JSON document and the CLI show."""
    ctx = context.get()
    only = {k: v for k, v in (("pool", filters.pool), ("gpu_model", filters.gpu_model)) if v}
    return compute_ledger(
        ctx.wh,
        filters.window,
        now=ctx.ledger_now(),
        group_by=group_by or filters.by,
        idle_policy=filters.idle_policy or ctx.idle_policy,
        idle=ctx.idle,
        prices=load_price_book(ctx.wh, ctx.currency),
        cluster=cluster_of(filters),
        tenant=viewer.scope(filters.tenant),
        only=only or None,
        stranded=stranded,
    )


def answer(filters: Filters, viewer: Viewer, _params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/ledger?from=&to=&by=&idle_policy=&cluster=&tenant=&pool=&gpu_model=``."""
    return ledger(filters, viewer).to_json()


def shown(filters: Filters, viewer: Viewer) -> Ledger:
    """The ledger as the pages show it: without the stranded GPU-hours (see :func:`ledger`)."""
    return ledger(filters, viewer, stranded=False)
