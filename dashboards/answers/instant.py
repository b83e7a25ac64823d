"""Where and when an answer about "now" looks: the one cluster asked (or the only one), and
the instant a range stands for (its end, or now if that is earlier). The capacity and queue
answers share the ledger's "now" (the Overview's: the live tail's instant, at most one pass
old), so that their "now" is one instant with it; alerts and advice read the clock."""

from __future__ import annotations

import datetime as dt

from dashboards import context
from dashboards.filters import Filters
from warehouse.analytics import fleet


def at_of(filters: Filters) -> dt.datetime:
    """The instant a page shows "now" for: the end of the range asked, or the ledger's now if
    earlier."""
    return min(context.get().ledger_now(), filters.window.end)


def clock_at_of(filters: Filters) -> dt.datetime:
    """:func:`at_of` by the clock, for the alerts and advice (the live tail holds neither)."""
    return min(context.get().now(), filters.window.end)


def one_cluster(filters: Filters) -> str:
    """The cluster asked for, or the only one there is (several: the viewer must pick)."""
    return fleet.pick_cluster(context.get().wh, filters.cluster)
