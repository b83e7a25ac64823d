"""What ingest kept back, and writing it again once what was wrong is fixed.

:func:`summary` counts quarantined rows by kind and reason and shows the newest.
:func:`replay` rebuilds records from the rows' payloads (``quarantine.payload`` holds the
JSON of the record, as :func:`warehouse.ingest.sample_checks.record_payload` wrote it) and writes
them through the :class:`~warehouse.ingest.writer.Ingestor`, so they meet every check again: samples
of a GPU whose inventory has arrived since are written; rows still bad stay where they are.

How a row is written once, however often replay runs (and after a replay cut short):

- Replayed rows are *marked*, not moved: ``quarantine_replays`` names each quarantine row
  written (by its id, a hash of all its columns) and the replay batch it went in. The
  quarantine row stays as history; listings and later replays leave out the marked ones.
  Marking rather than deleting keeps ``quarantine`` append-only (no mutations, the same on a
  cluster), and the marks table doubles as the record of what replay did.
- Rows that fail again are neither marked nor quarantined a second time: replay asks the
  Ingestor first (:meth:`~warehouse.ingest.writer.Ingestor.verdicts`, the write path's own checks,
  nothing written) and writes only the rows that pass. So a still-bad row stays quarantined
  once, under its first reason, and a later replay tries it again.
- Each write has a deterministic batch id, ``replay:`` + a hash of the ids of the rows it
  writes, which is its deduplication token: a replay cut short between writing and marking,
  run again, finds the same rows and writes nothing twice. Samples are also looked up in
  ``gpu_samples`` by (cluster, GPU, MIG instance, time, source) first and only marked when
  there already (a batch retried after a failure part-way may have written a row that its
  first attempt quarantined).

Rows whose payload is not a record (a source's raw input such as a dcgm-exporter line, or a
payload cut at 64 KiB) cannot be replayed; they are counted and left alone. Configuration
kinds (tenants, quotas, prices) are not replayed: send them again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from collector.records import (
    ADDED_SAMPLE_COLUMNS,
    SAMPLE_SCHEMA,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    GpuSample,
    JobEvent,
    NodeInventory,
)
from gpuledger_errors import InputError
from warehouse import queries
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor, IngestResult, content_id

#: Kinds replay can rebuild, in the order :meth:`Ingestor.write` writes them (inventory first,
#: so that samples find their GPUs).
REPLAYABLE: dict[str, Any] = {
    "node_inventory": NodeInventory,
    "gpu_inventory": GpuInventory,
    "gpu_process": GpuProcess,
    "gpu_health": GpuHealth,
    "job_event": JobEvent,
    "gpu_sample": GpuSample,
}
PAGE_ROWS = 10_000  # quarantine rows read, checked and written at a time
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_TIMES = ("ts", "started_at")
_NUMERIC = {n for n, t in SAMPLE_SCHEMA.items() if t.is_numeric()}
_MARK_COLUMNS = ("replayed_at", "quarantine_id", "kind", "batch_id", "outcome")
_MARK_TYPES = (
    "DateTime64(3, 'UTC')",
    "UInt64",
    "LowCardinality(String)",
    "String",
    "LowCardinality(String)",
)


class QuarantineError(InputError):
    """A request the quarantine cannot answer (an unknown kind, a bad filter)."""


@dataclasses.dataclass(frozen=True)
class Filters:
    """Which quarantined rows: one kind ("" = any), rows whose reason contains ``reason``
    (case-insensitive; "" = any), received at or after ``since``."""

    kind: str = ""
    reason: str = ""
    since: dt.datetime | None = None

    def params(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "since": self.since or _EPOCH}

    def describe(self) -> str:
        parts = [f"kind {self.kind}"] if self.kind else []
        parts += [f"reason containing {self.reason!r}"] if self.reason else []
        parts += [f"since {self.since.isoformat()}"] if self.since else []
        return ", ".join(parts) or "all"


def summary(
    wh: Warehouse, filters: Filters, examples: int = 10
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(counts by kind and reason: quarantined, replayed, newest; the newest ``examples``
    rows still quarantined: received_at, kind, source, batch_id, field, value, reason,
    payload)."""
    counts = queries.run(wh, "quarantine_counts", **filters.params())
    newest = queries.run(wh, "quarantine_examples", limit=examples, **filters.params())
    return counts, newest


