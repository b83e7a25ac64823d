"""Typed, batched, idempotent ingest with quarantine.

Every batch is validated before it is written. Rows that fail go to ``quarantine`` with the
field, the value and the reason, and are counted in the result; nothing is dropped silently.
Each insert carries an ``insert_deduplication_token`` derived from the batch id (by default
a hash of the batch's content), and the tables keep a deduplication window, so re-sending a
batch after a timeout writes nothing twice — the rollups included.

Samples older than the raw retention are quarantined rather than inserted: ClickHouse would
drop them from ``gpu_samples`` at insert (TTL) while still feeding them to the rollup views,
and the rollups would then disagree with the raw data. GPU processes and GPU health go to raw
tables with the same TTL (and no rollups); their old rows are refused the same way, with the
same reason, so that no row is dropped silently at insert. The per-record checks are in
:mod:`warehouse.checks`.

:meth:`Ingestor.write_group` writes several batches with one insert per table (the server
coalesces agents' batches that way); rows, quarantine and allocations come out as if each
batch had been written alone.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import decimal
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import polars as pl

from collector.records import (
    SAMPLE_SCHEMA,
    Batch,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    GpuSample,
    JobEvent,
    NodeInventory,
    Price,
    Quota,
    Reject,
    Tenant,
    TenantRule,
)

from . import queries
from .checks import (
    RawWindow,
    check_event,
    check_gpu,
    check_health,
    check_node,
    check_price,
    check_process,
    check_quota,
    check_rule,
    check_tenant,
)
from .client import Warehouse, WarehouseError
from .sample_checks import (
    Rejects,
    coerce_samples,
    record_payload,
    sample_problems,
    validate_samples,
)

_QUARANTINE_COLUMNS = (
    "received_at",
    "source",
    "kind",
    "batch_id",
    "field",
    "value",
    "reason",
    "payload",
)
_SAMPLE_SCHEMA = pl.Schema(SAMPLE_SCHEMA)
Check = Callable[[Any], tuple[str, str, str] | None]


@dataclasses.dataclass
class IngestResult:
    """What one call wrote: rows per table, and rows quarantined per reason."""

    written: Counter[str] = dataclasses.field(default_factory=Counter)
    quarantined: Counter[str] = dataclasses.field(default_factory=Counter)

    def __iadd__(self, other: IngestResult) -> IngestResult:
        self.written.update(other.written)
        self.quarantined.update(other.quarantined)
        return self

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())


def content_id(*parts: bytes) -> str:
    """A stable id for a batch from its content: the same rows give the same id."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


