"""One evaluation's view of the warehouse, shared by the rules: the instant, the clusters, the
price book, the GPUs idle in jobs now under each idle limit in use (read once, priced), and
each cluster's waiting queue (read once)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import polars as pl

from reports.alerts.rules import AlertRules, IdleLimit
from warehouse.analytics.explain import waiting_at
from warehouse.client import Warehouse
from warehouse.ledger import IdleNow, IdleRule, PriceBook, idle_now

#: Shares below this are rounding, not GPUs.
EPS = 1e-6


@dataclasses.dataclass
class Look:
    """What the rules read at ``at``."""

    wh: Warehouse
    rules: AlertRules
    at: dt.datetime
    prices: PriceBook
    clusters: list[str]
    _idle: dict[IdleLimit, tuple[IdleNow, ...]] = dataclasses.field(default_factory=dict)
    _waiting: dict[str, pl.DataFrame] = dataclasses.field(default_factory=dict)

    @property
    def currency(self) -> str:
        return self.prices.currency

    def idle(self, limit: IdleLimit) -> tuple[IdleNow, ...]:
        """The GPUs idle in a job's hands at ``at`` by ``limit``, every cluster, priced
        (:func:`warehouse.ledger.idle_now`), longest first."""
        if limit not in self._idle:
            rule = IdleRule(limit.threshold_ratio, limit.for_s)
            self._idle[limit] = idle_now(self.wh, self.at, idle=rule, prices=self.prices)
        return self._idle[limit]

    def idle_of(self, tenant: str) -> list[IdleNow]:
        """``tenant``'s idle GPUs by its own idle limit (the default when it is exempt from
        idle alerts: exemption silences the idle rule, not what idle means)."""
        limit = self.rules.idle_limit(tenant) or self.rules.idle
        return [i for i in self.idle(limit) if i.tenant == tenant]

    def waiting(self, cluster: str) -> pl.DataFrame:
        """The job attempts of ``cluster`` waiting at ``at``
        (:func:`warehouse.analytics.explain.waiting_at`)."""
        if cluster not in self._waiting:
            self._waiting[cluster] = waiting_at(self.wh, cluster, self.at)
        return self._waiting[cluster]
