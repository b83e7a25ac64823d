"""Typed, batched, idempotent ingest with quarantine.

Every batch is validated before it is written. Rows that fail go to ``quarantine`` with the
field, the value and the reason, and are counted in the result; nothing is dropped silently.
Each insert carries an ``insert_deduplication_token`` derived from the batch id (by default
a hash of the batch's content), and the tables keep a deduplication window, so re-sending a
batch after a timeout writes nothing twice — the rollups included.

Samples older than the raw retention are quarantined rather than inserted: ClickHouse would
drop them from ``gpu_samples`` at insert (TTL) while still feeding them to the rollup views,
and the rollups would then disagree with the raw data.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from collector.records import (
    GPU_HEALTH,
    JOB_EVENTS,
    NODE_STATES,
    SAMPLE_SCHEMA,
    WORKLOAD_TYPES,
    Batch,
    GpuInventory,
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
from .client import Warehouse

#: Samples may be at most this far in the future of the ingesting clock (clock skew).
MAX_FUTURE_SKEW = dt.timedelta(minutes=15)
#: Longest label value kept (Kubernetes object names are at most 253 characters).
MAX_LABEL_CHARS = 1024
_RATIO_FIELDS = ("gpu_util_ratio", "gr_engine_active_ratio", "mem_util_ratio")
_NONNEG_FLOAT_FIELDS = ("power_watts",)
_LABEL_FIELDS = (
    "cluster",
    "node",
    "gpu_uuid",
    "gpu_model",
    "vendor",
    "mig_instance",
    "mig_profile",
    "pod",
    "namespace",
    "container",
    "job_id",
    "source",
)
_REQUIRED_FIELDS = ("cluster", "node", "gpu_uuid")


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


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value)


def _payload(row: Mapping[str, Any] | Sequence[Any]) -> str:
    data = row._asdict() if hasattr(row, "_asdict") else row
    return json.dumps(data, default=_json_default)[:65536]


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
        now = self.now()
        rows = [(now, source, kind, batch_id, f, v[:1000], r, p) for f, v, r, p in rejects]
        self._insert(
            "quarantine",
            ("received_at", "source", "kind", "batch_id", "field", "value", "reason", "payload"),
            rows,
            f"{batch_id}:quarantine:{kind}",
        )

    # -- samples ------------------------------------------------------------------------------
    def write_samples(
        self, samples: pl.DataFrame | Sequence[GpuSample], batch_id: str | None = None
    ) -> IngestResult:
        """Validate and insert GPU samples (a frame with SAMPLE_SCHEMA's columns, or records)."""
        frame, rejects = _coerce_samples(samples)
        good, bad = _validate_samples(frame, self.now(), self.raw_retention)
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
        good, rejects = [], []
        for record in records:
            problem = check(record)
            if problem is None:
                good.append(row(record))
            else:
                rejects.append((*problem, _payload(record)))
        self._insert(table, columns, good, f"{batch_id}:{table}")
        result.written[table] += len(good)
        if rejects:
            self.quarantine(kind, batch_id, rejects)
            result.quarantined.update(r[2] for r in rejects)
        return result

    def write_gpus(
        self, records: Sequence[GpuInventory], batch_id: str | None = None
    ) -> IngestResult:
        return self._write_records(
            "gpu_inventory",
            "gpu_inventory_log",
            records,
            _check_gpu,
            tuple,
            GpuInventory._fields,
            batch_id,
        )

    def write_nodes(
        self, records: Sequence[NodeInventory], batch_id: str | None = None
    ) -> IngestResult:
        return self._write_records(
            "node_inventory",
            "node_inventory_log",
            records,
            _check_node,
            tuple,
            NodeInventory._fields,
            batch_id,
        )

    def write_job_events(
        self, records: Sequence[JobEvent], batch_id: str | None = None
    ) -> IngestResult:
        """Insert job events, then re-derive the allocation intervals of the jobs they touch.

        The intervals are computed in SQL from all of a job's events (``derive_allocations``),
        so events that arrive late, out of order or twice give the same intervals.
        """
        result = self._write_records(
            "job_event", "job_events", records, _check_event, _event_row, JobEvent._fields, batch_id
        )
        jobs = sorted({(e.cluster, e.job_id) for e in records if _check_event(e) is None})
        for start in range(0, len(jobs), 5000):
            self.wh.command(
                queries.sql("derive_allocations"),
                {"db": self.wh.database, "jobs": jobs[start : start + 5000]},
            )
        return result

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
            ("tenants", "tenant", list(tenants), _check_tenant),
            ("tenant_rules", "tenant_rule", list(rules), _check_rule),
            ("quotas", "quota", list(quotas), _check_quota),
            ("price_book", "price", list(prices), _check_price),
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
        by_kind: dict[tuple[str, str], list[tuple[str, str, str, str]]] = {}
        for r in rejects:
            by_kind.setdefault((r.kind, r.source), []).append(
                (r.field, r.value, r.reason, r.payload[:65536])
            )
        for (kind, source), rows in by_kind.items():
            self.quarantine(kind, f"{batch_id}:{source}", rows, source=source)
            result.quarantined.update(row[2] for row in rows)
        return result


def _dedup(token: str) -> dict[str, Any]:
    return {
        "insert_deduplication_token": token,
        "deduplicate_blocks_in_dependent_materialized_views": 1,
    }


# -- sample validation (vectorised) -----------------------------------------------------------
def _coerce_samples(
    samples: pl.DataFrame | Sequence[GpuSample],
) -> tuple[pl.DataFrame, list[tuple[str, str, str, str]]]:
    """Bring ``samples`` to SAMPLE_SCHEMA; a row with a value that does not fit is rejected."""
    if isinstance(samples, pl.DataFrame):
        missing = [c for c in SAMPLE_SCHEMA if c not in samples.columns]
        if missing:
            raise ValueError(
                f"sample frame lacks columns {missing}: build it with "
                "collector.records.SAMPLE_SCHEMA"
            )
        raw = samples.select(list(SAMPLE_SCHEMA))
        if raw.schema == pl.Schema(SAMPLE_SCHEMA):
            return raw, []
        pairs = {
            name: (raw[name], _cast(raw[name], dtype)) for name, dtype in SAMPLE_SCHEMA.items()
        }
    else:
        rows = list(samples)
        pairs = {name: _convert(name, [r[i] for r in rows]) for i, name in enumerate(SAMPLE_SCHEMA)}
    height = len(pairs["ts"][1])
    bad = pl.Series([False] * height)
    rejects: list[tuple[str, str, str, str]] = []
    for name, (original, converted) in pairs.items():
        lost = converted.is_null() & original.is_not_null() & ~bad
        for idx in lost.arg_true().to_list():
            value = original[idx]
            rejects.append(
                (
                    name,
                    str(value),
                    f"{name} {value!r} is not a valid {SAMPLE_SCHEMA[name]}",
                    _payload({k: str(o[idx]) for k, (o, _c) in pairs.items()}),
                )
            )
        bad = bad | lost
    frame = pl.DataFrame([converted for _o, converted in pairs.values()])
    return frame.filter(~bad), rejects


def _cast(series: pl.Series, dtype: pl.DataType) -> pl.Series:
    try:
        return series.cast(dtype, strict=False)
    except pl.exceptions.PolarsError:
        return pl.Series(series.name, [None] * len(series), dtype=dtype)


def _convert(name: str, values: list[Any]) -> tuple[pl.Series, pl.Series]:
    """(the values as given, the values in the schema's type with misfits as null)."""
    dtype = SAMPLE_SCHEMA[name]
    if name == "ts":
        given = pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)
        return given, pl.Series(name, [v if _aware(v) else None for v in values], dtype=dtype)
    try:
        series = pl.Series(name, values, dtype=dtype, strict=True)
        return series, series
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        given = pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)
        return given, pl.Series(name, [_one(v, dtype) for v in values], dtype=dtype)


