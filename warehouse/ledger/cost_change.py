"""Why cost changed month over month: volume, GPU-model mix, price, and unallocated share.

For the months A (previous) and B, with H the allocated GPU-hours, s_m the share of them on
GPU model m and p_m the effective price of m (direct cost ÷ hours, so a price change inside
a month is weighted by when the hours fell):

- volume = (H_B − H_A) · p̄_A, with p̄_A = Σ s_A,m · p_A,m  — more or fewer GPU-hours;
- mix    = H_B · Σ (s_B,m − s_A,m) · p_A,m              — hours moved between models;
- price  = Σ H_B,m · (p_B,m − p_A,m)                    — the price book changed;
- unallocated share = shared_B − shared_A               — idle capacity charged on.

The first three add up exactly to the change in direct cost, and with the fourth to the change
in total cost (a model absent in A is priced at its B price, so it shows as mix, not price).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from decimal import Decimal
from typing import Any

import polars as pl

from warehouse.analytics.tenancy import owns
from warehouse.client import Warehouse
from warehouse.ledger.compute import build_ledger, decided_inputs, in_tenant, priced_inputs
from warehouse.ledger.pricing import (
    PriceBook,
    load_price_book,
    ms_to_hours,
    priced_ms,
    round_conserving,
)
from warehouse.ledger.result import IdlePolicy, IdleRule, LedgerError, Window
from warehouse.times import END_INSTANT, FIRST_INSTANT, first_days_end, month_days, next_month

_CENT = Decimal("0.01")


@dataclasses.dataclass(frozen=True)
class MonthCost:
    """A month's cost (or the part of it compared, see :func:`why_cost`)."""

    month: str
    gpu_hours: dict[str, float]  # per GPU model
    direct: dict[str, Decimal]  # per GPU model, exact
    shared: Decimal
    idle_gpu_hours: float
    total_cost: Decimal | None = None  # as the ledger shows it (rounded); None: exact sum
    days: float = 0.0  # days of the month compared
    days_in_month: int = 0
    #: allocated in minutes without a utilisation sample: charged, but its use is not known
    unmeasured_gpu_hours: float = 0.0

    @property
    def hours(self) -> float:
        return sum(self.gpu_hours.values())

    @property
    def total(self) -> Decimal:
        if self.total_cost is not None:
            return self.total_cost
        return sum(self.direct.values(), Decimal(0)) + self.shared

    @property
    def partial(self) -> bool:
        return 0 < self.days < self.days_in_month

    def label(self) -> str:
        if not self.partial:
            return self.month
        return f"{self.month} (first {self.days:g} of {self.days_in_month} days)"

    def price(self, model: str) -> Decimal | None:
        hours = self.gpu_hours.get(model, 0.0)
        return self.direct[model] / Decimal(hours) if hours else None


@dataclasses.dataclass(frozen=True)
class CostChange:
    tenant: str
    previous: MonthCost
    current: MonthCost
    volume: Decimal
    mix: Decimal
    price: Decimal
    unallocated_share: Decimal
    currency: str = ""

    @property
    def change(self) -> Decimal:
        return self.current.total - self.previous.total

    def to_json(self) -> dict[str, Any]:
        def money(v: Decimal) -> str:
            return str(_cents(v))

        return {
            "tenant": self.tenant or None,
            "currency": self.currency,
            "partial": self.current.partial,
            "days_compared": self.current.days,
            "previous": {
                "month": self.previous.month,
                "total_cost": money(self.previous.total),
                "gpu_hours": round(self.previous.hours, 6),
                "idle_gpu_hours": round(self.previous.idle_gpu_hours, 6),
                "unmeasured_gpu_hours": round(self.previous.unmeasured_gpu_hours, 6),
            },
            "current": {
                "month": self.current.month,
                "total_cost": money(self.current.total),
                "gpu_hours": round(self.current.hours, 6),
                "idle_gpu_hours": round(self.current.idle_gpu_hours, 6),
                "unmeasured_gpu_hours": round(self.current.unmeasured_gpu_hours, 6),
            },
            "change": money(self.change),
            "because": {
                "volume": money(self.volume),
                "gpu_model_mix": money(self.mix),
                "price": money(self.price),
                "unallocated_share": money(self.unallocated_share),
            },
            "by_gpu_model": {
                m: {
                    "previous_gpu_hours": round(self.previous.gpu_hours.get(m, 0.0), 6),
                    "current_gpu_hours": round(self.current.gpu_hours.get(m, 0.0), 6),
                    "previous_price": _opt(self.previous.price(m)),
                    "current_price": _opt(self.current.price(m)),
                }
                for m in sorted(set(self.previous.gpu_hours) | set(self.current.gpu_hours))
            },
        }

    def to_text(self) -> str:
        who = f"tenant {self.tenant}" if self.tenant else "the cluster"
        a, b = self.previous, self.current
        verb = "rose" if self.change > 0 else "fell" if self.change < 0 else "did not change"
        cur = f" {self.currency}" if self.currency else ""
        lines = [
            f"Cost of {who} {verb} from {_cents(a.total)}{cur} in {a.label()} to "
            f"{_cents(b.total)}{cur} in {b.label()} ({_cents(self.change):+}{cur}):"
        ]
        if b.partial:
            lines.append(
                f"  ({b.month} is not over: its first {b.days:g} days are compared with the "
                f"first {a.days:g} days of {a.month})"
            )
        parts = (
            ("volume", self.volume, f"{a.hours:,.1f} → {b.hours:,.1f} GPU-hours"),
            ("GPU-model mix", self.mix, "hours moved between models"),
            ("price", self.price, "the price book changed"),
            (
                "unallocated share",
                self.unallocated_share,
                f"idle capacity charged on; idle allocated GPU-hours {a.idle_gpu_hours:,.1f}"
                f" → {b.idle_gpu_hours:,.1f}",
            ),
        )
        for name, amount, note in sorted(parts, key=lambda p: -abs(p[1])):
            lines.append(f"  {name:<18} {_cents(amount):>+12}{cur}  ({note})")
        for m in (a, b):
            if m.unmeasured_gpu_hours >= 0.0005:
                lines.append(
                    f"  note: {m.unmeasured_gpu_hours:,.1f} of {m.month}'s {m.hours:,.1f} "
                    "GPU-hours were held with no utilisation samples: they are charged, but "
                    "whether they were used or idle is unmeasured"
                )
        return "\n".join(lines)