class Ingestor:
    """Writes batches of records into the warehouse; one per process, shared across threads.

    ``now`` is a parameter so that tests and backfills can fix the clock that the retention
    and future-skew checks use.
    """

    def __init__(
        self,
        wh: Warehouse,
        raw_retention_days: int,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ):
        self.wh = wh
        self.raw_retention = dt.timedelta(days=raw_retention_days)
        self.now = now
        self._types: dict[str, dict[str, str]] = {}

    # -- table metadata (one round trip per table per process) --------------------------------
    def _column_types(self, table: str) -> dict[str, str]:
        if table not in self._types:
            rows = self.wh.rows(
                "SELECT name, type FROM system.columns WHERE database = {db:String} "
                "AND table = {t:String} AND default_kind NOT IN ('MATERIALIZED', 'ALIAS') "
                "ORDER BY position",
                {"db": self.wh.database, "t": table},
            )
            if not rows:
                raise WarehouseError(
                    f"table {self.wh.database}.{table} does not exist: run `gpuledger db "
                    "migrate` (or check warehouse.database)"
                )
            self._types[table] = dict(rows)
        return self._types[table]

    def _insert(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], token: str
    ) -> None:
        if not rows:
            return
        types = self._column_types(table)
        self.wh.insert_rows(
            table, rows, columns, [types[c] for c in columns], settings=_dedup(token)
        )

    # -- quarantine ---------------------------------------------------------------------------
    def quarantine(
        self,
        kind: str,
        batch_id: str,
        rejects: Sequence[tuple[str, str, str, str]],
        source: str = "",
    ) -> None:
        """Keep rejected input: ``rejects`` holds (field, value, reason, payload) tuples."""
        rows = _quarantine_rows(self.now(), kind, batch_id, source, rejects)
        self._insert("quarantine", _QUARANTINE_COLUMNS, rows, f"{batch_id}:quarantine:{kind}")

    # -- samples ------------------------------------------------------------------------------
    def write_samples(
        self, samples: pl.DataFrame | Sequence[GpuSample], batch_id: str | None = None
    ) -> IngestResult:
        """Validate and insert GPU samples (a frame with SAMPLE_SCHEMA's columns, or records)."""
        frame, rejects = coerce_samples(samples)
        good, bad = validate_samples(frame, self.now(), self.raw_retention)
        rejects.extend(bad)
        if batch_id is None:
            batch_id = content_id(
                good.hash_rows(seed=7).to_numpy().tobytes(), repr(rejects).encode()
            )
        result = IngestResult()
        if good.height:
            self.wh.insert_arrow(
                "gpu_samples", good.to_arrow(), settings=_dedup(f"{batch_id}:samples")
            )
            result.written["gpu_samples"] += good.height
        if rejects:
            self.quarantine(
                "gpu_sample",
                batch_id,
                rejects,
                source=str(frame["source"][0]) if frame.height else "",
            )
            result.quarantined.update(r[2] for r in rejects)
        return result

    # -- records of low volume: validated one by one ------------------------------------------
    def _write_records(
        self,
        kind: str,
        table: str,
        records: Sequence[Any],
        check: Callable[[Any], tuple[str, str, str] | None],
        row: Callable[[Any], Sequence[Any]],
        columns: Sequence[str],
        batch_id: str | None,
    ) -> IngestResult:
        result = IngestResult()
        if not records:
            return result
        if batch_id is None:
            batch_id = content_id(repr(list(records)).encode())
        good, rejects = _split_records(records, check, row)
        self._insert(table, columns, good, f"{batch_id}:{table}")
        result.written[table] += len(good)
        if rejects:
            self.quarantine(kind, batch_id, rejects)
            result.quarantined.update(r[2] for r in rejects)
        return result

    def _checks(self, now: dt.datetime) -> dict[str, Check]:
        """The check of each record kind (by Batch field), against the clock ``now``."""
        processes = RawWindow(now, self.raw_retention, "gpu_processes")
        health = RawWindow(now, self.raw_retention, "gpu_health")
        return {
            "nodes": check_node,
            "gpus": check_gpu,
            "processes": lambda r: check_process(r, processes),
            "health": lambda r: check_health(r, health),
            "job_events": check_event,
        }

    def _write_kind(self, attr: str, records: Sequence[Any], batch_id: str | None) -> IngestResult:
        _attr, _suffix, kind, table, columns, row = _RECORD_KINDS[attr]
        check = self._checks(self.now())[attr]
        return self._write_records(kind, table, records, check, row, columns, batch_id)

    def write_gpus(
        self, records: Sequence[GpuInventory], batch_id: str | None = None
    ) -> IngestResult:
        return self._write_kind("gpus", records, batch_id)

    def write_nodes(
        self, records: Sequence[NodeInventory], batch_id: str | None = None
    ) -> IngestResult:
        return self._write_kind("nodes", records, batch_id)

    def write_job_events(
        self, records: Sequence[JobEvent], batch_id: str | None = None
    ) -> IngestResult:
        """Insert job events, then re-derive the allocation intervals of the jobs they touch.

        The intervals are computed in SQL from all of a job's events (``derive_allocations``),
        so events that arrive late, out of order or twice give the same intervals.
        """
        result = self._write_kind("job_events", records, batch_id)
        self._derive_allocations(records)
        return result

    def _derive_allocations(self, events: Iterable[JobEvent]) -> None:
        jobs = sorted({(e.cluster, e.job_id) for e in events if check_event(e) is None})
        for start in range(0, len(jobs), 5000):
            self.wh.command(
                queries.sql("derive_allocations"),
                {"db": self.wh.database, "jobs": jobs[start : start + 5000]},
            )

    def write_processes(
        self, records: Sequence[GpuProcess], batch_id: str | None = None
    ) -> IngestResult:
        """Validate and insert the compute processes seen on each GPU into ``gpu_processes``."""
        return self._write_kind("processes", records, batch_id)

    def write_health(
        self, records: Sequence[GpuHealth], batch_id: str | None = None
    ) -> IngestResult:
        """Validate and insert GPU health counters (throttling, ECC, remapping) into
        ``gpu_health``."""
        return self._write_kind("health", records, batch_id)

    # -- configuration ------------------------------------------------------------------------
    def write_config(
        self,
        tenants: Iterable[Tenant] = (),
        rules: Iterable[TenantRule] = (),
        quotas: Iterable[Quota] = (),
        prices: Iterable[Price] = (),
    ) -> IngestResult:
        """Insert tenants, tenant rules, quotas and prices (the latest version of each wins)."""
        now = self.now()
        result = IngestResult()
        for table, kind, records, check in (
            ("tenants", "tenant", list(tenants), check_tenant),
            ("tenant_rules", "tenant_rule", list(rules), check_rule),
            ("quotas", "quota", list(quotas), check_quota),
            ("price_book", "price", list(prices), check_price),
        ):
            if not records:
                continue
            fields = type(records[0])._fields
            result += self._write_records(
                kind,
                table,
                records,
                check,
                lambda r: (*_config_row(r), now),
                (*fields, "updated_at"),
                content_id(repr(records).encode(), str(now).encode()),
            )
        return result

    def write(self, batch: Batch, batch_id: str | None = None) -> IngestResult:
        """Write every kind in ``batch``; inventory first, so samples find their GPUs."""
        result = IngestResult()
        suffix = (lambda k: f"{batch_id}:{k}") if batch_id else (lambda k: None)
        if batch.nodes:
            result += self.write_nodes(batch.nodes, suffix("nodes"))
        if batch.gpus:
            result += self.write_gpus(batch.gpus, suffix("gpus"))
        if batch.processes:
            result += self.write_processes(batch.processes, suffix("processes"))
        if batch.health:
            result += self.write_health(batch.health, suffix("health"))
        if batch.job_events:
            result += self.write_job_events(batch.job_events, suffix("events"))
        if len(batch.samples):
            result += self.write_samples(batch.samples, suffix("samples"))
        if batch.rejects:
            result += self.write_rejects(batch.rejects, suffix("rejects"))
        return result

    def write_rejects(self, rejects: Sequence[Reject], batch_id: str | None = None) -> IngestResult:
        """Quarantine what a source could not parse (see ``collector.records.Reject``)."""
        batch_id = batch_id or content_id(repr(list(rejects)).encode())
        result = IngestResult()
        for (kind, source), rows in _rejects_by_source(rejects).items():
            self.quarantine(kind, f"{batch_id}:{source}", rows, source=source)
            result.quarantined.update(row[2] for row in rows)
        return result

    # -- several batches, one insert per table ------------------------------------------------
    def write_group(self, members: Sequence[tuple[str, Batch]], token: str) -> IngestResult:
        """Write several batches (``(batch id, batch)`` pairs) with one insert per table.

        Every insert carries a deduplication token derived from ``token``, so writing the same
        group again writes nothing twice. What is written and quarantined is what
        :meth:`write` would write for each batch alone: a reject keeps the id of the batch it
        came in (with the same suffix), and job events re-derive the allocations of every job
        they touch. Tables are written in :meth:`write`'s order; quarantine comes last.
        """
        now = self.now()
        result = IngestResult()
        held: list[tuple[Any, ...]] = []

        def keep(kind: str, batch_id: str, source: str, rejects: Rejects) -> None:
            held.extend(_quarantine_rows(now, kind, batch_id, source, rejects))
            result.quarantined.update(r[2] for r in rejects)

        checks = self._checks(now)
        for attr, suffix, kind, table, columns, row in _RECORD_KINDS.values():
            good: list[Sequence[Any]] = []
            for member, batch in members:
                rows, rejects = _split_records(getattr(batch, attr), checks[attr], row)
                good.extend(rows)
                if rejects:
                    keep(kind, f"{member}:{suffix}", "", rejects)
            self._insert(table, columns, good, f"{token}:{table}")
            if good:
                result.written[table] += len(good)
            if attr == "job_events":
                self._derive_allocations(e for _m, b in members for e in b.job_events)
        samples = self._group_samples(members, now, keep)
        if samples.height:
            self.wh.insert_arrow(
                "gpu_samples", samples.to_arrow(), settings=_dedup(f"{token}:gpu_samples")
            )
            result.written["gpu_samples"] += samples.height
        for member, batch in members:
            for (kind, source), unparsed in _rejects_by_source(batch.rejects).items():
                keep(kind, f"{member}:rejects:{source}", source, unparsed)
        self._insert("quarantine", _QUARANTINE_COLUMNS, held, f"{token}:quarantine")
        return result

    def _group_samples(
        self,
        members: Sequence[tuple[str, Batch]],
        now: dt.datetime,
        keep: Callable[[str, str, str, Rejects], None],
    ) -> pl.DataFrame:
        """The valid samples of all ``members`` in one frame (validated once, together);
        rejects go to ``keep`` under the id of the batch they came in."""
        frames: list[pl.DataFrame] = []
        owners: list[tuple[str, str]] = []
        ends: list[int] = []
        for member, batch in members:
            if not len(batch.samples):
                continue
            given = batch.samples
            rejects: Rejects = []
            if isinstance(given, pl.DataFrame) and given.schema == _SAMPLE_SCHEMA:
                frame = given  # as coerce_samples would return it, sooner
            else:
                frame, rejects = coerce_samples(given)
            source = str(frame["source"][0]) if frame.height else ""
            if rejects:
                keep("gpu_sample", f"{member}:samples", source, rejects)
            if frame.height:
                frames.append(frame)
                owners.append((f"{member}:samples", source))
                ends.append((ends[-1] if ends else 0) + frame.height)
        if not frames:
            return pl.DataFrame(schema=SAMPLE_SCHEMA)
        frame = pl.concat(frames)
        bad, rejects = sample_problems(frame, now, self.raw_retention)
        if bad is None:
            return frame
        for index, reject in zip(bad.arg_true().to_list(), rejects, strict=True):
            batch_id, source = owners[bisect.bisect_right(ends, index)]
            keep("gpu_sample", batch_id, source, [reject])
        return frame.filter(~bad)


