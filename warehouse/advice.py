"""Scheduler advice, written and read back (table ``advice``).

One row per change: the proposal, then each change of its status (approved, applied,
rejected, superseded, withdrawn), each repeating the advice's fields, so the latest row of an
advice is its whole current state. Append-only: a change is a new row, never an update. The
advice in force at an instant is :func:`warehouse.analytics.alerts.current_advice`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from warehouse import queries
from warehouse.client import Warehouse

_LC = "LowCardinality(String)"
_TYPES = {
    "ts": "DateTime64(3, 'UTC')",
    "advice_id": "String",
    "kind": _LC,
    "cluster": _LC,
    "pool": _LC,
    "gpu_model": _LC,
    "from_tenant": _LC,
    "to_tenant": _LC,
    "gpus": "Float64",
    "job_ids": "Array(String)",
    "reason": "String",
    "payload": "String",
    "status": _LC,
}


@dataclasses.dataclass(frozen=True)
class AdviceRow:
    """One row of ``advice``: ``payload`` is the advice's numbers and changes as JSON."""

    ts: dt.datetime
    advice_id: str
    kind: str
    cluster: str
    pool: str
    gpu_model: str
    from_tenant: str
    to_tenant: str
    gpus: float
    job_ids: tuple[str, ...]
    reason: str
    payload: str
    status: str


assert tuple(_TYPES) == tuple(f.name for f in dataclasses.fields(AdviceRow))


def record_advice(wh: Warehouse, rows: Sequence[AdviceRow]) -> None:
    """Append ``rows`` (one insert)."""
    if not rows:
        return
    wh.insert_rows(
        "advice",
        [[list(v) if isinstance(v, tuple) else v for v in dataclasses.astuple(r)] for r in rows],
        tuple(_TYPES),
        tuple(_TYPES.values()),
    )


def advice_rows(wh: Warehouse, advice_id: str) -> list[AdviceRow]:
    """Every row of one advice, oldest first (none: no such advice)."""
    frame = queries.run(wh, "advice_rows", advice_id=advice_id)
    return [
        AdviceRow(**(r | {"job_ids": tuple(r["job_ids"])})) for r in frame.iter_rows(named=True)
    ]