def _cents(v: Decimal) -> Decimal:
    return v.quantize(_CENT) + Decimal(0)  # + 0 turns -0.00 into 0.00


def _opt(v: Decimal | None) -> str | None:
    return None if v is None else str(v.quantize(Decimal("0.0001")))


def decompose(tenant: str, a: MonthCost, b: MonthCost, currency: str = "") -> CostChange:
    """The four effects (pure: no I/O), rounded to cents so that they add up to the change
    between the two totals as the ledger shows them."""
    models = set(a.gpu_hours) | set(b.gpu_hours)
    p_a = {m: a.price(m) or b.price(m) or Decimal(0) for m in models}
    p_b = {m: b.price(m) or p_a[m] for m in models}
    h_a, h_b = Decimal(a.hours), Decimal(b.hours)
    s_a = {m: Decimal(a.gpu_hours.get(m, 0.0)) / h_a if h_a else Decimal(0) for m in models}
    s_b = {m: Decimal(b.gpu_hours.get(m, 0.0)) / h_b if h_b else Decimal(0) for m in models}
    avg_a = sum((s_a[m] * p_a[m] for m in models), Decimal(0))
    volume = (h_b - h_a) * avg_a
    mix = h_b * sum(((s_b[m] - s_a[m]) * p_a[m] for m in models), Decimal(0))
    price = sum((Decimal(b.gpu_hours.get(m, 0.0)) * (p_b[m] - p_a[m]) for m in models), Decimal(0))
    if not h_a:  # nothing to compare with: everything is volume
        volume, mix, price = sum(b.direct.values(), Decimal(0)), Decimal(0), Decimal(0)
    effects = {"volume": volume, "mix": mix, "price": price, "share": b.shared - a.shared}
    cents = round_conserving(effects, b.total - a.total)
    return CostChange(
        tenant, a, b, cents["volume"], cents["mix"], cents["price"], cents["share"], currency
    )


def month_window(month: str) -> Window:
    try:
        first = dt.datetime.strptime(month, "%Y-%m").replace(tzinfo=dt.UTC)
    except ValueError:
        raise LedgerError(f"--month {month!r} is not a month: use YYYY-MM") from None
    if not FIRST_INSTANT <= first < END_INSTANT:
        raise LedgerError(
            f"--month {month} is outside the months the warehouse holds: pick one from "
            f"{FIRST_INSTANT:%Y-%m} to {END_INSTANT - dt.timedelta(days=1):%Y-%m}"
        )
    return Window(first, next_month(first))