@dataclasses.dataclass
class ReplayReport:
    """What a replay wrote, found written, left quarantined (with today's reason) and could
    not rebuild (with why)."""

    dry_run: bool = False
    written: Counter[str] = dataclasses.field(default_factory=Counter)  # by table
    already_written: Counter[str] = dataclasses.field(default_factory=Counter)  # by kind
    still_quarantined: Counter[tuple[str, str]] = dataclasses.field(default_factory=Counter)
    not_replayable: Counter[tuple[str, str]] = dataclasses.field(default_factory=Counter)
    batch_ids: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "written": dict(self.written),
            "already_written": dict(self.already_written),
            "still_quarantined": [
                {"kind": k, "reason": r, "rows": n} for (k, r), n in self.still_quarantined.items()
            ],
            "not_replayable": [
                {"kind": k, "reason": r, "rows": n} for (k, r), n in self.not_replayable.items()
            ],
            "batch_ids": self.batch_ids,
        }


def replay(
    wh: Warehouse,
    ingestor: Ingestor,
    filters: Filters,
    *,
    dry_run: bool = False,
    page_rows: int = PAGE_ROWS,
) -> ReplayReport:
    """Write the quarantined rows that ``filters`` select and that pass ingest's checks now;
    see the module docstring. ``ingestor`` should have a fixed clock (``now``), so that its
    checks give the same answer before the write and during it."""
    if filters.kind and filters.kind not in REPLAYABLE:
        raise QuarantineError(
            f"rows of kind {filters.kind!r} cannot be replayed: the replayable kinds are "
            f"{', '.join(REPLAYABLE)} (configuration kinds: send them again)"
        )
    report = ReplayReport(dry_run=dry_run)
    for kind in [filters.kind] if filters.kind else list(REPLAYABLE):
        params = {**filters.params(), "kind": kind}
        pending = wh.rows(queries.sql("quarantine_pending_batches"), {"db": wh.database, **params})
        for page in _pages(pending, page_rows):
            rows = wh.rows(
                queries.sql("quarantine_pending_rows"),
                {"db": wh.database, **params, "batch_ids": page},
            )
            _replay_rows(wh, ingestor, kind, rows, report)
    if not dry_run and (report.written or report.already_written):
        _audit(wh, ingestor.now(), filters, report)
    return report


def _pages(batches: Sequence[tuple[Any, ...]], page_rows: int) -> list[list[str]]:
    """Batch ids in groups of about ``page_rows`` rows (a larger batch alone)."""
    pages: list[list[str]] = []
    size = 0
    for batch_id, rows in batches:
        if not pages or size + int(rows) > page_rows:
            pages.append([])
            size = 0
        pages[-1].append(str(batch_id))
        size += int(rows)
    return pages


def _replay_rows(
    wh: Warehouse,
    ingestor: Ingestor,
    kind: str,
    rows: Sequence[tuple[Any, ...]],
    report: ReplayReport,
) -> None:
    """Check, write and mark one page of quarantine rows of ``kind``."""
    ids: list[int] = []
    records: list[Any] = []
    for quarantine_id, *_rest, payload in rows:
        try:
            records.append(rebuild(kind, str(payload)))
        except ValueError as exc:
            report.not_replayable[(kind, str(exc))] += 1
            continue
        ids.append(int(quarantine_id))
    good: list[tuple[int, Any]] = []
    for qid, record, verdict in zip(ids, records, ingestor.verdicts(kind, records), strict=True):
        if verdict is None:
            good.append((qid, record))
        else:
            report.still_quarantined[(kind, verdict[2])] += 1
    there: list[tuple[int, Any]] = []
    todo = good
    if kind == "gpu_sample":
        present = _samples_present(wh, [r for _q, r in good])
        there = [(q, r) for q, r in good if _sample_key(r) in present]
        todo = [(q, r) for q, r in good if _sample_key(r) not in present]
    if there:
        report.already_written[kind] += len(there)
    if report.dry_run:
        if todo:
            report.written[_TABLE[kind]] += len(todo)
        return
    batch_id = "replay:" + content_id(*(q.to_bytes(8, "big") for q, _r in sorted(todo)))
    if todo:
        result = _WRITERS[kind](ingestor, [r for _q, r in todo], batch_id)
        report.written.update(result.written)
        report.batch_ids.append(batch_id)
    now = ingestor.now()
    marks = [(now, q, kind, batch_id, "written") for q, _r in todo]
    marks += [(now, q, kind, "", "already_written") for q, _r in there]
    if marks:
        token = f"{batch_id}:marks" if todo else "replay-marks:" + content_id(repr(there).encode())
        wh.insert_rows(
            "quarantine_replays",
            marks,
            _MARK_COLUMNS,
            _MARK_TYPES,
            settings={"insert_deduplication_token": token},
        )


