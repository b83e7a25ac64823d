"""The ledger: GPU-hours, idle time and cost attributed to tenants, to the cent.

The door every consumer uses: :func:`compute_ledger` returns a frozen :class:`Ledger`;
:func:`why_cost` explains a month's change; :func:`cost_breakdown` and :func:`job_costs` give
the same cents by several keys at once and per job; :func:`seal_days` keeps finished days.
"""

from warehouse.ledger.compute import compute_ledger
from warehouse.ledger.cost_change import CostChange, why_cost
from warehouse.ledger.detail import BreakdownRow, Detail, Hours, JobCost, cost_breakdown, job_costs
from warehouse.ledger.pricing import PriceBook, PriceEntry, load_price_book
from warehouse.ledger.result import (
    GROUPINGS,
    UNALLOCATED,
    CensoredHolds,
    EnergyReport,
    EnergyRow,
    IdlePolicy,
    IdleRule,
    Ledger,
    LedgerError,
    LedgerRow,
    LedgerTotals,
    UnallocatedLine,
    UnpricedHours,
    Window,
)
from warehouse.ledger.seal import SealReport, seal_days, start_sealer
from warehouse.ledger.usage import SOURCES

__all__ = [
    "GROUPINGS",
    "SOURCES",
    "UNALLOCATED",
    "BreakdownRow",
    "CensoredHolds",
    "CostChange",
    "Detail",
    "EnergyReport",
    "EnergyRow",
    "Hours",
    "IdlePolicy",
    "IdleRule",
    "JobCost",
    "Ledger",
    "LedgerError",
    "LedgerRow",
    "LedgerTotals",
    "PriceBook",
    "PriceEntry",
    "SealReport",
    "UnallocatedLine",
    "UnpricedHours",
    "Window",
    "compute_ledger",
    "cost_breakdown",
    "job_costs",
    "load_price_book",
    "seal_days",
    "start_sealer",
    "why_cost",
]