def _event_row(e: JobEvent) -> tuple[Any, ...]:
    return (*e[:-5], list(e.gpu_uuids), list(e.mig_instances), e.started_at, e.reason, e.source)


#: The record kinds of a Batch, in the order :meth:`Ingestor.write` writes them:
#: Batch field → (field, batch-id suffix, quarantine kind, table, columns, row builder).
_RECORD_KINDS: dict[str, tuple[str, str, str, str, Sequence[str], Callable[[Any], Any]]] = {
    k[0]: k
    for k in (
        ("nodes", "nodes", "node_inventory", "node_inventory_log", NodeInventory._fields, tuple),
        ("gpus", "gpus", "gpu_inventory", "gpu_inventory_log", GpuInventory._fields, tuple),
        ("processes", "processes", "gpu_process", "gpu_processes", GpuProcess._fields, tuple),
        ("health", "health", "gpu_health", "gpu_health", GpuHealth._fields, tuple),
        ("job_events", "events", "job_event", "job_events", JobEvent._fields, _event_row),
    )
}


def _split_records(
    records: Sequence[Any],
    check: Callable[[Any], tuple[str, str, str] | None],
    row: Callable[[Any], Sequence[Any]],
) -> tuple[list[Sequence[Any]], Rejects]:
    """(the rows of the valid records, the rejects of the others)."""
    good: list[Sequence[Any]] = []
    rejects: Rejects = []
    for record in records:
        problem = check(record)
        if problem is None:
            good.append(row(record))
        else:
            rejects.append((*problem, record_payload(record)))
    return good, rejects


def _rejects_by_source(rejects: Sequence[Reject]) -> dict[tuple[str, str], Rejects]:
    by_kind: dict[tuple[str, str], Rejects] = {}
    for r in rejects:
        by_kind.setdefault((r.kind, r.source), []).append(
            (r.field, r.value, r.reason, r.payload[:65536])
        )
    return by_kind


def _quarantine_rows(
    now: dt.datetime,
    kind: str,
    batch_id: str,
    source: str,
    rejects: Sequence[tuple[str, str, str, str]],
) -> list[tuple[Any, ...]]:
    return [(now, source, kind, batch_id, f, v[:1000], r, p) for f, v, r, p in rejects]


def _dedup(token: str) -> dict[str, Any]:
    return {
        "insert_deduplication_token": token,
        "deduplicate_blocks_in_dependent_materialized_views": 1,
    }


def _config_row(r: Any) -> tuple[Any, ...]:
    if isinstance(r, Price):
        return (*r[:2], decimal.Decimal(r.price), *r[3:])
    return tuple(r)
