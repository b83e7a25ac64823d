"""NVIDIA dcgm-exporter source: scrape ``/metrics`` endpoints and map DCGM fields to GpuSamples.

Two layers:

- :func:`parse` / :func:`parse_detailed` — pure: a text-format body in, ``(samples, rejects)``
  out (``parse_detailed`` also the GPUs' inventory rows, from the labels:
  :mod:`collector.dcgm.inventory`). No HTTP, no state, no clock (the caller passes ``now``).
- :class:`DcgmCollector` — scrapes one or many targets through
  :class:`collector.dcgm.promtext.TextFetcher` (a ``requests.Session``; connect and read timeouts, a
  total deadline, a body-size cap, bounded retries with exponential backoff and jitter), keeps
  per-target health counters (:class:`TargetStats`), and spots energy-counter resets between
  scrapes.

Mapping (the exporter's unit → the sample field), as :mod:`collector.dcgm.fields` has it:

====================================  =========================  ==========================
DCGM field                            sample field               conversion
====================================  =========================  ==========================
DCGM_FI_DEV_GPU_UTIL (%)              gpu_util_ratio             / 100
DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio) gr_engine_active_ratio     as is
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE       tensor_active_ratio        as is (ratio)
DCGM_FI_DEV_MEM_COPY_UTIL (%)         mem_util_ratio             / 100
DCGM_FI_DEV_FB_USED (MiB)             memory_used_bytes          * 2**20
FB_USED + FB_FREE + FB_RESERVED (MiB) memory_total_bytes         * 2**20 (RESERVED 0 if absent)
DCGM_FI_DEV_POWER_USAGE (W)           power_watts                as is        [device-level]
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION  energy_millijoules         as is (mJ)   [device-level]
DCGM_FI_DEV_GPU_TEMP (C)              temperature_celsius        as is        [device-level]
DCGM_FI_DEV_SM_CLOCK (MHz)            sm_clock_mhz               as is        [device-level]
DCGM_FI_DEV_XID_ERRORS (last Xid)     xid                        0 -> None    [device-level]
====================================  =========================  ==========================

Both utilisation fields are stored; the warehouse takes ``coalesce(gr_engine_active, gpu_util)``
(graphics-engine activity is preferred where the GPU has profiling metrics).

Labels, every spelling seen in the wild (first present wins):

- GPU: ``UUID`` | ``uuid`` (``--use-old-namespace``); index ``gpu`` (else ``device="nvidiaN"``);
  model ``modelName`` | ``model_name`` — old exporters (the A100 MIG docs sample) have no model
  label: ``gpu_model`` is then ``""`` and inventory (NVML) supplies it.
- node: ``Hostname`` | ``hostname`` (newer exporters) | ``default_node`` (the collector passes
  the target URL's host).
- pod: ``pod`` | ``pod_name``; ``namespace`` | ``pod_namespace``; ``container`` |
  ``container_name`` | ``pod_container_name`` (old exporters); ``hpc_job`` → ``job_id``.
  When the body has been relabelled by a Prometheus (any ``exported_pod``/``exported_namespace``/
  ``exported_container`` label in it), only the ``exported_*`` labels are read: the plain ones
  then name the scrape target (the exporter's own pod), not the GPU's workload.
- MIG: ``GPU_I_ID`` and ``GPU_I_PROFILE`` on the parent GPU's UUID.

One sample per (GPU UUID, MIG instance) per scrape. Series that repeat for one GPU (the pod
mapper repeats every series once per pod on a time-sliced GPU) are merged: the first valid
value of a field wins, and when several pods appear the lexicographically first
(namespace, pod, container) is kept and counted in ``ParseStats.shared_gpus`` — the allocation
share of a shared GPU comes from job events (``gpu_fraction``), not from samples.

MIG and double counting: power, energy, temperature, SM clock and Xid are properties of the
physical GPU; DCGM reports the parent's value on every GPU-instance series. They are kept on the
whole-GPU sample (``mig_instance == ""``) only and are ``None`` on instance samples, so a sum of
power or energy over all samples of a node counts each board once. The whole-GPU sample takes
them from the whole-GPU series, or else once from the lowest ``GPU_I_ID`` that has them. If an
exporter emits only GPU-instance series for a MIG GPU (flex mode with MIG on), that whole-GPU
sample is synthesised for the UUID: device-level fields only, no pod, no memory/utilisation.
Memory, utilisation and tensor activity are instance-level (DCGM reports them per GPU
instance) and stay on the instance samples.

DCGM blank sentinels (dcgm_structs.h: ``DCGM_INT32_BLANK`` 0x7ffffff0 = 2147483632,
``DCGM_INT64_BLANK`` 0x7ffffffffffffff0 = 9223372036854775792, ``DCGM_FP64_BLANK`` 2**47 =
140737488355328.0, each followed by NOT_FOUND/NOT_SUPPORTED/NOT_PERMISSIONED at +1..+3; DCGM
tests ``value >= BLANK``) become ``None``: every mapped field except the energy counter has a
physical range far below 2147483632, so any value at or above it is a blank; the energy counter
(an int64 that can legitimately pass 2**31 mJ within hours) is blank at or above the int64 blank.

Bad values never crash a scrape: NaN/±Inf, negative or out-of-range values (utilisation over
100 %, ...) become a :class:`~collector.records.Reject` (field, value, reason, payload = the raw
line, truncated) and that field is ``None``; the rest of the sample and of the scrape stand.
Unparseable lines and label values over 1024 characters are rejected the same way. Metrics this
module does not map are ignored and counted.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple
from urllib.parse import urlsplit

import requests

from collector.dcgm.fields import (
    FIELDS,
    FP64_BLANK,
    INT32_BLANK,
    INT64_BLANK,
    _check_value,
    is_blank,
)
from collector.dcgm.inventory import GpuLabels, InventoryChanges, inventory_rows
from collector.dcgm.promtext import PromSample, ScrapeError, TextFetcher, parse_text
from collector.records import Batch, GpuInventory, GpuSample, Reject

__all__ = [
    "FIELDS",
    "FP64_BLANK",
    "INT32_BLANK",
    "INT64_BLANK",
    "KIND",
    "MAX_PAYLOAD_CHARS",
    "MAX_REJECTS",
    "MAX_VALUE_CHARS",
    "MIB",
    "DcgmCollector",
    "ParseResult",
    "ParseStats",
    "TargetStats",
    "is_blank",
    "parse",
    "parse_detailed",
]

log = logging.getLogger(__name__)

KIND = "gpu_sample"
MIB = 1 << 20
MAX_PAYLOAD_CHARS = 2048
MAX_VALUE_CHARS = 256
MAX_REJECTS = 1000  # per body; the rest are counted in one summary Reject
_DEVICE_KEYS = tuple(f.key for f in FIELDS.values() if f.device_level)
_REJECT_FIELD = {
    "fb_used": "memory_used_bytes",
    "fb_free": "memory_total_bytes",
    "fb_reserved": "memory_total_bytes",
}

_EXPORTED = ("exported_pod", "exported_namespace", "exported_container")
_POD = ("pod", "pod_name")
_NAMESPACE = ("namespace", "pod_namespace")
_CONTAINER = ("container", "container_name", "pod_container_name")


def _first(labels: Mapping[str, str], names: Iterable[str]) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


@dataclasses.dataclass
class ParseStats:
    """What one body contained besides samples; the collector adds these up per target."""

    sample_lines: int = 0  # lines of mapped metrics
    unknown_lines: int = 0  # well-formed lines of metrics this module does not map
    unknown_metrics: set[str] = dataclasses.field(default_factory=set)
    blank_values: int = 0  # DCGM blank sentinels turned into None
    shared_gpus: int = 0  # (GPU, MIG instance) groups whose series named several pods
    synthesised_parents: int = 0  # whole-GPU samples built from GPU-instance series only
    types: dict[str, str] = dataclasses.field(default_factory=dict)  # from "# TYPE" lines


class ParseResult(NamedTuple):
    samples: list[GpuSample]
    rejects: list[Reject]
    stats: ParseStats
    inventory: list[GpuInventory]  # one row per GPU and MIG instance (collector.dcgm.inventory)


class _Ident(NamedTuple):
    uuid: str
    instance: str
    profile: str
    gpu_index: int
    model: str
    node: str
    pod: tuple[str, str, str]  # (namespace, pod, container)
    job: str
    pci_bus_id: str = ""
    driver_version: str = ""


class _Group:
    """The series of one (UUID, MIG instance) in one body, merged."""

    __slots__ = ("ident", "pods", "ts", "values")

    def __init__(self, ident: _Ident):
        self.ident = ident
        self.pods: set[tuple[str, str, str]] = set()
        self.ts: dt.datetime | None = None
        self.values: dict[str, float | int] = {}


def _reject(source: str, field: str, value: object, reason: str, line: str) -> Reject:
    text = str(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[:MAX_VALUE_CHARS] + "..."
    payload = line if len(line) <= MAX_PAYLOAD_CHARS else line[:MAX_PAYLOAD_CHARS] + "..."
    return Reject(source, KIND, field, text, reason, payload)


def _identify(
    labels: Mapping[str, str], relabelled: bool, default_node: str
) -> _Ident | tuple[str, str, str]:
    """The sample identity a series' labels name, or (field, value, reason) when unusable."""
    uuid = labels.get("UUID") or labels.get("uuid") or ""
    if not uuid:
        return "gpu_uuid", "", "series has no UUID/uuid label"
    index_text = labels.get("gpu", "")
    if not index_text and labels.get("device", "").startswith("nvidia"):
        index_text = labels["device"][len("nvidia") :]
    if not (index_text.isascii() and index_text.isdigit()) or int(index_text) > 0xFFFF:
        return "gpu_index", index_text, "gpu label is not a GPU index (0-65535)"
    if relabelled:
        pod = (
            labels.get("exported_namespace", ""),
            labels.get("exported_pod", ""),
            labels.get("exported_container", ""),
        )
    else:
        pod = (_first(labels, _NAMESPACE), _first(labels, _POD), _first(labels, _CONTAINER))
    return _Ident(
        uuid=uuid,
        instance=labels.get("GPU_I_ID", ""),
        profile=labels.get("GPU_I_PROFILE", ""),
        gpu_index=int(index_text),
        model=labels.get("modelName") or labels.get("model_name") or "",
        node=labels.get("Hostname") or labels.get("hostname") or default_node,
        pod=pod,
        job=labels.get("hpc_job", ""),
        pci_bus_id=labels.get("pci_bus_id", ""),
        driver_version=labels.get("DCGM_FI_DRIVER_VERSION", ""),
    )


