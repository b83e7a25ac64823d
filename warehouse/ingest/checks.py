"""Record validation for ingest: the schema of every field, then one pure check per record kind.

:func:`field_problem` holds each field of the records a batch carries to its schema: the type
its annotation in :mod:`collector.records` gives (a string, an integer, a finite number, a
boolean, a time zone-aware datetime, a list of strings; ``None`` only where the annotation
allows it), the range of its warehouse column for an integer (``UInt16`` for a GPU index, ...),
the allowed values of an enumerated one (``event``, ``health``, ...). Every kind's check starts
with it, so a record whose field would fail the insert (``gpu_index`` -1 or ``"abc"``, a
``cluster`` 123, a string ``memory_total_bytes``) is quarantined instead, with the field, the
value and the reason. A batch decoded from an agent's bytes (:mod:`collector.frame`) carries
field values as the agent sent them, so this is what stands between them and the inserts.

A check returns ``None`` for a record that may be written, or a :data:`Problem` — (field,
value, reason) — that :class:`~warehouse.ingest.writer.Ingestor` quarantines together with the
record (STYLE.md item 8: the field, the value and the reason; nothing is dropped silently). Samples,
which arrive by the hundred thousand, are validated in bulk in :mod:`warehouse.ingest.writer`; the
reasons they share with these checks (retention, clock skew) come from here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import math
import numbers
import typing
from collections.abc import Callable
from typing import Any

from collector.records import (
    GPU_HEALTH,
    JOB_EVENTS,
    NODE_STATES,
    WORKLOAD_TYPES,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    JobEvent,
    NodeInventory,
    Price,
    Quota,
    Tenant,
    TenantRule,
)

#: Records may be at most this far in the future of the ingesting clock (clock skew).
MAX_FUTURE_SKEW = dt.timedelta(minutes=15)
#: Longest label value kept (Kubernetes object names are at most 253 characters).
MAX_LABEL_CHARS = 1024
FUTURE_REASON = (
    f"ts is more than {MAX_FUTURE_SKEW.seconds // 60} minutes in the future: "
    "check the source's clock"
)
RATIO_REASON = "must be a ratio within 0-1 (not a percent, not NaN)"

#: (field, value, reason): why a record is quarantined.
Problem = tuple[str, str, str]

#: How the reason of a record from a GPU with no inventory starts (``quarantine --reason``).
UNKNOWN_GPU = "unknown_gpu"


def unknown_gpu_reason(cluster: str) -> str:
    """Why a sample (process, health row) of a GPU with no inventory in ``cluster`` is kept
    back, and what to do: the ledger has no capacity, model or pool for such a GPU."""
    return (
        f"{UNKNOWN_GPU}: no inventory for this GPU in cluster {cluster!r}: the source must "
        "send the GPU's inventory (the agent does at start, and dcgm-exporter scrapes do too), "
        f"then run `gpuledger quarantine replay --reason {UNKNOWN_GPU}`"
    )


def too_old_reason(retention: dt.timedelta, consequence: str) -> str:
    """Why a row older than the raw retention is refused; one wording for every raw table."""
    return (
        f"ts is older than the raw retention ({retention.days} days): {consequence}; "
        "raise warehouse.raw_retention_days to backfill it"
    )


def aware(ts: Any) -> bool:
    return isinstance(ts, dt.datetime) and ts.tzinfo is not None


# -- the schema of every field ----------------------------------------------------------------
_UINT16, _UINT32, _UINT64, _INT32 = (
    (0, 2**16 - 1),
    (0, 2**32 - 1),
    (0, 2**64 - 1),
    (-(2**31), 2**31 - 1),
)
#: The range of the warehouse column of every integer field (the migrations' types).
_INT_RANGES: dict[type, dict[str, tuple[int, int]]] = {
    GpuInventory: {"gpu_index": _UINT16, "memory_total_bytes": _UINT64},
    NodeInventory: {"gpu_count": _UINT16, "cpu_milli": _UINT32, "memory_bytes": _UINT64},
    JobEvent: {"attempt": _UINT16, "priority": _INT32},
    GpuProcess: {"pid": _UINT32, "used_memory_bytes": _UINT64},
    GpuHealth: {
        "clock_event_reasons": _UINT64,
        "ecc_dbe_volatile": _UINT64,
        "remapped_rows_correctable": _UINT32,
        "remapped_rows_uncorrectable": _UINT32,
    },
}
#: The allowed values of the enumerated fields.
_CHOICES: dict[type, dict[str, tuple[str, ...]]] = {
    GpuInventory: {"health": GPU_HEALTH},
    NodeInventory: {"state": NODE_STATES},
    JobEvent: {"event": JOB_EVENTS, "workload_type": WORKLOAD_TYPES},
}
_FLOAT32_MAX = 3.4028234663852886e38  # the numbers are Float32 columns
#: DateTime64(3)'s range
_FIRST_TIME = dt.datetime(1900, 1, 1, tzinfo=dt.UTC)
_END_TIME = dt.datetime(2300, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class _Field:
    """What one field of a record may hold: ``fits`` says whether a value does."""

    name: str
    fits: Callable[[Any], bool]
    wanted: str  # what it must be, for the reason

    def problem(self, value: Any) -> Problem:
        return (self.name, text_of(value, 1000), f"{self.name} must be {self.wanted}")


def _text(value: Any) -> bool:
    """A string that UTF-8 can encode (JSON lets an unpaired surrogate through)."""
    if not isinstance(value, str):
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _integer(low: int, high: int) -> Callable[[Any], bool]:
    def fits(v: Any) -> bool:
        if type(v) is int:
            return low <= v <= high
        integral = isinstance(v, numbers.Integral) and not isinstance(v, bool)  # numpy's too
        return integral and low <= int(v) <= high

    return fits


def _number(v: Any) -> bool:
    """A finite number a Float32 column holds (NaN fails the comparison)."""
    if type(v) is float or type(v) is int:
        return -_FLOAT32_MAX <= v <= _FLOAT32_MAX
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and _number(float(v))


def _time(v: Any) -> bool:
    return isinstance(v, dt.datetime) and v.tzinfo is not None and _FIRST_TIME <= v < _END_TIME


def _rule(kind: str, bounds: tuple[int, int] | None, choices: tuple[str, ...]) -> tuple[Any, str]:
    if choices:
        return (lambda v: v in choices and _text(v)), f"one of {', '.join(choices)}"
    if kind == "int" and bounds is not None:
        return _integer(*bounds), f"an integer between {bounds[0]} and {bounds[1]}"
    return {
        "str": (_text, "a string (of UTF-8 text)"),
        "float": (_number, "a finite number (within ±3.4e38)"),
        "bool": ((lambda v: isinstance(v, bool)), "true or false"),
        "time": (_time, "a timezone-aware datetime (UTC) between 1900 and 2299"),
        "strs": (
            (lambda v: isinstance(v, tuple | list) and all(_text(s) for s in v)),
            "a list of strings",
        ),
    }[kind]


_KINDS_OF_TYPES: dict[Any, str] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    dt.datetime: "time",
}


def _schema(cls: Any) -> tuple[_Field, ...]:
    """Each field's rule, from the record's annotations and the tables above."""
    hints = typing.get_type_hints(cls)
    fields = []
    for name in cls._fields:
        args = typing.get_args(hints[name])
        nullable = type(None) in args
        base = next(a for a in args if a is not type(None)) if nullable else hints[name]
        kind = "strs" if typing.get_origin(base) is tuple else _KINDS_OF_TYPES[base]
        bounds = _INT_RANGES.get(cls, {}).get(name)
        if (kind == "int") != (bounds is not None):
            raise AssertionError(f"{cls.__name__}.{name}: give an integer field its column range")
        fits, wanted = _rule(kind, bounds, _CHOICES.get(cls, {}).get(name, ()))
        if nullable:
            fits = (lambda f: lambda v: v is None or f(v))(fits)
            wanted += " or null"
        fields.append(_Field(name, fits, wanted))
    return tuple(fields)


#: The schema of each record kind a batch's header carries (samples, which come as a table, are
#: held to SAMPLE_SCHEMA by :mod:`warehouse.ingest.sample_checks`).
SCHEMAS: dict[type, tuple[_Field, ...]] = {
    cls: _schema(cls) for cls in (GpuInventory, NodeInventory, JobEvent, GpuProcess, GpuHealth)
}


def field_problem(r: Any) -> Problem | None:
    """The first field of ``r`` that does not fit its schema, as (field, value, reason)."""
    for field, value in zip(SCHEMAS[type(r)], r, strict=True):
        if not field.fits(value):
            return field.problem(value)
    return None


def text_of(value: Any, limit: int) -> str:
    """``value`` as text a String column takes: ``repr`` of a non-string, an unpaired surrogate
    escaped, cut at ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    text = text[:limit]
    return text if _text(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def check_common(r: Any) -> Problem | None:
    if (problem := field_problem(r)) is not None:
        return problem
    if not r.cluster:
        return ("cluster", "", "cluster is empty")
    for name in r._fields:
        value = getattr(r, name)
        if isinstance(value, str) and len(value) > MAX_LABEL_CHARS:
            return (name, value[:100], f"{name} is longer than {MAX_LABEL_CHARS} characters")
    return None


def check_gpu(r: GpuInventory) -> Problem | None:
    if (problem := check_common(r)) is not None:
        return problem
    if not r.gpu_uuid:
        return ("gpu_uuid", "", "gpu_uuid is empty")
    if not 0 < r.capacity_fraction <= 1:
        return (
            "capacity_fraction",
            str(r.capacity_fraction),
            "capacity_fraction must be in (0, 1]",
        )
    return None


def check_node(r: NodeInventory) -> Problem | None:
    if (problem := check_common(r)) is not None:
        return problem
    if not r.node:
        return ("node", "", "node is empty")
    return None


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def check_event(r: JobEvent) -> Problem | None:
    if (problem := check_common(r)) is not None:
        return problem
    if not r.job_id:
        return ("job_id", "", "job_id is empty")
    if r.gpus_requested < 0:
        return ("gpus_requested", str(r.gpus_requested), "gpus_requested must be >= 0")
    if not 0 < r.gpu_fraction <= 1:
        return ("gpu_fraction", str(r.gpu_fraction), "gpu_fraction must be in (0, 1]")
    if r.mig_instances and len(r.mig_instances) != len(r.gpu_uuids):
        return (
            "mig_instances",
            str(r.mig_instances),
            "mig_instances must be empty or name one instance per GPU in gpu_uuids",
        )
    return None


def check_tenant(r: Tenant) -> Problem | None:
    if not r.tenant or r.tenant != f"{r.org}/{r.project}":
        return ("tenant", r.tenant, "tenant must be 'org/project' and match org and project")
    return None


def check_rule(r: TenantRule) -> Problem | None:
    if r.kind not in ("namespace", "label", "slurm_account"):
        return ("kind", r.kind, "kind must be namespace, label or slurm_account")
    if r.kind == "label" and "=" not in r.pattern:
        return ("pattern", r.pattern, "a label rule's pattern must be key=value")
    return None


def check_quota(r: Quota) -> Problem | None:
    if not aware(r.effective_from):
        return ("effective_from", str(r.effective_from), "effective_from must be timezone-aware")
    for name in ("guaranteed_gpus", "borrow_limit_gpus", "lend_limit_gpus"):
        value = getattr(r, name)
        if value is not None and (not finite(value) or value < 0):
            return (name, str(value), f"{name} must be a non-negative number")
    return None


def check_price(r: Price) -> Problem | None:
    if not aware(r.effective_from):
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


# -- raw per-GPU records: processes and health ------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RawWindow:
    """The instants a raw table (TTL = the raw retention) accepts, as of ``now``."""

    now: dt.datetime
    retention: dt.timedelta
    table: str

    def check(self, ts: dt.datetime) -> Problem | None:
        """Too old (the table's TTL would drop the row at insert) or in the future."""
        if ts < self.now - self.retention:
            consequence = f"{self.table} would drop the row at insert (TTL)"
            return ("ts", str(ts), too_old_reason(self.retention, consequence))
        if ts > self.now + MAX_FUTURE_SKEW:
            return ("ts", str(ts), FUTURE_REASON)
        return None


def _check_gpu_key(r: GpuProcess | GpuHealth, window: RawWindow) -> Problem | None:
    """What every raw per-GPU record needs: an aware ts in the window, cluster, node, GPU."""
    if (problem := check_common(r)) is not None:
        return problem
    for name in ("node", "gpu_uuid"):
        if not getattr(r, name):
            return (name, "", f"{name} is empty")
    return window.check(r.ts)


def check_process(r: GpuProcess, window: RawWindow) -> Problem | None:
    if (problem := _check_gpu_key(r, window)) is not None:
        return problem
    ratio = r.sm_util_ratio
    if ratio is not None and not 0 <= ratio <= 1:
        return ("sm_util_ratio", str(ratio), f"sm_util_ratio {RATIO_REASON}")
    return None


def check_health(r: GpuHealth, window: RawWindow) -> Problem | None:
    return _check_gpu_key(r, window)
