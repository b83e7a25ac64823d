"""The ledger's typed answer: what every consumer (CLI, dashboards, reports, scheduler hooks)
receives from :func:`warehouse.ledger.compute_ledger`, frozen so no consumer completes it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from decimal import Decimal
from typing import Any

from gpuledger_errors import InputError
from warehouse.times import END_INSTANT, FIRST_INSTANT

GROUPINGS = (
    "tenant",
    "org",
    "project",
    "user",
    "gpu_model",
    "pool",
    "node",
    "queue",
    "workload_type",
)
UNALLOCATED = "__unallocated__"


def grouping_keys(group_by: str) -> tuple[str, ...]:
    """The groupings ``group_by`` names: one of :data:`GROUPINGS`, or several joined by commas
    ("tenant,user,gpu_model"), whose rows are then every combination held."""
    keys = tuple(k.strip() for k in group_by.split(","))
    wrong = [k for k in keys if k not in GROUPINGS]
    if wrong or len(set(keys)) != len(keys):
        raise LedgerError(
            f"--by {group_by!r} is not one of {', '.join(GROUPINGS)}, nor several of them "
            "joined by commas without repeats (tenant,gpu_model)"
        )
    return keys


_DAY = dt.timedelta(days=1)


class LedgerError(InputError):
    """A ledger request that cannot be answered as asked (bad grouping, window, policy)."""


class IdlePolicy(enum.StrEnum):
    """How the cost of capacity nobody held is shared (OpenCost's share policies)."""

    WEIGHTED = "weighted"  # in proportion to each group's direct cost
    EVEN = "even"  # the same share for each group
    NONE = "none"  # kept on its own __unallocated__ line

    @classmethod
    def parse(cls, value: str | IdlePolicy) -> IdlePolicy:
        try:
            return cls(value)
        except ValueError:
            raise LedgerError(
                f"idle policy {value!r} is not one of {', '.join(p.value for p in cls)}"
            ) from None


@dataclasses.dataclass(frozen=True)
class IdleRule:
    """Allocated time counts as idle when utilisation stays under ``threshold_ratio`` (0-1)
    for at least ``min_duration_s`` seconds."""

    threshold_ratio: float = 0.05
    min_duration_s: int = 1800


@dataclasses.dataclass(frozen=True)
class Window:
    """The time the ledger covers, [start, end) in UTC. Built from days with :meth:`days`,
    where the last day is included, as the user typed it."""

    start: dt.datetime
    end: dt.datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise LedgerError("a window's start and end need a UTC offset")
        if self.end <= self.start:
            raise LedgerError(
                f"the window is empty: it ends ({self.last_day}) before it starts "
                f"({self.start.date()}); put --from before --to"
            )
        if self.start < FIRST_INSTANT or self.end > END_INSTANT:
            raise LedgerError(
                f"the window {self.start.date()} to {self.last_day} reaches outside the days "
                f"the warehouse holds: keep it within {FIRST_INSTANT.date()} to "
                f"{(END_INSTANT - _DAY).date()}"
            )

    @classmethod
    def days(cls, first: dt.date, last: dt.date) -> Window:
        """Midnight UTC of ``first`` to the end of ``last`` (included)."""
        if last < first:
            raise LedgerError(
                f"the window is empty: --to {last} is before --from {first}; put --from before --to"
            )
        if last >= END_INSTANT.date():  # its end would not be held (nor, near 9999, a date)
            raise LedgerError(
                f"--to {last} is after the days the warehouse holds: pick one up to "
                f"{(END_INSTANT - _DAY).date()}"
            )
        start = dt.datetime(first.year, first.month, first.day, tzinfo=dt.UTC)
        end = dt.datetime(last.year, last.month, last.day, tzinfo=dt.UTC) + _DAY
        return cls(start, end)

    @property
    def whole_days(self) -> bool:
        return self.start.time() == dt.time() and self.end.time() == dt.time()

    @property
    def first_day(self) -> dt.date:
        return self.start.date()

    @property
    def last_day(self) -> dt.date:
        """The last day the window touches (the inclusive end a user typed)."""
        return (self.end - dt.timedelta(microseconds=1)).date()

    def until(self, now: dt.datetime) -> dt.datetime:
        """The window's end cut at ``now``: running jobs and present GPUs count up to now,
        never into a future that has not happened."""
        return max(self.start, min(self.end, now))

    def to_json(self) -> dict[str, str]:
        if self.whole_days:
            return {"from": self.first_day.isoformat(), "to": self.last_day.isoformat()}
        return {"from": self.start.isoformat(), "to": self.end.isoformat()}


@dataclasses.dataclass(frozen=True)
class LedgerRow:
    """One group's line: its GPU-hours, and its cost (direct plus its share of unallocated)."""

    key: str
    allocated_gpu_hours: float
    used_gpu_hours: float | None  # None: no samples measured these hours
    idle_gpu_hours: float | None
    #: held in minutes without a utilisation sample: neither used nor idle is known there
    unmeasured_gpu_hours: float
    direct_cost: Decimal
    shared_cost: Decimal
    total_cost: Decimal
    unpriced_gpu_hours: float = 0.0  # held where the price book has no price: not in the cost
    #: under several groupings, each one's key ("(none)" where unset); ``key`` joins them by "/"
    parts: tuple[str, ...] = ()

    @property
    def efficiency(self) -> float | None:
        """Used ÷ allocated GPU-hours; None when nothing was measured or held."""
        if self.used_gpu_hours is None or not self.allocated_gpu_hours:
            return None
        return self.used_gpu_hours / self.allocated_gpu_hours


@dataclasses.dataclass(frozen=True)
class UnallocatedLine:
    """Under the ``none`` policy: the capacity nobody held and its cost, charged to no tenant."""

    gpu_hours: float
    cost: Decimal
    name: str = "unallocated capacity"


@dataclasses.dataclass(frozen=True)
class UnpricedHours:
    """GPU-hours of one (gpu_model, pool) that no price-book entry prices in the window."""

    gpu_model: str
    pool: str
    allocated_gpu_hours: float
    capacity_gpu_hours: float


@dataclasses.dataclass(frozen=True)
class CensoredHolds:
    """Allocations of one cluster that were still open when its source stopped observing (a
    trace's end): they are held up to ``observation_end`` and no further, since nothing is
    known after it. Their ``gpu_hours`` in the window are part of its allocated hours."""

    cluster: str
    allocations: int
    observation_end: dt.datetime
    gpu_hours: float

    def note(self) -> str:
        return (
            f"censored: {self.allocations:,} allocation(s) in cluster {self.cluster} were still "
            f"open when its observation ended at {self.observation_end:%Y-%m-%d %H:%M:%S} UTC; "
            f"they are held to then and no further ({self.gpu_hours:,.3f} GPU-hours)"
        )


@dataclasses.dataclass(frozen=True)
class LedgerTotals:
    capacity_gpu_hours: float | None  # None: the data has no inventory (a bare trace)
    healthy_gpu_hours: float | None
    unhealthy_gpu_hours: float | None
    allocated_gpu_hours: float
    used_gpu_hours: float | None
    idle_gpu_hours: float | None
    unmeasured_gpu_hours: float
    unallocated_gpu_hours: float | None
    stranded_gpu_hours: float | None  # None: several clusters, or nothing to measure
    unpriced_gpu_hours: float
    capacity_cost: Decimal | None
    unshared_cost: Decimal
    total_cost: Decimal


@dataclasses.dataclass(frozen=True)
class EnergyRow:
    key: str
    energy_kwh: float
    energy_cost: Decimal


@dataclasses.dataclass(frozen=True)
class EnergyReport:
    """Energy beside the GPU-hour ledger (from the GPUs' energy counters), priced per kWh."""

    rows: tuple[EnergyRow, ...]
    energy_kwh: float
    energy_cost: Decimal
    unpriced_kwh: float  # energy in hours with no energy_kwh price in effect

    def by_key(self) -> dict[str, EnergyRow]:
        return {r.key: r for r in self.rows}

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": [
                {
                    "key": r.key,
                    "energy_kwh": round(r.energy_kwh, 6),
                    "energy_cost": str(r.energy_cost),
                }
                for r in self.rows
            ],
            "energy_kwh": round(self.energy_kwh, 6),
            "energy_cost": str(self.energy_cost),
            "unpriced_kwh": round(self.unpriced_kwh, 6),
        }


