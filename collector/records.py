"""Typed records that every source emits, and their columnar (polars) schemas.

Sources return these records; the ingest path in ``warehouse.ingest.writer`` turns them into
inserts. High-volume sources (the simulator's backfill, a dcgm scrape of a large fleet) may
hand over a ``polars.DataFrame`` with exactly the columns of :data:`SAMPLE_SCHEMA` instead of
one ``GpuSample`` per row; both take the same validation and insert path.

Units are in the field names (STYLE.md item 4): ``*_ratio`` is 0-1, ``*_bytes``, ``*_watts``,
``*_millijoules``, ``*_celsius``, ``*_mhz``. Times are timezone-aware UTC ``datetime``\\ s
(stored with millisecond precision).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple

import polars as pl

UTC = dt.UTC

# Job lifecycle events, in the order a job normally passes through them.
JOB_EVENTS = (
    "submitted",
    "admitted",
    "started",
    "finished",
    "failed",
    "preempted",
    "evicted",
    "cancelled",
    "censored",
)
#: Events that end an allocation interval. ``censored``: the source stopped observing while
#: the job still ran or waited (a trace's end), so what it held is counted up to there only.
TERMINAL_EVENTS = frozenset({"finished", "failed", "preempted", "evicted", "cancelled", "censored"})
WORKLOAD_TYPES = ("training", "inference", "notebook", "other")
GPU_HEALTH = ("healthy", "unhealthy", "down", "retired")
NODE_STATES = ("ready", "notready", "down", "retired")


class GpuSample(NamedTuple):
    """One measurement of one GPU (or MIG instance) at one instant.

    The equivalent ``nvidia-smi`` query is
    ``--query-gpu=timestamp,uuid,index,name,utilization.gpu,memory.used,memory.total,
    power.draw,temperature.gpu,clocks.sm``.
    """

    ts: dt.datetime
    cluster: str
    node: str
    gpu_uuid: str
    gpu_index: int
    gpu_model: str
    vendor: str = "nvidia"
    mig_instance: str = ""  # "" for a whole GPU, else the GPU-instance id (e.g. "13")
    mig_profile: str = ""  # e.g. "1g.5gb"
    gpu_util_ratio: float | None = None  # DCGM_FI_DEV_GPU_UTIL / NVML utilization.gpu, 0-1
    gr_engine_active_ratio: float | None = None  # DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0-1
    mem_util_ratio: float | None = None  # memory-controller busy ratio, 0-1
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    energy_millijoules: int | None = None  # total energy counter since driver load
    temperature_celsius: float | None = None
    sm_clock_mhz: int | None = None
    tensor_active_ratio: float | None = None  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, 0-1
    xid: int | None = None  # last Xid error seen in the interval, None if none
    pod: str = ""
    namespace: str = ""
    container: str = ""
    job_id: str = ""
    source: str = ""


class GpuInventory(NamedTuple):
    """The state of one GPU (or MIG slice) as of ``ts``; the latest row per GPU wins."""

    ts: dt.datetime
    cluster: str
    pool: str
    node: str
    gpu_uuid: str
    gpu_index: int
    gpu_model: str
    vendor: str = "nvidia"
    mig_instance: str = ""
    mig_profile: str = ""
    capacity_fraction: float = 1.0  # share of the physical GPU this row represents (MIG: 1/7 ...)
    memory_total_bytes: int | None = None
    health: str = "healthy"  # one of GPU_HEALTH
    health_reason: str = ""  # e.g. "Xid 79: GPU has fallen off the bus"
    driver_version: str = ""
    cuda_version: str = ""
    compute_capability: str = ""
    pci_bus_id: str = ""
    serial: str = ""
    source: str = ""


class NodeInventory(NamedTuple):
    """The state of one node as of ``ts``; the latest row per node wins."""

    ts: dt.datetime
    cluster: str
    pool: str
    node: str
    gpu_model: str
    gpu_count: int
    vendor: str = "nvidia"
    state: str = "ready"  # one of NODE_STATES
    state_reason: str = ""
    cpu_milli: int | None = None
    memory_bytes: int | None = None
    source: str = ""


class JobEvent(NamedTuple):
    """One lifecycle event of a job (a pod, a Kueue workload, a Slurm job).

    ``started`` events name the GPUs the job was bound to (``gpu_uuids``) and the share of
    each it holds (``gpu_fraction``: 1.0 for whole GPUs, 0.25 for a quarter of a shared GPU).
    Terminal events repeat ``gpu_uuids`` and carry ``started_at`` so that an allocation
    interval can be closed even when the events arrive out of order.
    """

    ts: dt.datetime
    cluster: str
    job_id: str
    event: str  # one of JOB_EVENTS
    attempt: int = 0  # restarts of the same job are new attempts (new intervals)
    name: str = ""
    tenant: str = ""  # "org/project"
    org: str = ""
    project: str = ""
    user: str = ""
    namespace: str = ""
    pool: str = ""
    queue: str = ""
    priority: int = 0
    priority_class: str = ""
    workload_type: str = "other"  # one of WORKLOAD_TYPES
    gpu_model: str = ""  # requested model, "" for any
    gpus_requested: float = 0.0  # GPUs, fractional for shared GPUs
    gpu_fraction: float = 1.0
    node: str = ""
    gpu_uuids: tuple[str, ...] = ()
    mig_instances: tuple[str, ...] = ()  # parallel to gpu_uuids when the job holds MIG slices
    started_at: dt.datetime | None = None
    reason: str = ""  # failure/preemption reason, e.g. "OOMKilled", "preempted by job-42"
    source: str = ""


class Tenant(NamedTuple):
    """A tenant: org -> project; users belong to projects through job events."""

    tenant: str  # "org/project"
    org: str
    project: str
    display_name: str = ""
    lead: str = ""  # who sees this tenant's rows
    cost_center: str = ""


class TenantRule(NamedTuple):
    """Maps a source attribute to a tenant: ``kind`` is namespace, label or slurm_account."""

    kind: str
    pattern: str  # exact value, or "key=value" for labels; "*" suffix for a prefix match
    tenant: str
    rank: int = 100  # lower wins when several rules match


class Quota(NamedTuple):
    """A tenant's GPU quota in a pool for a GPU model, effective from ``effective_from``.

    A row for a named ``cluster`` wins there over the cluster-wide row ("") of the same tenant,
    pool and model, whatever their dates.
    """

    effective_from: dt.datetime
    tenant: str
    pool: str
    gpu_model: str
    guaranteed_gpus: float
    borrow_limit_gpus: float | None = None  # None: may borrow without limit
    lend_limit_gpus: float | None = None  # None: may lend all unused guarantee
    cluster: str = ""  # "" applies in every cluster without its own row for tenant, pool, model


class Price(NamedTuple):
    """A price-book entry: the price of one unit of ``resource`` for a model in a pool."""

    effective_from: dt.datetime
    gpu_model: str
    price: str  # a decimal string, e.g. "2.4500"; money never goes through float
    currency: str = "USD"
    pool: str = ""  # "" applies to every pool without its own entry
    resource: str = "gpu_hour"  # or "energy_kwh" (gpu_model "")


class GpuProcess(NamedTuple):
    """A compute process on a GPU (or MIG instance) at ``ts``, and its owner as cgroups tell.

    ``nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,used_memory`` plus
    ``nvidia-smi pmon -s u`` for the SM share. The pod's name and namespace are not knowable
    on the node, only its UID. ``pid`` is the host's PID, meaningful only with ``node``.
    """

    ts: dt.datetime
    gpu_uuid: str
    mig_instance: str  # "" for a whole GPU, else the GPU-instance id (e.g. "13")
    pid: int
    used_memory_bytes: int | None  # None: NVML did not report it
    sm_util_ratio: float | None  # mean over the interval's samples, 0-1; None: not reported
    pod_uid: str = ""
    container_id: str = ""
    slurm_job_id: str = ""
    cluster: str = ""  # last, with defaults, so that positional constructors keep working
    node: str = ""


class GpuHealth(NamedTuple):
    """Health counters of one physical GPU that :class:`GpuSample` has no columns for.

    ``nvidia-smi --query-gpu=uuid,clocks_event_reasons.active,
    ecc.errors.uncorrected.volatile.total`` and ``nvidia-smi --query-remapped-rows=...``.
    ``None``: not supported or not readable on this GPU. The counters belong to the physical
    GPU, so there is no MIG instance here: every instance of ``gpu_uuid`` shares them.
    """

    ts: dt.datetime
    gpu_uuid: str
    clock_event_reasons: int | None = None  # bitmask of nvmlClocksEventReason* (throttling)
    ecc_dbe_volatile: int | None = None  # double-bit ECC errors since the driver loaded
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None  # a reset is needed to apply a remap
    remapped_rows_failure: bool | None = None  # remapping failed: the GPU needs service
    gpu_lost: bool = False  # NVML_ERROR_GPU_IS_LOST: no other value could be read
    cluster: str = ""  # last, with defaults, so that positional constructors keep working
    node: str = ""


class Reject(NamedTuple):
    """Input a source could not turn into a record, kept for the quarantine table.

    Collectors never drop bad input silently and never crash on it: they return a Reject
    naming the field, the offending value and the reason, plus the raw input (``payload``).
    """

    source: str  # e.g. "dcgm:http://node-1:9400/metrics"
    kind: str  # the record kind it would have become: gpu_sample, job_event, ...
    field: str
    value: str
    reason: str
    payload: str = ""


_TS = pl.Datetime("ms", "UTC")

#: Polars schema of a sample frame: the columns, in order, of GpuSample.
SAMPLE_SCHEMA: dict[str, pl.DataType] = {
    "ts": _TS,
    "cluster": pl.String(),
    "node": pl.String(),
    "gpu_uuid": pl.String(),
    "gpu_index": pl.UInt16(),
    "gpu_model": pl.String(),
    "vendor": pl.String(),
    "mig_instance": pl.String(),
    "mig_profile": pl.String(),
    "gpu_util_ratio": pl.Float32(),
    "gr_engine_active_ratio": pl.Float32(),
    "mem_util_ratio": pl.Float32(),
    "memory_used_bytes": pl.UInt64(),
    "memory_total_bytes": pl.UInt64(),
    "power_watts": pl.Float32(),
    "energy_millijoules": pl.UInt64(),
    "temperature_celsius": pl.Float32(),
    "sm_clock_mhz": pl.UInt32(),
    "tensor_active_ratio": pl.Float32(),
    "xid": pl.UInt32(),
    "pod": pl.String(),
    "namespace": pl.String(),
    "container": pl.String(),
    "job_id": pl.String(),
    "source": pl.String(),
}
assert tuple(SAMPLE_SCHEMA) == GpuSample._fields
#: Sample columns added after the first release: a spool, an agent or a quarantine payload
#: from before them lacks them, and they read as null there (all are nullable).
ADDED_SAMPLE_COLUMNS = ("tensor_active_ratio",)


@dataclasses.dataclass(frozen=True)
class Batch:
    """What one collection step (or one simulated interval) produced, kind by kind."""

    samples: pl.DataFrame | Sequence[GpuSample] = ()
    gpus: Sequence[GpuInventory] = ()
    nodes: Sequence[NodeInventory] = ()
    job_events: Sequence[JobEvent] = ()
    rejects: Sequence[Reject] = ()
    processes: Sequence[GpuProcess] = ()
    health: Sequence[GpuHealth] = ()

    def __len__(self) -> int:
        return (
            len(self.samples)
            + len(self.gpus)
            + len(self.nodes)
            + len(self.job_events)
            + len(self.rejects)
            + len(self.processes)
            + len(self.health)
        )


def samples_frame(samples: pl.DataFrame | Sequence[GpuSample]) -> pl.DataFrame:
    """Return ``samples`` as a frame with exactly :data:`SAMPLE_SCHEMA`'s columns."""
    if isinstance(samples, pl.DataFrame):
        return samples
    return pl.DataFrame(list(samples), schema=SAMPLE_SCHEMA, orient="row", strict=False)