def month_cost(
    wh: Warehouse,
    month: str,
    *,
    now: dt.datetime,
    days: float | None = None,
    prices: PriceBook,
    tenant: str = "",
    cluster: str = "",
    policy: IdlePolicy = IdlePolicy.WEIGHTED,
    idle: IdleRule | None = None,
) -> MonthCost:
    """A month's GPU-hours and direct cost per model, and the shared (unallocated) cost, for
    ``tenant`` (an org or org/project; the whole cluster when empty)."""
    whole_month = month_window(month)
    window = whole_month
    if days is not None:
        window = Window(whole_month.start, first_days_end(whole_month.start, days))
    idle = idle or IdleRule()
    made = decided_inputs(
        wh, window, now=now, idle=idle, prices=prices, policy=policy, cluster=cluster
    )
    usage, segments = made.usage, made.segments
    whole = build_ledger(
        made.lines,
        group_by="tenant",
        policy=policy,
        window=window,
        computed_until=window.until(now),
        idle=idle,
        currency=prices.currency,
    )
    if tenant:  # an org is all of its projects
        rows = [r for r in whole.rows if owns(tenant, r.key)]
        shared = sum((r.shared_cost for r in rows), Decimal(0))
        total = sum((r.total_cost for r in rows), Decimal(0))
        usage = usage.filter(in_tenant(tenant))
    else:
        shared = sum((r.shared_cost for r in whole.rows), Decimal(0)) + whole.totals.unshared_cost
        total = whole.totals.total_cost
    # direct cost per model, exact (unrounded), so that an unchanged price shows no effect
    keyed = usage.with_row_index("_row").with_columns(pl.col("gpu_model").alias("_key"))
    priced, _unpriced = priced_ms(keyed, segments, "s", "e", "allocated_gpu_ms", ["_key"])
    direct: dict[str, Decimal] = {}
    for model, seg, ms in priced.iter_rows():
        direct[model] = direct.get(model, Decimal(0)) + ms_to_hours(ms) * segments[seg].price
    hours = keyed.group_by("_key").agg(pl.col("allocated_gpu_ms").sum() / 3.6e6)
    gpu_hours = {m: float(h) for m, h in hours.iter_rows()}
    for model in gpu_hours:
        direct.setdefault(model, Decimal(0))
    unmeasured = usage["allocated_gpu_ms"] / 3.6e6 - usage["measured_gpu_hours"]
    return MonthCost(
        month,
        gpu_hours,
        direct,
        shared,
        float(usage["idle_gpu_hours"].sum() or 0.0),
        total_cost=total,
        days=month_days(window.start, window.until(now)),
        days_in_month=(whole_month.end - whole_month.start).days,
        unmeasured_gpu_hours=max(0.0, float(unmeasured.sum() or 0.0)),
    )


def why_cost(
    wh: Warehouse,
    month: str,
    *,
    now: dt.datetime,
    tenant: str = "",
    cluster: str = "",
    idle: IdleRule | None = None,
    prices: PriceBook | None = None,
    idle_policy: str | IdlePolicy = IdlePolicy.WEIGHTED,
    name_others: bool = True,
) -> CostChange:
    """Why ``month``'s cost differs from the month before it, for ``tenant`` (an org: all of
    its projects) or the cluster, sharing unallocated cost under ``idle_policy``. A month not
    over yet at ``now`` is compared like with like: its days so far against the same first
    days of the month before. A tenant that held nothing in either month is an error that
    names the tenants that did, unless ``name_others`` is False (for a viewer limited to its
    own tenant, who may not learn the others' names)."""
    window = month_window(month)
    if window.start >= now:
        raise LedgerError(f"--month {month} has not started yet: pick a month up to {now:%Y-%m}")
    if window.start == FIRST_INSTANT:
        raise LedgerError(
            f"--month {month} is the first month the warehouse holds: there is none before it "
            "to compare with; pick a later month"
        )
    previous = (window.start - dt.timedelta(days=1)).strftime("%Y-%m")
    book = prices if prices is not None else load_price_book(wh)
    of = functools.partial(
        month_cost,
        wh,
        now=now,
        prices=book,
        tenant=tenant,
        cluster=cluster,
        idle=idle,
        policy=IdlePolicy.parse(idle_policy),
    )
    current = of(month)
    before = of(previous, days=current.days if current.partial else None)
    if tenant and not (current.gpu_hours or before.gpu_hours):
        known = _tenants(wh, window, now, cluster, book, idle) if name_others else []
        raise LedgerError(
            f"--tenant {tenant!r} held no GPU in {previous} or {month}"
            + (f": tenants then were {', '.join(known[:20])}" if known else "")
        )
    return decompose(tenant, before, current, book.currency)


def _tenants(
    wh: Warehouse,
    window: Window,
    now: dt.datetime,
    cluster: str,
    prices: PriceBook,
    idle: IdleRule | None,
) -> list[str]:
    """The tenants that held GPUs in the month before ``window`` and in it."""
    both = Window(
        (window.start - dt.timedelta(days=1)).replace(day=1, hour=0, minute=0), window.end
    )
    usage, _capacity, _segments = priced_inputs(
        wh, both, now=now, idle=idle or IdleRule(), prices=prices, cluster=cluster
    )
    return sorted({str(t) for t in usage["tenant"].to_list() if t})