_TABLE = {
    "node_inventory": "node_inventory_log",
    "gpu_inventory": "gpu_inventory_log",
    "gpu_process": "gpu_processes",
    "gpu_health": "gpu_health",
    "job_event": "job_events",
    "gpu_sample": "gpu_samples",
}
_WRITERS: dict[str, Callable[[Ingestor, list[Any], str], IngestResult]] = {
    "node_inventory": lambda i, r, b: i.write_nodes(r, b),
    "gpu_inventory": lambda i, r, b: i.write_gpus(r, b),
    "gpu_process": lambda i, r, b: i.write_processes(r, b),
    "gpu_health": lambda i, r, b: i.write_health(r, b),
    "job_event": lambda i, r, b: i.write_job_events(r, b),
    "gpu_sample": lambda i, r, b: i.write_samples(r, b),
}


def rebuild(kind: str, payload: str) -> Any:
    """The record of ``kind`` that a quarantine payload holds; ValueError (why) when it holds
    none. Times come back from ISO text, lists as tuples; a sample payload that ingest wrote
    as text (values of the wrong type) has its numbers read back from text."""
    cls = REPLAYABLE[kind]
    try:
        data = json.loads(payload)
    except json.JSONDecodeError:
        raise ValueError(
            "the payload is not a record (a source's raw input, or cut at 64 KiB)"
        ) from None
    # A sample quarantined before a column was added lacks it: null, as the source sent none.
    fields = set(cls._fields)
    later = set(ADDED_SAMPLE_COLUMNS) if kind == "gpu_sample" else set()
    if not isinstance(data, dict) or not (fields - later <= set(data) <= fields):
        raise ValueError(f"the payload is not a {kind} record")
    values = {}
    for name in cls._fields:
        value = data.get(name)
        if name in _TIMES and isinstance(value, str):
            with contextlib.suppress(ValueError):  # else text: the check says what is wrong
                value = dt.datetime.fromisoformat(value)
        elif isinstance(value, list):
            value = tuple(value)
        elif kind == "gpu_sample" and name in _NUMERIC and isinstance(value, str):
            value = _number(value)
        values[name] = value
    return cls(**values)


def _number(text: str) -> Any:
    if text == "None":
        return None
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


SampleKey = tuple[str, str, str, int, str]


def _sample_key(s: Any) -> SampleKey | None:
    if not isinstance(s.ts, dt.datetime) or s.ts.tzinfo is None:
        return None
    ms = (s.ts - _EPOCH) // dt.timedelta(milliseconds=1)  # as stored: DateTime64(3)
    return (s.cluster, s.gpu_uuid, s.mig_instance, ms, s.source)


def _samples_present(wh: Warehouse, samples: Sequence[GpuSample]) -> set[SampleKey | None]:
    """The keys of ``samples`` that ``gpu_samples`` already holds (one query)."""
    keys = [k for k in map(_sample_key, samples) if k is not None]
    if not keys:
        return set()
    ms = [k[3] for k in keys]
    rows = wh.rows(
        queries.sql("samples_present"),
        {
            "db": wh.database,
            "uuids": sorted({k[1] for k in keys}),
            "start": _EPOCH + dt.timedelta(milliseconds=min(ms)),
            "end": _EPOCH + dt.timedelta(milliseconds=max(ms)),
            "keys": keys,
        },
    )
    return {(str(c), str(u), str(m), int(t), str(s)) for c, u, m, t, s in rows}


def _audit(wh: Warehouse, now: dt.datetime, filters: Filters, report: ReplayReport) -> None:
    """One audit_log row per replay that wrote or marked anything."""
    detail = report.to_json()
    detail["batch_ids"] = report.batch_ids[:100]
    wh.audit(
        "gpuledger quarantine replay",
        "quarantine.replay",
        filters.describe(),
        json.dumps(detail, default=str),
        ts=now,
    )
