"""What a pass of the live tail makes before the pages ask it: the whole fleet's ledger lines
of the ranges the shell offers in one click and of the Overview's cost to date, under the
settings' idle policy, and those ranges' usage rows day by day. Every page's ledger, tenants'
tree and job list of those windows (for any viewer: a tenant's cents are the whole ledger's),
and the Idle page and the Overview's range, then start from them; as do the Tenants page's
quota positions and the Capacity page's heatmap, made for each cluster at the pass's instant."""

from __future__ import annotations

import datetime as dt

from dashboards import context
from dashboards.answers import capacity, tenants
from dashboards.answers.overview import to_date
from dashboards.filters import ranges
from warehouse.analytics import fleet
from warehouse.ledger import Window, load_price_book, usage_days, warm_lines


def windows(today: dt.date) -> list[Window]:
    """The windows warmed on ``today``, each once."""
    days = [(first, last) for _label, first, last in ranges(today)] + list(to_date(today))
    return [Window.days(first, last) for first, last in dict.fromkeys(days)]


def warm(at: dt.datetime) -> None:
    """Make the lines of :func:`windows`, the ranges' daily usage, and each cluster's quota
    positions and last whole hour's grid as of the pass at ``at``."""
    ctx = context.get()
    warm_lines(
        ctx.wh,
        windows(at.date()),
        now=at,
        idle=ctx.idle,
        prices=load_price_book(ctx.wh, ctx.currency),
        policy=ctx.idle_policy,
    )
    for _label, first, last in ranges(at.date()):
        usage_days(ctx.wh, Window.days(first, last), now=at, idle=ctx.idle)
    for cluster in fleet.known_clusters(ctx.wh):
        tenants.quota_positions(cluster, at)
        capacity.grid_rows(cluster, at)
