"""Audit entries kept until the warehouse can take them.

An entry the command line cannot write when it happens (no process may open the warehouse then;
see :mod:`gpuledger.audit_trail`) waits in a JSON file in the data directory
(``audit-pending.json``, mode 0600, changed under a lock like the credentials files). The next
process that opens the warehouse writes what waits there into ``audit_log`` and removes the file,
under the same lock. Each entry is written once: one the log holds already (its writer stopped
between writing it and removing the file) is not written again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

from gpuledger.lockedfile import changing
from warehouse.audit import AuditEntry, recorded
from warehouse.client import Warehouse

#: The longest field an entry sent or kept may have, in characters.
MAX_FIELD_CHARS = 10_000


def new_entry(actor: str, action: str, obj: str, detail: str, outcome: str = "ok") -> AuditEntry:
    """An entry made now, to the millisecond the audit log keeps."""
    now = dt.datetime.now(dt.UTC)
    ts = now.replace(microsecond=now.microsecond // 1000 * 1000)
    return AuditEntry(ts, actor, action, obj, outcome, detail)


def as_json(entry: AuditEntry) -> dict[str, str]:
    return {**dataclasses.asdict(entry), "ts": entry.ts.isoformat(timespec="milliseconds")}


def from_json(doc: Any) -> AuditEntry:
    """The entry ``doc`` holds; ValueError when it is not one (a field missing, not text, too
    long, or a time without its offset)."""
    names = [f.name for f in dataclasses.fields(AuditEntry)]
    if not isinstance(doc, dict) or sorted(doc) != sorted(names):
        raise ValueError(f"an audit entry has the fields {', '.join(names)}")
    if not all(isinstance(doc[n], str) and len(doc[n]) <= MAX_FIELD_CHARS for n in names):
        raise ValueError(f"an audit entry's fields are text of at most {MAX_FIELD_CHARS} chars")
    ts = dt.datetime.fromisoformat(doc["ts"])
    if ts.tzinfo is None:
        raise ValueError(f"an audit entry's time {doc['ts']!r} has no offset")
    return AuditEntry(**{**doc, "ts": ts.astimezone(dt.UTC)})


def write(wh: Warehouse, entry: AuditEntry) -> None:
    wh.audit(entry.actor, entry.action, entry.object, entry.detail, entry.outcome, entry.ts)


def keep(path: Path, entry: AuditEntry) -> None:
    """Keep ``entry`` in ``path`` for the next process that opens the warehouse."""
    with changing(path, "entries") as entries:
        entries.append(as_json(entry))


def drain(wh: Warehouse, path: Path) -> int:
    """Write the entries kept in ``path`` into ``wh``'s audit log, each once, and remove the
    file; how many were kept. When one cannot be written, the file stays as it was (those
    written meanwhile are not written again). An entry damaged by hand is written as what it
    says (action ``audit.damaged``), so that nothing is dropped."""
    if not path.exists():
        return 0
    with changing(path, "entries", remove_empty=True) as entries:
        kept = len(entries)
        for doc in entries:
            try:
                entry = from_json(doc)
            except ValueError as exc:
                said = f"{exc}: {json.dumps(doc, ensure_ascii=False)}"[:MAX_FIELD_CHARS]
                entry = new_entry("gpuledger", "audit.damaged", str(path), said, "failed")
            if not recorded(wh, entry):
                write(wh, entry)
        entries.clear()
    return kept
