"""The audit log, read back: who did what, when, to which object, and how it went.

Entries are written by :meth:`warehouse.client.Warehouse.audit` (append-only: the table is
never updated or deleted by gpuledger). Actions are dotted names (``sql.write``,
``demo.start``); asking for ``sql`` lists every ``sql.*`` action.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from warehouse import queries
from warehouse.client import Warehouse

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class AuditEntry:
    ts: dt.datetime
    actor: str
    action: str
    object: str
    outcome: str
    detail: str


def audit_entries(
    wh: Warehouse,
    *,
    since: dt.datetime | None = None,
    who: str = "",
    action: str = "",
    limit: int = 1000,
) -> list[AuditEntry]:
    """The entries at or after ``since`` (all when None), newest first, by ``who`` and
    ``action`` (an action or a dotted prefix of actions) when given."""
    frame = queries.run(
        wh,
        "audit_entries",
        since=since or _EPOCH,
        who=who,
        action=action,
        prefix=action + "." if action else "",
        limit=limit,
    )
    return [AuditEntry(**row) for row in frame.iter_rows(named=True)]


def recorded(wh: Warehouse, entry: AuditEntry) -> bool:
    """Whether the audit log holds ``entry`` already (the same time, to the millisecond, and
    the same words)."""
    params = dataclasses.asdict(entry)
    count = wh.rows(queries.sql("audit_recorded"), {"db": wh.database, **params})[0][0]
    return bool(count)
