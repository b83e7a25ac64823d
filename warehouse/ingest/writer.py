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
:mod:`warehouse.ingest.checks`.

:meth:`Ingestor.write_group` writes several batches with one insert per table (the server
coalesces agents' batches that way); rows, quarantine and allocations come out as if each
batch had been written alone.

Samples, GPU processes and GPU health rows of a GPU with no inventory (no row in ``gpus`` for
its cluster and UUID, and none in the same batch) are quarantined with a reason that says to
send the inventory and then ``gpuledger quarantine replay`` (:mod:`warehouse.ingest.known_gpus`).
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import decimal
import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import polars as pl

from collector.records import (
    SAMPLE_SCHEMA,
    TERMINAL_EVENTS,
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
from warehouse import queries
from warehouse.client import Warehouse, WarehouseError
from warehouse.ingest.checks import (
    UNKNOWN_GPU,
    Problem,
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
    text_of,
)
from warehouse.ingest.group_steps import GROUP_STEPS, attributed
from warehouse.ingest.known_gpus import (
    GpuKey,
    KnownGpus,
    frame_checks,
    frame_keys,
    is_unknown_gpu,
    record_keys,
    record_problem,
)
from warehouse.ingest.sample_checks import (
    FrameCheck,
    Rejects,
    coerce_samples,
    record_payload,
    sample_problems,
    sample_verdicts,
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
        self.known_gpus = KnownGpus(wh)
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
        part: str = "",
    ) -> None:
        """Keep rejected input: ``rejects`` holds (field, value, reason, payload) tuples.

        ``part`` tells apart two quarantine inserts of one batch and kind (their tokens)."""
        rows = _quarantine_rows(self.now(), kind, batch_id, source, rejects)
        token = f"{batch_id}:quarantine:{kind}" + (f":{part}" if part else "")
        self._insert("quarantine", _QUARANTINE_COLUMNS, rows, token)

    def _quarantine_around(
        self,
        kind: str,
        batch_id: str,
        rejects: Rejects,
        insert: Callable[[], None],
        source: str = "",
    ) -> None:
        """Run ``insert`` (the valid rows) with ``rejects`` quarantined around it: rows of GPUs
        with no inventory before, the others after.

        Why that order: a batch written again under the same id after failing part-way (an
        agent's retry) may find its GPU known by then. Its rows then go in with the rest (the
        first inserts that did get through are dropped as duplicates, whatever their content),
        so a row kept back the first time is quarantined *and* written, never neither:
        ``gpuledger quarantine replay`` finds it in ``gpu_samples`` and does not write it twice.
        """
        waiting = [r for r in rejects if is_unknown_gpu(r[2])]
        final = [r for r in rejects if not is_unknown_gpu(r[2])]
        if waiting:
            self.quarantine(kind, batch_id, waiting, source, part=UNKNOWN_GPU)
        insert()
        if final:
            self.quarantine(kind, batch_id, final, source)

    # -- samples ------------------------------------------------------------------------------
    def write_samples(
        self, samples: pl.DataFrame | Sequence[GpuSample], batch_id: str | None = None
    ) -> IngestResult:
        """Validate and insert GPU samples (a frame with SAMPLE_SCHEMA's columns, or records).

        A sample of a GPU with no inventory (see :mod:`warehouse.ingest.known_gpus`) is quarantined.
        """
        return self._write_samples(samples, batch_id, None)

    def _write_samples(
        self,
        samples: pl.DataFrame | Sequence[GpuSample],
        batch_id: str | None,
        unknown: Collection[GpuKey] | None,
    ) -> IngestResult:
        frame, rejects = coerce_samples(samples)
        if unknown is None:
            unknown = self.known_gpus.unknown(frame_keys(frame))
        good, bad = validate_samples(frame, self.now(), self.raw_retention, frame_checks(unknown))
        rejects.extend(bad)
        if batch_id is None:
            batch_id = content_id(
                good.hash_rows(seed=7).to_numpy().tobytes(), repr(rejects).encode()
            )
        token = f"{batch_id}:samples"
        result = IngestResult()

        def insert() -> None:
            if good.height:
                self.wh.insert_arrow("gpu_samples", good.to_arrow(), settings=_dedup(token))
                result.written["gpu_samples"] += good.height

        source = str(frame["source"][0]) if frame.height else ""
        self._quarantine_around("gpu_sample", batch_id, rejects, insert, source)
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
        token = f"{batch_id}:{table}"

        def insert() -> None:
            self._insert(table, columns, good, token)
            if table == "gpu_inventory_log":
                self.known_gpus.add(_inventory_keys(good))
            result.written[table] += len(good)

        self._quarantine_around(kind, batch_id, rejects, insert)
        result.quarantined.update(r[2] for r in rejects)
        return result

    def _checks(
        self, now: dt.datetime, unknown: Collection[GpuKey] = frozenset()
    ) -> dict[str, Check]:
        """The check of each record kind (by Batch field), against the clock ``now``; processes
        and health rows of the GPUs in ``unknown`` (no inventory) fail too, last."""
        processes = RawWindow(now, self.raw_retention, "gpu_processes")
        health = RawWindow(now, self.raw_retention, "gpu_health")
        return {
            "nodes": check_node,
            "gpus": check_gpu,
            "processes": lambda r: check_process(r, processes) or record_problem(r, unknown),
            "health": lambda r: check_health(r, health) or record_problem(r, unknown),
            "job_events": check_event,
        }

    def _write_kind(
        self,
        attr: str,
        records: Sequence[Any],
        batch_id: str | None,
        unknown: Collection[GpuKey] | None = None,
    ) -> IngestResult:
        _attr, _suffix, kind, table, columns, row = _RECORD_KINDS[attr]
        if unknown is None:
            gpu_keyed = attr in ("processes", "health")
            unknown = self.known_gpus.unknown(record_keys(records)) if gpu_keyed else set()
        check = self._checks(self.now(), unknown)[attr]
        return self._write_records(kind, table, records, check, row, columns, batch_id)

    def unknown_gpus(self, members: Sequence[tuple[str, Batch]]) -> set[GpuKey]:
        """The GPUs that samples, processes or health rows of ``members`` (``(batch id, batch)``
        pairs) name and that have no inventory: none in the warehouse, and no valid inventory
        row in ``members``. Inventory only ever arrives, so a later answer is the same or
        smaller (:meth:`write_group` explains why that matters)."""
        named: set[GpuKey] = set()
        brought: set[GpuKey] = set()
        for _member, batch in members:
            named |= record_keys(batch.processes) | record_keys(batch.health)
            named.update(_sample_keys(batch.samples))
            brought |= {(g.cluster, g.gpu_uuid) for g in batch.gpus if check_gpu(g) is None}
        return self.known_gpus.unknown(named - brought)

    def verdicts(self, kind: str, records: Sequence[Any]) -> list[Problem | None]:
        """What writing ``records`` of quarantine kind ``kind`` (``gpu_sample``, ``gpu_process``,
        ...) would make of each, in order: None (written) or its (field, value, reason) —
        the write path's checks, nothing written. ``gpuledger quarantine replay`` uses it."""
        now = self.now()
        if kind == "gpu_sample":
            unknown = self.known_gpus.unknown(record_keys(records))
            return sample_verdicts(records, now, self.raw_retention, frame_checks(unknown))
        attr = next((a for a, k in _RECORD_KINDS.items() if k[2] == kind), None)
        if attr is None:
            raise ValueError(f"no records of kind {kind!r} are written by the Ingestor")
        gpu_keyed = attr in ("processes", "health")
        unknown = self.known_gpus.unknown(record_keys(records)) if gpu_keyed else set()
        check = self._checks(now, unknown)[attr]
        return [check(r) for r in records]

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
                {
                    "db": self.wh.database,
                    "jobs": jobs[start : start + 5000],
                    "terminal": sorted(TERMINAL_EVENTS),
                },
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
        """Write every kind in ``batch``: the group write (:meth:`write_group`) with one
        member, so one batch and a coalesced group meet the same checks in the same order.
        Without ``batch_id`` the batch's content names it, so writing it again writes nothing
        twice."""
        member = batch_id or _batch_content_id(batch)
        return self.write_group([(member, batch)], member)

    def write_rejects(self, rejects: Sequence[Reject], batch_id: str | None = None) -> IngestResult:
        """Quarantine what a source could not parse (see ``collector.records.Reject``)."""
        batch_id = batch_id or content_id(repr(list(rejects)).encode())
        result = IngestResult()
        for (kind, source), rows in _rejects_by_source(rejects).items():
            self.quarantine(kind, f"{batch_id}:{source}", rows, source=source)
            result.quarantined.update(row[2] for row in rows)
        return result

    # -- several batches, one insert per table ------------------------------------------------
    def write_group(
        self,
        members: Sequence[tuple[str, Batch]],
        token: str,
        unknown_gpus: Iterable[Sequence[str]] | None = None,
        *,
        resume_at: str | None = None,
    ) -> IngestResult:
        """Write several batches (``(batch id, batch)`` pairs) with one insert per table.

        Every insert carries a deduplication token derived from ``token``, so writing the same
        group again writes nothing twice. What is written and quarantined is what
        :meth:`write` would write for each batch alone: a reject keeps the id of the batch it
        came in (with the same suffix), and job events re-derive the allocations of every job
        they touch. Tables are written in :meth:`write`'s order; quarantine comes last. One
        difference: a GPU whose inventory comes in any member of the group is known to all.

        ``unknown_gpus``: the ``(cluster, gpu_uuid)`` pairs to treat as having no inventory;
        None asks :meth:`unknown_gpus`. A group written again after a crash must be checked
        as the first time, or a sample kept back then (its GPU unknown) and written now would
        be dropped with the group's duplicate insert: whoever writes a group again passes the
        first answer (the coalescer keeps a non-empty one in the group's manifest; an empty
        one cannot change).

        The writes are the ``GROUP_STEPS`` (:mod:`warehouse.ingest.group_steps`), in order;
        one that fails raises a ``GroupWriteError`` naming it (the steps before it are
        written). ``resume_at`` skips the steps before it: the coalescer writes a group that
        failed member by member from the step that failed, the earlier ones having been
        written for every member.
        """
        now = self.now()
        result = IngestResult()
        if unknown_gpus is None:
            unknown: set[GpuKey] = self.unknown_gpus(members)
        else:
            unknown = {(str(c), str(u)) for c, u in unknown_gpus}
        held: list[tuple[Any, ...]] = []
        todo = GROUP_STEPS[GROUP_STEPS.index(resume_at) :] if resume_at else GROUP_STEPS

        def keep(kind: str, batch_id: str, source: str, rejects: Rejects) -> None:
            held.extend(_quarantine_rows(now, kind, batch_id, source, rejects))
            result.quarantined.update(r[2] for r in rejects)

        checks = self._checks(now, unknown)
        for attr, suffix, kind, table, columns, row in _RECORD_KINDS.values():
            good: list[Sequence[Any]] = []
            with attributed(table):
                for member, batch in members:
                    rows, rejects = _split_records(getattr(batch, attr), checks[attr], row)
                    good.extend(rows)
                    if rejects:
                        keep(kind, f"{member}:{suffix}", "", rejects)
                if table in todo:
                    self._insert(table, columns, good, f"{token}:{table}")
            if table == "gpu_inventory_log":
                self.known_gpus.add(_inventory_keys(good))
            if good:
                result.written[table] += len(good)
            if attr == "job_events" and "allocations" in todo:
                with attributed("allocations"):
                    self._derive_allocations(e for _m, b in members for e in b.job_events)
        with attributed("gpu_samples"):
            samples = self._group_samples(members, now, keep, frame_checks(unknown))
            if samples.height and "gpu_samples" in todo:
                self.wh.insert_arrow(
                    "gpu_samples", samples.to_arrow(), settings=_dedup(f"{token}:gpu_samples")
                )
        if samples.height:
            result.written["gpu_samples"] += samples.height
        for member, batch in members:
            for (kind, source), unparsed in _rejects_by_source(batch.rejects).items():
                keep(kind, f"{member}:rejects:{source}", source, unparsed)
        with attributed("quarantine"):
            self._insert("quarantine", _QUARANTINE_COLUMNS, held, f"{token}:quarantine")
        return result

    def _group_samples(
        self,
        members: Sequence[tuple[str, Batch]],
        now: dt.datetime,
        keep: Callable[[str, str, str, Rejects], None],
        extra: Sequence[FrameCheck],
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
        bad, rejects = sample_problems(frame, now, self.raw_retention, extra)
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


#: Every kind of record ingest quarantines (a source's rejects name one of these too).
QUARANTINE_KINDS = (
    "gpu_sample",
    *(k[2] for k in _RECORD_KINDS.values()),
    "tenant",
    "tenant_rule",
    "quota",
    "price",
)

_INVENTORY_KEY = (GpuInventory._fields.index("cluster"), GpuInventory._fields.index("gpu_uuid"))


def _inventory_keys(rows: Iterable[Sequence[Any]]) -> set[GpuKey]:
    """The (cluster, gpu_uuid) of inventory rows (GpuInventory field order)."""
    c, u = _INVENTORY_KEY
    return {(row[c], row[u]) for row in rows}


def _sample_keys(samples: pl.DataFrame | Sequence[GpuSample]) -> Iterable[GpuKey]:
    if isinstance(samples, pl.DataFrame):
        has_keys = {"cluster", "gpu_uuid"} <= set(samples.columns)
        return frame_keys(samples) if has_keys else ()
    return record_keys(samples)


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


#: The kinds of a batch besides its samples.
_BATCH_KINDS = ("gpus", "nodes", "job_events", "rejects", "processes", "health")


def _batch_content_id(batch: Batch) -> str:
    """A batch's id from its content (a sample frame by its rows' hashes; a long frame's repr
    is cut short)."""
    small = repr([getattr(batch, k) for k in _BATCH_KINDS]).encode()
    samples = batch.samples
    if isinstance(samples, pl.DataFrame):
        rows = samples.hash_rows(seed=7).to_numpy().tobytes() + repr(samples.schema).encode()
    else:
        rows = repr(list(samples)).encode()
    return content_id(small, rows)


def _rejects_by_source(rejects: Sequence[Reject]) -> dict[tuple[str, str], Rejects]:
    """A source's rejects by (kind, source); a field that is not text (an agent's batch
    carries what the agent sent) is kept as its ``repr``."""
    by_kind: dict[tuple[str, str], Rejects] = {}
    for r in rejects:
        source, kind, field, value = (text_of(v, 1000) for v in r[:4])
        by_kind.setdefault((kind, source), []).append(
            (field, value, text_of(r.reason, 65536), text_of(r.payload, 65536))
        )
    return by_kind


def _quarantine_rows(
    now: dt.datetime,
    kind: str,
    batch_id: str,
    source: str,
    rejects: Sequence[tuple[str, str, str, str]],
) -> list[tuple[Any, ...]]:
    return [
        (now, source, kind, batch_id, f, text_of(v, 1000), text_of(r, 65536), p)
        for f, v, r, p in rejects
    ]


def _dedup(token: str) -> dict[str, Any]:
    return {
        "insert_deduplication_token": token,
        "deduplicate_blocks_in_dependent_materialized_views": 1,
    }


def _config_row(r: Any) -> tuple[Any, ...]:
    if isinstance(r, Price):
        return (*r[:2], decimal.Decimal(r.price), *r[3:])
    return tuple(r)
