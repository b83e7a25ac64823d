"""A month's chargeback: what each tenant (org → project → user) owes per GPU model, how the
month compares with the one before, and the reconciliation that proves it adds up.

Everything comes from the typed ledger (:func:`warehouse.ledger.compute_ledger`), so a report
and `gpuledger ledger` never disagree by a cent. A tenant's report holds that tenant's lines
alone (the ledger's ``tenant`` view): no other tenant and no cluster-wide figure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable
from decimal import Decimal

from warehouse.client import Warehouse
from warehouse.ledger import (
    CostChange,
    IdlePolicy,
    IdleRule,
    Ledger,
    LedgerError,
    LedgerRow,
    PriceBook,
    Window,
    compute_ledger,
    first_data,
    load_price_book,
    month_window,
    why_cost,
)

#: The lines of a chargeback: one per tenant, user and GPU model held in the month.
LINE_GROUPING = "tenant,user,gpu_model"


class ReportError(LedgerError):
    """A report that cannot be made as asked (a month not started, a tenant with no lines)."""


@dataclasses.dataclass(frozen=True)
class TrendPoint:
    """One tenant's day: its direct cost and how much of what it held it used."""

    day: dt.date
    tenant: str
    direct_cost: Decimal
    allocated_gpu_hours: float
    used_gpu_hours: float | None


@dataclasses.dataclass(frozen=True)
class Chargeback:
    """The month's chargeback for everyone (``tenant`` None) or for one tenant."""

    month: str
    tenant: str | None
    by_tenant: Ledger  # rows per tenant ("org/project"), with energy where the data has it
    lines: Ledger  # rows per tenant, user and GPU model (``parts``)
    change: CostChange | None
    no_change_reason: str  # why ``change`` is None ("" when it is not)
    trend: tuple[TrendPoint, ...]

    @property
    def currency(self) -> str:
        return self.by_tenant.currency

    @property
    def window(self) -> Window:
        return self.by_tenant.window

    @property
    def partial(self) -> bool:
        """The month was not over when the report was made: its figures will still grow."""
        return self.by_tenant.computed_until < self.window.end

    def orgs(self) -> list[tuple[str, list[LedgerRow]]]:
        """Each org with its tenants' rows, in order (org → project)."""
        out: dict[str, list[LedgerRow]] = {}
        for row in self.by_tenant.rows:
            out.setdefault(row.key.split("/")[0], []).append(row)
        return sorted(out.items())

    def reconciliation(self) -> list[tuple[str, Decimal | None]]:
        """The sums that prove the report adds up: charges plus the unshared line equal
        capacity cost to the cent (everyone's report), or the lines equal the tenant's total
        (a tenant's report, which holds no cluster figure)."""
        t = self.by_tenant.totals
        charges = sum((r.total_cost for r in self.by_tenant.rows), Decimal(0))
        lines = sum((r.total_cost for r in self.lines.rows), Decimal(0))
        if self.tenant is not None:
            return [("lines (tenant × user × GPU model)", lines), ("tenant total", charges)]
        return [
            ("charged to tenants", charges),
            ("unshared (unallocated capacity)", t.unshared_cost),
            ("charges + unshared", charges + t.unshared_cost),
            ("capacity GPU-hours × price", t.capacity_cost),
        ]

    @property
    def reconciled(self) -> bool | None:
        """Whether the reconciliation holds; None without inventory to cost capacity by."""
        if self.tenant is not None:
            sums = [v for _k, v in self.reconciliation()]
            return sums[0] == sums[1]
        return self.by_tenant.conserved


def build_chargeback(
    wh: Warehouse,
    month: str,
    *,
    now: dt.datetime,
    tenant: str | None = None,
    idle_policy: str | IdlePolicy = IdlePolicy.WEIGHTED,
    idle: IdleRule | None = None,
    prices: PriceBook | None = None,
    cluster: str = "",
) -> Chargeback:
    """The chargeback of ``month`` (YYYY-MM) as of ``now``; ``tenant`` (an org or org/project)
    limits it to that tenant's lines."""
    window = month_window(month)
    if window.start >= now:
        raise ReportError(f"--month {month} has not started yet: pick a month up to {now:%Y-%m}")
    prices = prices if prices is not None else load_price_book(wh)
    ledger_of = functools.partial(
        compute_ledger,
        wh,
        now=now,
        idle_policy=idle_policy,
        idle=idle,
        prices=prices,
        cluster=cluster,
        tenant=tenant,
    )
    by_tenant = ledger_of(window, group_by="tenant", energy=True)
    if tenant is not None and not by_tenant.rows:
        raise ReportError(f"--tenant {tenant!r} held no GPU in {month}: check the name")
    change, reason = _change(wh, month, now, tenant, idle, prices, cluster)
    return Chargeback(
        month=month,
        tenant=tenant,
        by_tenant=by_tenant,
        lines=ledger_of(window, group_by=LINE_GROUPING, stranded=False),
        change=change,
        no_change_reason=reason,
        trend=_trend(ledger_of, _first_day(wh, window.start), by_tenant.computed_until),
    )


def _change(
    wh: Warehouse,
    month: str,
    now: dt.datetime,
    tenant: str | None,
    idle: IdleRule | None,
    prices: PriceBook | None,
    cluster: str,
) -> tuple[CostChange | None, str]:
    try:
        change = why_cost(
            wh, month, now=now, tenant=tenant or "", cluster=cluster, idle=idle, prices=prices
        )
    except LedgerError as exc:  # the first month held, or a tenant new this month
        return None, str(exc).split(": tenants then were")[0]
    return change, ""


def _first_day(wh: Warehouse, start: dt.datetime) -> dt.datetime:
    """Midnight of the first day in the window that can hold data (days before the warehouse's
    first sample or allocation cost nothing and are not computed)."""
    first = first_data(wh)
    if first is None or first <= start:
        return start
    return first.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _trend(
    ledger_of: Callable[..., Ledger], start: dt.datetime, until: dt.datetime
) -> tuple[TrendPoint, ...]:
    """Each tenant's direct cost and use day by day, up to ``until`` (sealed days make this
    cheap). Direct cost, because a day's share of idle capacity is decided over that day
    alone and would not add up to the month's."""
    points: list[TrendPoint] = []
    day = start
    while day < until:
        ledger = ledger_of(Window(day, day + dt.timedelta(days=1)), stranded=False)
        points += [
            TrendPoint(day.date(), r.key, r.direct_cost, r.allocated_gpu_hours, r.used_gpu_hours)
            for r in ledger.rows
        ]
        day += dt.timedelta(days=1)
    return tuple(points)
