"""The ledger: GPU-hours, idle time and cost attributed to tenants, to the cent.

The door every consumer uses: :func:`compute_ledger` returns a frozen :class:`Ledger`;
:func:`why_cost` explains a month's change; :func:`seal_days` keeps finished days;
:func:`idle_report` and :func:`idle_now` tell the idle allocated GPUs and their cost.
:func:`cost_breakdown` and :func:`job_costs` give the same cents by several keys at
once and per job (:func:`job_table`: the jobs as one frame). :func:`warm_lines` makes the
lines of the windows the pages open on, once per pass of the live tail.
"""

from warehouse.ledger.compute import compute_ledger, warm_lines
from warehouse.ledger.cost_change import CostChange, month_window, why_cost
from warehouse.ledger.detail import (
    BreakdownRow,
    Detail,
    Hours,
    JobCost,
    JobTable,
    cost_breakdown,
    job_costs,
    job_table,
)
from warehouse.ledger.idle import (
    WORST,
    IdleDay,
    IdleJob,
    IdleNow,
    IdleReport,
    UsageDay,
    idle_now,
    idle_report,
    priced_spans,
    usage_days,
)
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
    grouping_keys,
)
from warehouse.ledger.seal import SealReport, first_data, seal_days, start_sealer
from warehouse.ledger.usage import SOURCES

__all__ = [
    "GROUPINGS",
    "SOURCES",
    "UNALLOCATED",
    "WORST",
    "BreakdownRow",
    "CensoredHolds",
    "CostChange",
    "Detail",
    "EnergyReport",
    "EnergyRow",
    "Hours",
    "IdleDay",
    "IdleJob",
    "IdleNow",
    "IdlePolicy",
    "IdleReport",
    "IdleRule",
    "JobCost",
    "JobTable",
    "Ledger",
    "LedgerError",
    "LedgerRow",
    "LedgerTotals",
    "PriceBook",
    "PriceEntry",
    "SealReport",
    "UnallocatedLine",
    "UnpricedHours",
    "UsageDay",
    "Window",
    "compute_ledger",
    "cost_breakdown",
    "first_data",
    "grouping_keys",
    "idle_now",
    "idle_report",
    "job_costs",
    "job_table",
    "load_price_book",
    "month_window",
    "priced_spans",
    "seal_days",
    "start_sealer",
    "usage_days",
    "warm_lines",
    "why_cost",
]
