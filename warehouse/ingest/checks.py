"""Record validation for ingest: one pure check per record kind.

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


def check_common(r: Any) -> Problem | None:
    if not aware(r.ts):
        return ("ts", str(r.ts), "ts must be a timezone-aware datetime (UTC)")
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
    if r.health not in GPU_HEALTH:
        return ("health", r.health, f"health must be one of {', '.join(GPU_HEALTH)}")
    if not (isinstance(r.capacity_fraction, float | int) and 0 < r.capacity_fraction <= 1):
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
    if r.state not in NODE_STATES:
        return ("state", r.state, f"state must be one of {', '.join(NODE_STATES)}")
    if not isinstance(r.gpu_count, int) or r.gpu_count < 0:
        return ("gpu_count", str(r.gpu_count), "gpu_count must be a non-negative integer")
    return None


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def check_event(r: JobEvent) -> Problem | None:
    if (problem := check_common(r)) is not None:
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
    if not finite(r.gpus_requested) or r.gpus_requested < 0:
        return ("gpus_requested", str(r.gpus_requested), "gpus_requested must be >= 0")
    if not finite(r.gpu_fraction) or not 0 < r.gpu_fraction <= 1:
        return ("gpu_fraction", str(r.gpu_fraction), "gpu_fraction must be in (0, 1]")
    if r.mig_instances and len(r.mig_instances) != len(r.gpu_uuids):
        return (
            "mig_instances",
            str(r.mig_instances),
            "mig_instances must be empty or name one instance per GPU in gpu_uuids",
        )
    if r.started_at is not None and not aware(r.started_at):
        return ("started_at", str(r.started_at), "started_at must be timezone-aware")
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


def _uint(value: Any, bits: int) -> bool:
    """An integer (not a bool) that fits ``UInt<bits>``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**bits


def check_process(r: GpuProcess, window: RawWindow) -> Problem | None:
    if (problem := _check_gpu_key(r, window)) is not None:
        return problem
    if not _uint(r.pid, 32):
        return ("pid", str(r.pid), "pid must be an integer within 0-4294967295")
    if r.used_memory_bytes is not None and not _uint(r.used_memory_bytes, 64):
        return (
            "used_memory_bytes",
            str(r.used_memory_bytes),
            "used_memory_bytes must be a non-negative integer (bytes)",
        )
    ratio = r.sm_util_ratio
    if ratio is not None and not (finite(ratio) and 0 <= ratio <= 1):
        return ("sm_util_ratio", str(ratio), f"sm_util_ratio {RATIO_REASON}")
    return None


_HEALTH_COUNTERS = (
    ("clock_event_reasons", 64, "a bitmask (a non-negative integer)"),
    ("ecc_dbe_volatile", 64, "a non-negative integer (errors)"),
    ("remapped_rows_correctable", 32, "a non-negative integer (rows)"),
    ("remapped_rows_uncorrectable", 32, "a non-negative integer (rows)"),
)


def check_health(r: GpuHealth, window: RawWindow) -> Problem | None:
    if (problem := _check_gpu_key(r, window)) is not None:
        return problem
    for name, bits, what in _HEALTH_COUNTERS:
        value = getattr(r, name)
        if value is not None and not _uint(value, bits):
            return (name, str(value), f"{name} must be {what} or null")
    for name in ("remapped_rows_pending", "remapped_rows_failure"):
        value = getattr(r, name)
        if value is not None and not isinstance(value, bool):
            return (name, str(value), f"{name} must be true, false or null")
    if not isinstance(r.gpu_lost, bool):
        return ("gpu_lost", str(r.gpu_lost), "gpu_lost must be true or false")
    return None