def _to_datetime(timestamp_ms: int) -> dt.datetime | None:
    try:
        return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def parse_detailed(
    text: str,
    now: dt.datetime,
    cluster: str,
    source: str = "dcgm",
    *,
    default_node: str = "",
    pool: str = "",
) -> ParseResult:
    """Parse one dcgm-exporter body into samples, rejects, stats and inventory (see the module
    docstring and :mod:`collector.dcgm.inventory`).

    ``now`` (timezone-aware) is the scrape time; a series' own exposition timestamp, when it has
    one, wins for its sample. ``source`` names the origin in samples and rejects
    (``"dcgm:<url>"`` from the collector); ``pool`` goes on the inventory rows.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC), e.g. datetime.now(datetime.UTC)")
    expo = parse_text(text, FIELDS)
    stats = ParseStats(
        sample_lines=len(expo.samples),
        unknown_lines=expo.skipped,
        unknown_metrics=expo.skipped_names,
        types=expo.types,
    )
    rejects = [_reject(source, e.part, e.value, e.reason, e.line) for e in expo.errors]
    distinct = {id(s.labels): s.labels for s in expo.samples}
    relabelled = any(name in labels for labels in distinct.values() for name in _EXPORTED)
    idents = {key: _identify(labels, relabelled, default_node) for key, labels in distinct.items()}
    groups: dict[tuple[str, str], _Group] = {}
    for sample in expo.samples:
        ident = idents[id(sample.labels)]
        if not isinstance(ident, _Ident):
            rejects.append(_reject(source, *ident, sample.line))
            continue
        group = groups.get((ident.uuid, ident.instance))
        if group is None:
            group = groups[(ident.uuid, ident.instance)] = _Group(ident)
        if any(ident.pod):
            group.pods.add(ident.pod)
        _absorb(group, sample, source, stats, rejects)
    samples = _assemble(groups, now, cluster, source, stats)
    labels: dict[str, GpuLabels] = {}
    for (uuid, _instance), group in groups.items():
        labels.setdefault(uuid, GpuLabels(group.ident.pci_bus_id, group.ident.driver_version))
    inventory = inventory_rows(samples, labels, pool)
    if len(rejects) > MAX_REJECTS:  # e.g. a target that is not an exporter at all
        extra = len(rejects) - MAX_REJECTS + 1
        rejects[MAX_REJECTS - 1 :] = [
            Reject(
                source,
                KIND,
                "line",
                str(extra),
                f"{extra} more rejected lines in this body not kept (limit {MAX_REJECTS})",
            )
        ]
    return ParseResult(samples, rejects, stats, inventory)


def _absorb(
    group: _Group, sample: PromSample, source: str, stats: ParseStats, rejects: list[Reject]
) -> None:
    """Add one series' value (and timestamp) to its group."""
    if sample.timestamp_ms is not None and group.ts is None:
        group.ts = _to_datetime(sample.timestamp_ms)
        if group.ts is None:
            rejects.append(
                _reject(
                    source,
                    "ts",
                    sample.timestamp_ms,
                    "exposition timestamp out of range; scrape time used",
                    sample.line,
                )
            )
    spec = FIELDS[sample.name]
    if spec.key in group.values:
        return  # a repeat of this field for this GPU (one per pod on a shared GPU)
    checked = _check_value(spec, sample.name, sample.value)
    if checked is None:
        stats.blank_values += 1
    elif isinstance(checked, str):
        rejects.append(
            _reject(
                source, _REJECT_FIELD.get(spec.key, spec.key), sample.value, checked, sample.line
            )
        )
    else:
        group.values[spec.key] = checked


