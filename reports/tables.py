"""A chargeback's tables as plain rows (header, then values: str, float, Decimal or None),
which every format renders its own way: CSV, the workbook's sheets, the HTML and PDF."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from reports.chargeback import Chargeback
from warehouse.ledger import UNALLOCATED, LedgerRow

#: How a column's values are shown: hours, a ratio, money, or text.
KIND = {
    "allocated_gpu_hours": "hours",
    "used_gpu_hours": "hours",
    "idle_gpu_hours": "hours",
    "unmeasured_gpu_hours": "hours",
    "efficiency": "ratio",
    "direct_cost": "money",
    "shared_cost": "money",
    "energy_kwh": "kwh",
    "energy_cost": "money",
    "total_cost": "money",
    "direct_cost_day": "money",
}

_FIGURES = (
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unmeasured_gpu_hours",
    "efficiency",
    "direct_cost",
    "shared_cost",
)


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    header: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def kind(self, column: int) -> str:
        return KIND.get(self.header[column], "text")


def _figures(row: LedgerRow) -> tuple[Any, ...]:
    return (
        row.allocated_gpu_hours,
        row.used_gpu_hours,
        row.idle_gpu_hours,
        row.unmeasured_gpu_hours,
        row.efficiency,
        row.direct_cost,
        row.shared_cost,
    )


def lines(cb: Chargeback) -> Table:
    """Tenant × user × GPU model. Everyone's report ends with the cost no tenant carries (the
    unallocated capacity under the ``none`` policy), so its totals add up to capacity cost."""
    rows: list[tuple[Any, ...]] = []
    for r in cb.lines.rows:
        tenant, user, model = r.parts
        org, _, project = tenant.partition("/")
        rows.append((org, project, user, model, *_figures(r), r.total_cost))
    t = cb.lines.totals
    if cb.tenant is None and t.unshared_cost:
        figures = (t.unallocated_gpu_hours, None, None, 0.0, None, Decimal(0), t.unshared_cost)
        rows.append((UNALLOCATED, "", "", "", *figures, t.unshared_cost))
    header = ("org", "project", "user", "gpu_model", *_FIGURES, "total_cost")
    return Table("Lines", header, tuple(rows))


def tenants(cb: Chargeback) -> Table:
    """Per tenant (org → project), with energy where the data has it."""
    energy = cb.by_tenant.energy.by_key() if cb.by_tenant.energy is not None else {}
    rows = []
    for r in cb.by_tenant.rows:
        org, _, project = r.key.partition("/")
        e = energy.get(r.key)
        rows.append(
            (
                org,
                project,
                *_figures(r),
                e.energy_kwh if e else None,
                e.energy_cost if e else None,
                r.total_cost,
            )
        )
    header = ("org", "project", *_FIGURES, "energy_kwh", "energy_cost", "total_cost")
    return Table("Tenants", header, tuple(rows))


def reconciliation(cb: Chargeback) -> Table:
    rows = tuple((name, value) for name, value in cb.reconciliation())
    return Table("Reconciliation", ("line", "total_cost"), rows)


def change(cb: Chargeback) -> Table:
    """The month-over-month explanation: the change split into its causes."""
    c = cb.change
    if c is None:
        return Table("Change", ("cause", "total_cost", "note"), ())
    a, b = c.previous, c.current
    rows = (
        (f"total {a.label()}", a.total, f"{a.hours:,.1f} GPU-hours"),
        (f"total {b.label()}", b.total, f"{b.hours:,.1f} GPU-hours"),
        ("volume", c.volume, "more or fewer GPU-hours"),
        ("GPU-model mix", c.mix, "hours moved between models"),
        ("price", c.price, "the price book changed"),
        (
            "unallocated share (idle capacity)",
            c.unallocated_share,
            f"idle allocated GPU-hours {a.idle_gpu_hours:,.1f} → {b.idle_gpu_hours:,.1f}",
        ),
    )
    return Table("Change", ("cause", "total_cost", "note"), rows)


def trend(cb: Chargeback) -> Table:
    rows = tuple(
        (p.day.isoformat(), p.tenant, p.allocated_gpu_hours, p.used_gpu_hours, p.direct_cost)
        for p in cb.trend
    )
    header = ("day", "tenant", "allocated_gpu_hours", "used_gpu_hours", "direct_cost_day")
    return Table("Trend", header, rows)


def text(value: Any, kind: str) -> str:
    """A value as the CSV and the documents print it: money to the cent, hours to 1/1000."""
    if value is None:
        return ""
    if kind == "money":
        return f"{Decimal(value):.2f}"
    if kind == "hours":
        return f"{value:.3f}"
    if kind == "kwh":
        return f"{value:.3f}"
    if kind == "ratio":
        return f"{value:.4f}"
    return str(value)