@dataclasses.dataclass(frozen=True)
class Ledger:
    """GPU-hours, idle time and cost of ``window`` grouped by ``group_by``.

    ``computed_until`` is where the clock cut the window (``now`` when the window reaches
    into the future). Under the ``none`` policy the unallocated capacity's cost is the
    ``unallocated`` line, beside the rows; ``conserved`` says whether the rows and that line
    add up to capacity cost to the cent. ``unpriced`` names the hours the price book misses:
    they are in the hours but in no cost. ``censored`` names the allocations cut at a
    source's observation end. ``tenant`` set: one tenant's view (its lines alone, with the
    cents they carry in the whole ledger; nothing of the cluster's capacity or unallocated).
    """

    window: Window
    computed_until: dt.datetime
    group_by: str
    idle_policy: IdlePolicy
    idle_rule: IdleRule
    currency: str
    rows: tuple[LedgerRow, ...]
    totals: LedgerTotals
    unallocated: UnallocatedLine | None = None
    unpriced: tuple[UnpricedHours, ...] = ()
    energy: EnergyReport | None = None
    censored: tuple[CensoredHolds, ...] = ()
    tenant: str | None = None
    only: tuple[tuple[str, str], ...] = ()  # the line keys kept: (("pool", "a"),)

    @property
    def conserved(self) -> bool | None:
        """Rows plus the unallocated line equal capacity cost (None without inventory)."""
        if self.totals.capacity_cost is None:
            return None
        return self.totals.total_cost == self.totals.capacity_cost

    def conservation_note(self) -> str:
        """One sentence on whether the cost adds up, and what it leaves out."""
        if self.tenant is not None or self.only:
            part = [f"tenant {self.tenant}"] if self.tenant is not None else []
            part += [f"{k} {v}" for k, v in self.only]
            note = (
                f"conservation: n/a (the lines of {', '.join(part)} alone; the whole ledger "
                "adds up to capacity cost)"
            )
        elif self.conserved is None:
            note = "conservation: n/a (no GPU inventory in the window to cost capacity by)"
        else:
            verdict = "holds" if self.conserved else "DOES NOT HOLD"
            note = f"conservation: rows + unallocated = capacity cost: {verdict}"
        missing = [u for u in self.unpriced if u.allocated_gpu_hours or u.capacity_gpu_hours]
        if missing:
            hours = sum(max(u.allocated_gpu_hours, u.capacity_gpu_hours) for u in missing)
            what = ", ".join(
                f"{u.gpu_model or '(no model)'} in {u.pool or '(no pool)'}" for u in missing
            )
            note += (
                f"; {hours:,.3f} GPU-hours have no price ({what}) and are in no cost: "
                "add them to the price book"
            )
        return note

    def row(self, key: str) -> LedgerRow | None:
        return next((r for r in self.rows if r.key == key), None)

    def to_json(self) -> dict[str, Any]:
        t = self.totals
        doc: dict[str, Any] = {
            **self.window.to_json(),
            "computed_until": self.computed_until.isoformat(),
            "by": self.group_by,
            "idle_policy": self.idle_policy.value,
            "idle_threshold_ratio": self.idle_rule.threshold_ratio,
            "idle_min_duration_s": self.idle_rule.min_duration_s,
            "currency": self.currency,
            "tenant": self.tenant,
            "only": dict(self.only),
            "rows": [
                {
                    "key": r.key,
                    "allocated_gpu_hours": _hours(r.allocated_gpu_hours),
                    "used_gpu_hours": _hours(r.used_gpu_hours),
                    "idle_gpu_hours": _hours(r.idle_gpu_hours),
                    "unmeasured_gpu_hours": _hours(r.unmeasured_gpu_hours),
                    "direct_cost": _money(r.direct_cost),
                    "shared_cost": _money(r.shared_cost),
                    "total_cost": _money(r.total_cost),
                    "unpriced_gpu_hours": _hours(r.unpriced_gpu_hours),
                    **({"parts": list(r.parts)} if r.parts else {}),
                }
                for r in self.rows
            ],
            "unallocated": None
            if self.unallocated is None
            else {
                "name": self.unallocated.name,
                "gpu_hours": _hours(self.unallocated.gpu_hours),
                "cost": _money(self.unallocated.cost),
            },
            "unpriced": [
                {
                    "gpu_model": u.gpu_model,
                    "pool": u.pool,
                    "allocated_gpu_hours": _hours(u.allocated_gpu_hours),
                    "capacity_gpu_hours": _hours(u.capacity_gpu_hours),
                }
                for u in self.unpriced
            ],
            "totals": {
                f.name: (_money(v) if isinstance(v, Decimal) else _hours(v))
                for f in dataclasses.fields(t)
                for v in (getattr(t, f.name),)
            },
            "conserved": self.conserved,
            "conservation": self.conservation_note(),
            "censored": [
                {
                    "cluster": c.cluster,
                    "allocations": c.allocations,
                    "observation_end": c.observation_end.isoformat(),
                    "gpu_hours": _hours(c.gpu_hours),
                }
                for c in self.censored
            ],
        }
        if self.energy is not None:
            doc["energy"] = self.energy.to_json()
        return doc


def _money(v: Decimal | None) -> str | None:
    return None if v is None else str(v)


def _hours(v: float | None) -> float | None:
    return None if v is None else round(v, 6)