def _instance_order(instance: str) -> tuple[int, int | str]:
    return (0, int(instance)) if instance.isascii() and instance.isdigit() else (1, instance)


def _assemble(
    groups: dict[tuple[str, str], _Group],
    now: dt.datetime,
    cluster: str,
    source: str,
    stats: ParseStats,
) -> list[GpuSample]:
    """Turn merged groups into samples, applying the MIG device-level rule."""
    by_uuid: dict[str, list[_Group]] = {}
    for (uuid, _), group in groups.items():
        by_uuid.setdefault(uuid, []).append(group)
    out: list[GpuSample] = []
    for uuid, members in by_uuid.items():
        members.sort(
            key=lambda g: _instance_order(g.ident.instance) if g.ident.instance else (-1, 0)
        )
        instances = [g for g in members if g.ident.instance]
        if instances:
            parent = members[0]
            if parent.ident.instance:  # GPU-instance series only: synthesise the whole GPU
                parent = _Group(
                    instances[0].ident._replace(instance="", profile="", pod=("", "", ""), job="")
                )
                parent.ts = instances[0].ts
                members.insert(0, parent)
                stats.synthesised_parents += 1
            for key in _DEVICE_KEYS:  # device-level: the whole GPU's, else once from an instance
                for inst in instances:
                    value = inst.values.pop(key, None)
                    if value is not None and key not in parent.values:
                        parent.values[key] = value
        out.extend(_sample(group, uuid, now, cluster, source, stats) for group in members)
    out.sort(
        key=lambda s: (
            s.node,
            s.gpu_index,
            s.gpu_uuid,
            _instance_order(s.mig_instance) if s.mig_instance else (-1, 0),
        )
    )
    return out