def _one(value: Any, dtype: pl.DataType) -> Any:
    try:
        return pl.Series([value], dtype=dtype, strict=True)[0]
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return None


def _validate_samples(
    frame: pl.DataFrame, now: dt.datetime, retention: dt.timedelta
) -> tuple[pl.DataFrame, list[tuple[str, str, str, str]]]:
    """Split ``frame`` into valid rows and rejects (field, value, reason, payload)."""
    oldest = now - retention
    newest = now + MAX_FUTURE_SKEW
    checks: list[tuple[str, pl.Expr, str]] = [
        ("ts", pl.col("ts").is_null(), "ts is missing"),
        (
            "ts",
            pl.col("ts") < oldest,
            f"ts is older than the raw retention ({retention.days} days): the sample would be "
            "dropped from gpu_samples but kept in rollups; raise warehouse.raw_retention_days "
            "to backfill it",
        ),
        (
            "ts",
            pl.col("ts") > newest,
            "ts is more than 15 minutes in the future: check the source's clock",
        ),
    ]
    for name in _REQUIRED_FIELDS:
        checks.append((name, pl.col(name).fill_null("") == "", f"{name} is empty"))
    for name in _LABEL_FIELDS:
        checks.append(
            (
                name,
                pl.col(name).str.len_chars() > MAX_LABEL_CHARS,
                f"{name} is longer than {MAX_LABEL_CHARS} characters",
            )
        )
    for name in _RATIO_FIELDS:
        col = pl.col(name)
        checks.append(
            (
                name,
                col.is_nan() | (col < 0) | (col > 1),
                f"{name} must be a ratio within 0-1 (not a percent, not NaN)",
            )
        )
    for name in (*_NONNEG_FLOAT_FIELDS, "temperature_celsius"):
        col = pl.col(name)
        checks.append((name, col.is_nan() | col.is_infinite(), f"{name} is NaN or infinite"))
    for name in _NONNEG_FLOAT_FIELDS:
        checks.append((name, pl.col(name) < 0, f"{name} must not be negative"))
    checks.append(
        (
            "memory_used_bytes",
            pl.col("memory_used_bytes") > pl.col("memory_total_bytes"),
            "memory_used_bytes exceeds memory_total_bytes",
        )
    )

    flags = frame.select(
        [expr.fill_null(False).alias(f"_{i}") for i, (_, expr, _) in enumerate(checks)]
    )
    any_bad = flags.select(pl.any_horizontal(pl.all()).alias("bad"))["bad"]
    if not any_bad.any():
        return frame, []
    rejects = []
    bad_rows = frame.filter(any_bad)
    bad_flags = flags.filter(any_bad)
    for row, flag_row in zip(bad_rows.iter_rows(named=True), bad_flags.iter_rows(), strict=True):
        first = next(i for i, f in enumerate(flag_row) if f)
        field, _, reason = checks[first]
        rejects.append((field, str(row[field]), reason, _payload(row)))
    return frame.filter(~any_bad), rejects


