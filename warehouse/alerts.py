"""The alert history and the notices' outbox, written and read back.

``alerts`` keeps one row per notice of an alert (fired, repeated after the cooldown, resolved):
the history, and what a restarted process rebuilds its open alerts from (an alert is open while
its latest row is not resolved). ``alert_outbox`` keeps the notices a notifier has not taken
yet, one row per change, so that a notifier that is down gets them when it comes back, after a
restart too. Both are append-only: a change is a new row, never an update.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from decimal import Decimal

from warehouse import queries
from warehouse.client import Warehouse

#: Alert states after which an alert is no longer open.
CLOSED_STATES = ("resolved", "closed")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_TS = "DateTime64(3, 'UTC')"
_LC = "LowCardinality(String)"


@dataclasses.dataclass(frozen=True)
class AlertRow:
    """One row of ``alerts``: a notice of one alert (``alert_id``: one firing of the rule and
    subject that ``alert_key`` names, up to its resolution)."""

    ts: dt.datetime
    alert_id: str
    alert_key: str
    rule: str
    severity: str
    state: str  # firing | resolved
    event: str  # fired | repeated | resolved
    cluster: str
    node: str
    gpu_uuid: str
    job_id: str
    tenant: str
    value: float | None
    threshold: float | None
    since: dt.datetime | None
    cost: Decimal | None
    currency: str
    message: str
    url: str
    gpus: tuple[str, ...]
    jobs: tuple[str, ...]
    notified: tuple[str, ...]  # the notifiers it was sent to (delivery: alert_outbox)
    details: str = "{}"  # the finding as JSON


_ALERT_TYPES = {
    "ts": _TS,
    "alert_id": "String",
    "alert_key": "String",
    "rule": _LC,
    "severity": _LC,
    "state": _LC,
    "event": _LC,
    "cluster": _LC,
    "node": _LC,
    "gpu_uuid": _LC,
    "job_id": "String",
    "tenant": _LC,
    "value": "Nullable(Float64)",
    "threshold": "Nullable(Float64)",
    "since": f"Nullable({_TS})",
    "cost": "Nullable(Decimal(18, 2))",
    "currency": _LC,
    "message": "String",
    "url": "String",
    "gpus": "Array(String)",
    "jobs": "Array(String)",
    "notified": "Array(String)",
    "details": "String",
}
assert tuple(_ALERT_TYPES) == tuple(f.name for f in dataclasses.fields(AlertRow))


def record_alerts(wh: Warehouse, rows: Sequence[AlertRow]) -> None:
    """Append ``rows`` to the history (one insert)."""
    if not rows:
        return
    wh.insert_rows(
        "alerts",
        [[list(v) if isinstance(v, tuple) else v for v in dataclasses.astuple(r)] for r in rows],
        tuple(_ALERT_TYPES),
        tuple(_ALERT_TYPES.values()),
    )


@dataclasses.dataclass(frozen=True)
class OpenAlertRow:
    """An alert whose latest row is not resolved, as a restarted process picks it up."""

    alert_id: str
    key: str
    rule: str
    opened: dt.datetime  # its first row: when it fired
    last_notice: dt.datetime  # its latest row: when anyone was last told
    notified: tuple[str, ...]
    details: str


def open_alert_rows(wh: Warehouse) -> list[OpenAlertRow]:
    """The alerts open now (their latest row is not resolved), oldest first."""
    frame = queries.run(wh, "alerts_open_latest", closed=list(CLOSED_STATES))
    return [
        OpenAlertRow(
            r["alert_id"],
            r["key"],
            r["last_rule"],
            r["opened_ts"],
            r["last_ts"],
            tuple(r["last_notified"]),
            r["last_details"],
        )
        for r in frame.iter_rows(named=True)
    ]


def alert_history(
    wh: Warehouse,
    *,
    since: dt.datetime | None = None,
    rule: str = "",
    cluster: str = "",
    open_only: bool = False,
    limit: int = 100,
) -> list[AlertRow]:
    """The history's rows at or after ``since``, newest first (at most ``limit``), of one
    ``rule`` and ``cluster`` ('' for all); with ``open_only``, those of the open alerts."""
    frame = queries.run(
        wh,
        "alerts_history",
        since=since or _EPOCH,
        rule=rule,
        cluster=cluster,
        open_only=open_only,
        closed=list(CLOSED_STATES),
        limit=limit,
    )
    return [
        AlertRow(
            **{
                **r,
                "gpus": tuple(r["gpus"]),
                "jobs": tuple(r["jobs"]),
                "notified": tuple(r["notified"]),
            }
        )
        for r in frame.iter_rows(named=True)
    ]


@dataclasses.dataclass(frozen=True)
class OutboxRow:
    """One change of one notice for one notifier: queued, a failed try, delivered, given up.
    ``version`` orders the changes of a notice (the highest is its state)."""

    notifier: str
    message_id: str
    alert_id: str
    created_ts: dt.datetime
    ts: dt.datetime
    state: str  # pending | delivered | expired
    attempts: int
    next_try_ts: dt.datetime
    last_error: str
    payload: str  # the notice as JSON
    version: int


_OUTBOX_TYPES = {
    "notifier": _LC,
    "message_id": "String",
    "alert_id": "String",
    "created_ts": _TS,
    "ts": _TS,
    "state": _LC,
    "attempts": "UInt32",
    "next_try_ts": _TS,
    "last_error": "String",
    "payload": "String",
    "version": "UInt64",
}
assert tuple(_OUTBOX_TYPES) == tuple(f.name for f in dataclasses.fields(OutboxRow))


def record_outbox(wh: Warehouse, rows: Sequence[OutboxRow]) -> None:
    """Append changes of notices to the outbox (one insert)."""
    if rows:
        wh.insert_rows(
            "alert_outbox",
            [dataclasses.astuple(r) for r in rows],
            tuple(_OUTBOX_TYPES),
            tuple(_OUTBOX_TYPES.values()),
        )


def pending_outbox(wh: Warehouse) -> list[OutboxRow]:
    """The notices some notifier has not taken yet (their latest change), oldest first."""
    frame = queries.run(wh, "alert_outbox_pending")
    return [
        OutboxRow(
            r["notifier"],
            r["message_id"],
            r["last_alert_id"],
            r["created"],
            r["last_ts"],
            r["last_state"],
            r["last_attempts"],
            r["next_try"],
            r["error"],
            r["last_payload"],
            r["last_version"],
        )
        for r in frame.iter_rows(named=True)
    ]