def _sample(
    group: _Group, uuid: str, now: dt.datetime, cluster: str, source: str, stats: ParseStats
) -> GpuSample:
    ident, values = group.ident, group.values
    pod = ("", "", "")
    if group.pods:
        pod = min(group.pods)
        if len(group.pods) > 1:
            stats.shared_gpus += 1
    used, free = values.get("fb_used"), values.get("fb_free")
    total = None
    if used is not None and free is not None:
        total = (int(used) + int(free) + int(values.get("fb_reserved", 0))) * MIB
    xid = values.get("xid")
    return GpuSample(
        ts=group.ts or now,
        cluster=cluster,
        node=ident.node,
        gpu_uuid=uuid,
        gpu_index=ident.gpu_index,
        gpu_model=ident.model,
        mig_instance=ident.instance,
        mig_profile=ident.profile,
        gpu_util_ratio=_float(values.get("gpu_util_ratio")),
        gr_engine_active_ratio=_float(values.get("gr_engine_active_ratio")),
        mem_util_ratio=_float(values.get("mem_util_ratio")),
        memory_used_bytes=int(used) * MIB if used is not None else None,
        memory_total_bytes=total,
        power_watts=_float(values.get("power_watts")),
        energy_millijoules=_int(values.get("energy_millijoules")),
        temperature_celsius=_float(values.get("temperature_celsius")),
        sm_clock_mhz=_int(values.get("sm_clock_mhz")),
        tensor_active_ratio=_float(values.get("tensor_active_ratio")),
        xid=int(xid) if xid else None,
        namespace=pod[0],
        pod=pod[1],
        container=pod[2],
        job_id=ident.job,
        source=source,
    )


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def _int(value: float | int | None) -> int | None:
    return None if value is None else int(value)