# -- record validation ------------------------------------------------------------------------
def _aware(ts: Any) -> bool:
    return isinstance(ts, dt.datetime) and ts.tzinfo is not None


def _check_common(r: Any) -> tuple[str, str, str] | None:
    if not _aware(r.ts):
        return ("ts", str(r.ts), "ts must be a timezone-aware datetime (UTC)")
    if not r.cluster:
        return ("cluster", "", "cluster is empty")
    for name in r._fields:
        value = getattr(r, name)
        if isinstance(value, str) and len(value) > MAX_LABEL_CHARS:
            return (name, value[:100], f"{name} is longer than {MAX_LABEL_CHARS} characters")
    return None


def _check_gpu(r: GpuInventory) -> tuple[str, str, str] | None:
    if (problem := _check_common(r)) is not None:
        return problem
    if not r.gpu_uuid:
        return ("gpu_uuid", "", "gpu_uuid is empty")
    if r.health not in GPU_HEALTH:
        return ("health", r.health, f"health must be one of {', '.join(GPU_HEALTH)}")
    if not (isinstance(r.capacity_fraction, float | int) and 0 < r.capacity_fraction <= 1):
        return (
            "capacity_fraction",
            str(r.capacity_fraction),
            "capacity_fraction must be in (0, 1]",
        )
    return None


