"""What a rule finds: one :class:`Finding` per rule and subject whose condition holds now.

A finding names its subject (the GPUs, node, jobs and tenant), since when the condition has
held, what it has cost so far, and the dashboard page to look at; its ``key`` is stable for as
long as the same rule holds for the same subject, so that evaluations a minute apart find the
same alert. It turns into JSON and back, so that the alert history can rebuild it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from reports.alerts.rules import SEVERITY, TITLES, duration_text


@dataclasses.dataclass(frozen=True)
class Finding:
    """One rule holding for one subject at ``at``."""

    rule: str
    key: str
    cluster: str
    subject: str  # who or what, in a few words: "GPU GPU-a on n1 held by job j1 of ml/vision"
    summary: str  # the whole condition, with its numbers, in one line
    at: dt.datetime
    since: dt.datetime | None
    node: str = ""
    gpus: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()
    tenant: str = ""
    cost: Decimal | None = None
    currency: str = ""
    value: float | None = None
    threshold: float | None = None
    link: str = ""
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def severity(self) -> str:
        return SEVERITY.get(self.rule, "warning")

    @property
    def title(self) -> str:
        return TITLES.get(self.rule, self.rule)

    @property
    def duration_s(self) -> float | None:
        return None if self.since is None else max(0.0, (self.at - self.since).total_seconds())

    def to_json(self) -> dict[str, Any]:
        """Plain types: times in ISO 8601, money as a string."""
        doc = dataclasses.asdict(self)
        for name in ("at", "since"):
            doc[name] = None if doc[name] is None else doc[name].isoformat()
        doc["cost"] = None if self.cost is None else str(self.cost)
        doc["gpus"], doc["jobs"] = list(self.gpus), list(self.jobs)
        doc["facts"] = plain(self.facts)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Finding:
        """The finding :meth:`to_json` wrote (keys it does not know are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in doc.items() if k in names}
        for name in ("at", "since"):
            if values.get(name) is not None:
                values[name] = dt.datetime.fromisoformat(values[name])
        if values.get("cost") is not None:
            values["cost"] = Decimal(values["cost"])
        values["gpus"] = tuple(values.get("gpus") or ())
        values["jobs"] = tuple(values.get("jobs") or ())
        return cls(**values)


def plain(value: Any) -> Any:
    """``value`` in the types JSON holds: times in ISO 8601, decimals as strings."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value


def when(ts: dt.datetime | None) -> str:
    return "an unknown time" if ts is None else f"{ts.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"


def money(cost: Decimal | None, currency: str) -> str:
    return (
        "not priced (no price for it in the price book)" if cost is None else f"{currency} {cost}"
    )


def total(costs: Sequence[Decimal | None]) -> Decimal | None:
    """The sum of the priced ``costs`` (None when none is priced)."""
    priced = [c for c in costs if c is not None]
    return sum(priced, Decimal(0)) if priced else None


def listed(items: Sequence[str], most: int = 5) -> str:
    """``a, b, c`` or ``a, b, c, d, e and 3 more``."""
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def lasted(since: dt.datetime | None, at: dt.datetime) -> str:
    return "an unknown time" if since is None else duration_text((at - since).total_seconds())