def parse(
    text: str,
    now: dt.datetime,
    cluster: str,
    source: str = "dcgm",
    *,
    default_node: str = "",
) -> tuple[list[GpuSample], list[Reject]]:
    """Parse one dcgm-exporter body into ``(samples, rejects)``; see :func:`parse_detailed`."""
    result = parse_detailed(text, now, cluster, source, default_node=default_node)
    return result.samples, result.rejects


# --------------------------------------------------------------------------- scraping


@dataclasses.dataclass
class TargetStats:
    """Health of one target, cumulative since the collector was made (export these as metrics)."""

    scrapes: int = 0
    failures: int = 0  # scrapes that got no body after every retry
    consecutive_failures: int = 0
    retries: int = 0  # extra attempts made
    last_error: str = ""  # kept after a later success; see consecutive_failures
    last_success: dt.datetime | None = None
    last_duration_s: float = 0.0
    sample_lines: int = 0
    unknown_lines: int = 0
    blank_values: int = 0
    rejects: int = 0
    counter_resets: int = 0  # energy counter went backwards between scrapes


class DcgmCollector:
    """Scrapes dcgm-exporter targets and returns one :class:`Batch` per :meth:`collect`.

    HTTP behaviour (timeouts, total deadline, body cap, bounded retries with exponential backoff
    and jitter) is :class:`collector.dcgm.promtext.TextFetcher`'s, configured by the same arguments;
    ``timeout_s`` is ``(connect, read)`` seconds, or one number for both.

    Targets are scraped one after another, or by up to ``max_workers`` threads sharing the
    session (its urllib3 pool is thread-safe), so that a slow or blackholed node does not delay
    the rest of a fleet. ``stats`` holds a :class:`TargetStats` per target; ``failures`` and
    ``last_error`` are the two figures an agent exports first.

    Counter resets: DCGM's energy counter restarts at 0 when the driver reloads. A reading below
    the previous scrape's for the same GPU is kept as reported (it is the truth about the
    counter) and counted in ``TargetStats.counter_resets`` and logged. Whoever turns the counter
    into energy per interval must treat a decrease as a restart from zero, as Prometheus'
    ``increase()`` does (ClickHouse: ``deltaSum``, not ``max - min``).

    Inventory: the batch carries a :class:`~collector.records.GpuInventory` row (in ``pool``)
    for each GPU and MIG instance the first time this collector sees it, and again whenever
    what the labels say of it changes (:mod:`collector.dcgm.inventory`), so that the warehouse
    knows the GPUs of a dcgm-only deployment. ``inventory=False`` leaves that to another
    source (the agent's NVML collector, whose inventory says more: health, serial, MIG
    layout).
    """

    name = "dcgm"

    def __init__(
        self,
        targets: Sequence[str],
        cluster: str,
        session: requests.Session | None = None,
        timeout_s: float | tuple[float, float] = (2.0, 5.0),
        retries: int = 2,
        *,
        backoff_s: float = 0.2,
        backoff_max_s: float = 2.0,
        deadline_s: float = 15.0,
        max_body_bytes: int = 16 * MIB,
        max_workers: int = 1,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        pool: str = "",
        inventory: bool = True,
    ):
        self.targets = tuple(targets)
        self.cluster = cluster
        self.pool = pool
        self.inventory = inventory
        self._changes = InventoryChanges()
        self.fetcher = TextFetcher(
            session,
            timeout_s,
            retries,
            backoff_s=backoff_s,
            backoff_max_s=backoff_max_s,
            deadline_s=deadline_s,
            max_body_bytes=max_body_bytes,
            sleep=sleep,
            rng=rng,
        )
        self.max_workers = max(1, max_workers)
        self.stats: dict[str, TargetStats] = {t: TargetStats() for t in self.targets}
        self._last_energy: dict[tuple[str, str, str], int] = {}

    @property
    def failures(self) -> dict[str, int]:
        """Failed scrapes per target (after retries)."""
        return {t: s.failures for t, s in self.stats.items()}

    @property
    def last_error(self) -> dict[str, str]:
        """The last error per target, "" if it never failed."""
        return {t: s.last_error for t, s in self.stats.items()}

    def collect(self, now: dt.datetime) -> Batch:
        """Scrape every target once; a target that is down adds nothing and is counted."""
        if self.max_workers > 1 and len(self.targets) > 1:
            with ThreadPoolExecutor(
                min(self.max_workers, len(self.targets)), thread_name_prefix="dcgm-scrape"
            ) as pool:
                got = list(pool.map(lambda t: self.scrape_detailed(t, now), self.targets))
        else:
            got = [self.scrape_detailed(t, now) for t in self.targets]
        results = [r for r in got if r is not None]
        samples = [s for r in results for s in r.samples]
        rejects = [x for r in results for x in r.rejects]
        gpus = self._changes.changed(g for r in results for g in r.inventory)
        return Batch(samples=samples, rejects=rejects, gpus=gpus if self.inventory else ())

    def unanswered(self) -> dict[str, str]:
        """The targets whose latest scrape got nothing, with the error it got."""
        return {t: st.last_error for t, st in self.stats.items() if st.consecutive_failures}

    def scrape(self, target: str, now: dt.datetime) -> tuple[list[GpuSample], list[Reject]]:
        """Scrape and parse one target; ``([], [])`` when it could not be read."""
        result = self.scrape_detailed(target, now)
        return ([], []) if result is None else (result.samples, result.rejects)

    def scrape_detailed(self, target: str, now: dt.datetime) -> ParseResult | None:
        """Scrape and parse one target; None when it could not be read."""
        stats = self.stats.setdefault(target, TargetStats())
        stats.scrapes += 1
        started = time.monotonic()
        try:
            body, attempts = self.fetcher.fetch(target)
        except ScrapeError as exc:
            stats.retries += exc.attempts - 1
            stats.failures += 1
            stats.consecutive_failures += 1
            stats.last_error = str(exc)
            stats.last_duration_s = time.monotonic() - started
            log.warning(
                "dcgm target %s failed (%d in a row): %s", target, stats.consecutive_failures, exc
            )
            return None
        stats.retries += attempts - 1
        stats.last_duration_s = time.monotonic() - started
        stats.consecutive_failures = 0
        stats.last_success = now
        result = parse_detailed(
            body,
            now,
            self.cluster,
            f"dcgm:{target}",
            default_node=urlsplit(target).hostname or "",
            pool=self.pool,
        )
        stats.sample_lines += result.stats.sample_lines
        stats.unknown_lines += result.stats.unknown_lines
        stats.blank_values += result.stats.blank_values
        stats.rejects += len(result.rejects)
        self._note_counter_resets(target, result.samples, stats)
        return result

    def _note_counter_resets(
        self, target: str, samples: Iterable[GpuSample], stats: TargetStats
    ) -> None:
        for s in samples:
            if s.energy_millijoules is None:
                continue
            key = (target, s.gpu_uuid, s.mig_instance)
            previous = self._last_energy.get(key)
            if previous is not None and s.energy_millijoules < previous:
                stats.counter_resets += 1
                log.info(
                    "dcgm %s: energy counter of %s went back from %d to %d mJ (driver "
                    "reload?); kept as a counter reset",
                    target,
                    s.gpu_uuid,
                    previous,
                    s.energy_millijoules,
                )
            self._last_energy[key] = s.energy_millijoules

    def close(self) -> None:
        """Close the HTTP session if this collector made it."""
        self.fetcher.close()

    def __enter__(self) -> DcgmCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