def _check_node(r: NodeInventory) -> tuple[str, str, str] | None:
    if (problem := _check_common(r)) is not None:
        return problem
    if not r.node:
        return ("node", "", "node is empty")
    if r.state not in NODE_STATES:
        return ("state", r.state, f"state must be one of {', '.join(NODE_STATES)}")
    if not isinstance(r.gpu_count, int) or r.gpu_count < 0:
        return ("gpu_count", str(r.gpu_count), "gpu_count must be a non-negative integer")
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _check_event(r: JobEvent) -> tuple[str, str, str] | None:
    if (problem := _check_common(r)) is not None:
        return problem
    if not r.job_id:
        return ("job_id", "", "job_id is empty")
    if r.event not in JOB_EVENTS:
        return ("event", r.event, f"event must be one of {', '.join(JOB_EVENTS)}")
    if r.workload_type not in WORKLOAD_TYPES:
        return (
            "workload_type",
            r.workload_type,
            f"workload_type must be one of {', '.join(WORKLOAD_TYPES)}",
        )
    if not _finite(r.gpus_requested) or r.gpus_requested < 0:
        return ("gpus_requested", str(r.gpus_requested), "gpus_requested must be >= 0")
    if not _finite(r.gpu_fraction) or not 0 < r.gpu_fraction <= 1:
        return ("gpu_fraction", str(r.gpu_fraction), "gpu_fraction must be in (0, 1]")
    if r.mig_instances and len(r.mig_instances) != len(r.gpu_uuids):
        return (
            "mig_instances",
            str(r.mig_instances),
            "mig_instances must be empty or name one instance per GPU in gpu_uuids",
        )
    if r.started_at is not None and not _aware(r.started_at):
        return ("started_at", str(r.started_at), "started_at must be timezone-aware")
    return None


def _event_row(e: JobEvent) -> tuple[Any, ...]:
    return (*e[:-5], list(e.gpu_uuids), list(e.mig_instances), e.started_at, e.reason, e.source)


def _check_tenant(r: Tenant) -> tuple[str, str, str] | None:
    if not r.tenant or r.tenant != f"{r.org}/{r.project}":
        return ("tenant", r.tenant, "tenant must be 'org/project' and match org and project")
    return None


def _check_rule(r: TenantRule) -> tuple[str, str, str] | None:
    if r.kind not in ("namespace", "label", "slurm_account"):
        return ("kind", r.kind, "kind must be namespace, label or slurm_account")
    if r.kind == "label" and "=" not in r.pattern:
        return ("pattern", r.pattern, "a label rule's pattern must be key=value")
    return None


def _check_quota(r: Quota) -> tuple[str, str, str] | None:
    if not _aware(r.effective_from):
        return ("effective_from", str(r.effective_from), "effective_from must be timezone-aware")
    for name in ("guaranteed_gpus", "borrow_limit_gpus", "lend_limit_gpus"):
        value = getattr(r, name)
        if value is not None and (not _finite(value) or value < 0):
            return (name, str(value), f"{name} must be a non-negative number")
    return None


def _check_price(r: Price) -> tuple[str, str, str] | None:
    if not _aware(r.effective_from):
        return ("effective_from", str(r.effective_from), "effective_from must be timezone-aware")
    try:
        value = decimal.Decimal(r.price)
    except (decimal.InvalidOperation, TypeError):
        return ("price", str(r.price), "price must be a decimal string such as '2.45'")
    if not value.is_finite() or value < 0:
        return ("price", str(r.price), "price must be a finite, non-negative decimal")
    if r.resource not in ("gpu_hour", "energy_kwh"):
        return ("resource", r.resource, "resource must be gpu_hour or energy_kwh")
    return None


def _config_row(r: Any) -> tuple[Any, ...]:
    if isinstance(r, Price):
        return (*r[:2], decimal.Decimal(r.price), *r[3:])
    return tuple(r)
