"""NVML collector: GPU inventory, samples, processes and health straight from the driver.

:class:`NvmlCollector` talks to an :class:`~collector.nvml.backend.NvmlBackend` and never imports
``pynvml``: :mod:`collector.nvml.backend` is the seam (STYLE.md item 1), and re-exports this
module's names. The collector applies one error policy to every field (:meth:`NvmlCollector._read`):
unsupported (``NOT_SUPPORTED``, ``FUNCTION_NOT_FOUND``, ``NO_PERMISSION``) becomes ``None``
(NULL), logged once per field and driver version; a lost GPU becomes a
:class:`~collector.records.Reject` and a :class:`~collector.records.GpuHealth` note while the
other GPUs are still sampled; a missing library or driver raises
:class:`~collector.nvml.backend.NvmlUnavailableError` at start-up (when the backend opens).
No warehouse I/O, no environment reads: cluster, pool, node and the proc root are parameters.
Units (STYLE.md item 4): percents become ``*_ratio`` (0-1), milliwatts watts; energy stays in
millijoules, memory in bytes. Messages go to the ``collector.nvml.backend`` logger, with the seam's.
The records (:class:`~collector.records.GpuProcess`, :class:`~collector.records.GpuHealth`) live
in :mod:`collector.records` with the other kinds; they are re-exported here and from
:mod:`collector.nvml.backend`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from collector.nvml.backend import (
    SOURCE,
    Handle,
    MigProfile,
    NvmlBackend,
    NvmlCallError,
    NvmlGpuLostError,
    NvmlNotSupportedError,
    XidEvent,
)
from collector.nvml.cgroups import CgroupOwner, owner_of_pid
from collector.records import Batch, GpuHealth, GpuInventory, GpuProcess, GpuSample, Reject

__all__ = ["GpuHealth", "GpuProcess", "NvmlCollector", "NvmlPoll", "mig_profile_name"]

log = logging.getLogger("collector.nvml")  # one logger for all NVML messages
T = TypeVar("T")


# -- what the collector returns ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NvmlPoll:
    """What one :meth:`NvmlCollector.collect` produced."""

    samples: Sequence[GpuSample] = ()
    processes: Sequence[GpuProcess] = ()
    health: Sequence[GpuHealth] = ()
    rejects: Sequence[Reject] = ()

    def batch(self) -> Batch:
        """Everything polled as a :class:`~collector.records.Batch` for the sink."""
        return Batch(
            samples=tuple(self.samples),
            processes=tuple(self.processes),
            health=tuple(self.health),
            rejects=tuple(self.rejects),
        )


# -- the collector -----------------------------------------------------------------------------
@dataclasses.dataclass
class _Mig:
    handle: Handle
    gi: int
    profile: str  # "1g.5gb"
    fraction: float
    memory_total_bytes: int | None


@dataclasses.dataclass
class _Device:
    index: int
    handle: Handle = None  # None: lost before it could be identified
    uuid: str = ""
    name: str = ""
    serial: str = ""
    pci_bus_id: str = ""
    compute_capability: str = ""
    memory_total_bytes: int | None = None
    mig_mode: bool = False
    migs: list[_Mig] = dataclasses.field(default_factory=list)
    mig_remainder: float = 1.0  # share of the GPU outside any MIG instance
    lost: str = ""  # why the GPU is lost ("" while it answers)


def mig_profile_name(slices: int, memory_mib: int, profiles: Sequence[MigProfile]) -> str:
    """The profile ("1g.5gb") of a MIG device from its slice count and memory.

    NVML's GPU-instance lookup needs root, so the device's attributes are matched against the
    profile table (which does not); the closest memory size wins, then the lowest profile id
    (the plain profile before its "+me" variant).
    """
    same = [p for p in profiles if p.slice_count == slices]
    if same:
        best = min(same, key=lambda p: (abs(p.memory_mib - memory_mib), p.id))
        return best.name.removeprefix("MIG ").strip()
    return f"{slices}g.{math.ceil(memory_mib / 1024)}gb"


class NvmlCollector:
    """Inventory and samples of this node's GPUs through an :class:`NvmlBackend`.

    ``cluster``, ``pool`` and ``node`` label every record; ``proc_root`` is where process
    cgroups are read (``/proc``, or the host's proc mounted into the agent's container; NVML
    reports host PIDs, so the agent needs the host's PID view for owners to resolve).
    """

    def __init__(
        self,
        backend: NvmlBackend,
        *,
        cluster: str,
        node: str,
        pool: str = "",
        proc_root: str | os.PathLike[str] = "/proc",
    ):
        self.backend = backend
        self.cluster, self.node, self.pool = cluster, node, pool
        self.proc_root = proc_root
        self._logged: set[tuple[str, str, str]] = set()
        self.driver_version = self._read("driver_version", backend.driver_version) or ""
        cuda = self._read("cuda_version", backend.cuda_driver_version)
        self.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else ""
        self._devices: list[_Device] | None = None
        self._watched: set[str] = set()
        self._proc_util_since: dict[str, int] = {}

    # -- error policy ------------------------------------------------------------------------
    def _read(self, field: str, call: Callable[..., T], *args: Any) -> T | None:
        """``call(*args)``, or ``None`` when it fails for this field only.

        Unsupported values are logged once per (field, driver version); other errors once per
        (field, driver version, error code). A lost GPU propagates: the caller gives up on
        that GPU for this poll.
        """
        try:
            return call(*args)
        except NvmlGpuLostError:
            raise
        except NvmlNotSupportedError as err:
            self._log_once(
                logging.INFO, field, "unsupported", err, "is not available here, recorded as NULL"
            )
        except NvmlCallError as err:
            self._log_once(
                logging.WARNING, field, str(err.code), err, "could not be read, recorded as NULL"
            )
        return None

    def _log_once(self, level: int, field: str, kind: str, err: NvmlCallError, what: str) -> None:
        key = (field, getattr(self, "driver_version", ""), kind)
        if key in self._logged:
            return
        self._logged.add(key)
        log.log(
            level,
            "NVML %s %s (%s; driver %s; logged once per field and driver)",
            field,
            what,
            err,
            key[1] or "unknown",
        )

    # -- inventory ---------------------------------------------------------------------------
    def inventory(self, now: dt.datetime) -> list[GpuInventory]:
        """One row per GPU, plus one per MIG GPU instance; re-reads the MIG layout.

        ``nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,serial,memory.total,
        driver_version,compute_cap,mig.mode.current --format=csv`` and ``nvidia-smi -L``.
        A MIG instance's row has ``mig_instance`` = its GPU-instance id, ``mig_profile``
        ("1g.5gb") and ``capacity_fraction`` = its slices / the GPU's slices (1/7). The
        parent GPU's row carries the share that no instance covers, so the fractions of a GPU
        add up to 1; a fully partitioned GPU has no parent row (fractions must be > 0). A lost
        GPU known from an earlier inventory is reported unhealthy.
        """
        _check_aware(now)
        self._discover()
        rows: list[GpuInventory] = []
        for dev in self._devices or ():
            if not dev.uuid:
                continue  # lost before it was identified: collect() rejects it
            base = GpuInventory(
                ts=now,
                cluster=self.cluster,
                pool=self.pool,
                node=self.node,
                gpu_uuid=dev.uuid,
                gpu_index=dev.index,
                gpu_model=dev.name,
                memory_total_bytes=dev.memory_total_bytes,
                health="unhealthy" if dev.lost else "healthy",
                health_reason=dev.lost,
                driver_version=self.driver_version,
                cuda_version=self.cuda_version,
                compute_capability=dev.compute_capability,
                pci_bus_id=dev.pci_bus_id,
                serial=dev.serial,
                source=SOURCE,
            )
            if dev.mig_remainder > 1e-9:
                rows.append(base._replace(capacity_fraction=dev.mig_remainder))
            rows += [
                base._replace(
                    mig_instance=str(m.gi),
                    mig_profile=m.profile,
                    capacity_fraction=m.fraction,
                    memory_total_bytes=m.memory_total_bytes,
                )
                for m in dev.migs
            ]
        return rows

    def _discover(self) -> None:
        """(Re)read the devices and their MIG layout; keep what was known of lost ones."""
        known = {d.index: d for d in self._devices or ()}
        count = self.backend.device_count()
        devices = []
        for index in range(count):
            try:
                dev = self._identify(index)
            except NvmlCallError as err:  # lost, or not even a handle: keep what we knew
                dev = known.get(index, _Device(index))
                dev.lost = _lost_reason(err)
            devices.append(dev)
        self._devices = devices
        for dev in devices:
            if dev.uuid and not dev.lost and dev.uuid not in self._watched:
                try:
                    self._read("xid", self.backend.watch_xid, dev.handle)
                    self._watched.add(dev.uuid)
                except NvmlGpuLostError as err:
                    dev.lost = _lost_reason(err)

    def _identify(self, index: int) -> _Device:
        b = self.backend
        h = b.device_handle(index)
        dev = _Device(index, h, uuid=self._read("gpu_uuid", b.uuid, h) or "")
        if not dev.uuid:
            dev.lost = "NVML cannot read the GPU's UUID"
            return dev
        dev.name = self._read("gpu_model", b.name, h) or ""
        dev.serial = self._read("serial", b.serial, h) or ""
        dev.pci_bus_id = self._read("pci_bus_id", b.pci_bus_id, h) or ""
        cc = self._read("compute_capability", b.compute_capability, h)
        dev.compute_capability = f"{cc[0]}.{cc[1]}" if cc else ""
        memory = self._read("memory_total_bytes", b.memory, h)
        dev.memory_total_bytes = memory[1] if memory else None
        dev.mig_mode = bool(self._read("mig_mode", b.mig_enabled, h))
        if dev.mig_mode:
            self._identify_migs(dev)
        return dev

    def _identify_migs(self, dev: _Device) -> None:
        b = self.backend
        profiles = self._read("mig_profile", b.gpu_instance_profiles, dev.handle) or []
        total = max((p.slice_count for p in profiles), default=7)
        used = 0
        for mig in self._read("mig_instance", b.mig_devices, dev.handle) or []:
            memory = self._read("memory_total_bytes", b.memory, mig.handle)
            used += mig.slice_count
            dev.migs.append(
                _Mig(
                    mig.handle,
                    mig.gpu_instance_id,
                    mig_profile_name(mig.slice_count, mig.memory_mib, profiles),
                    mig.slice_count / total,
                    memory[1] if memory else None,
                )
            )
        dev.migs.sort(key=lambda m: m.gi)
        dev.mig_remainder = max(0.0, (total - used) / total)

    # -- samples -----------------------------------------------------------------------------
    def collect(self, now: dt.datetime) -> NvmlPoll:
        """Sample every GPU and MIG instance once, at ``now`` (timezone-aware).

        ``nvidia-smi --query-gpu=timestamp,uuid,utilization.gpu,utilization.memory,
        memory.used,memory.total,power.draw,temperature.gpu,clocks.sm --format=csv``, with
        the Xid errors NVML reported since the last poll, the running compute processes and
        the health counters. A lost GPU becomes a Reject and a ``gpu_lost`` health note; the
        other GPUs are sampled as usual.
        """
        _check_aware(now)
        if self._devices is None:
            self._discover()
        try:
            xids = self._read("xid", self.backend.xid_events) or []
        except NvmlGpuLostError:
            xids = []
        owners: dict[int, CgroupOwner] = {}
        samples: list[GpuSample] = []
        processes: list[GpuProcess] = []
        health: list[GpuHealth] = []
        rejects: list[Reject] = []
        for dev in self._devices or ():
            if not dev.lost:
                try:
                    self._sample(dev, now, xids, owners, samples, processes, health)
                    continue
                except NvmlGpuLostError as err:
                    dev.lost = _lost_reason(err)
            rejects.append(self._lost_reject(dev))
            if dev.uuid:
                health.append(
                    GpuHealth(now, dev.uuid, gpu_lost=True, cluster=self.cluster, node=self.node)
                )
        return NvmlPoll(samples, processes, health, rejects)

    def _sample(
        self,
        dev: _Device,
        now: dt.datetime,
        xids: Sequence[XidEvent],
        owners: dict[int, CgroupOwner],
        samples: list[GpuSample],
        processes: list[GpuProcess],
        health: list[GpuHealth],
    ) -> None:
        """Append one GPU's samples (parent and MIG instances), processes and health; all or
        nothing: a lost GPU raises before anything is appended."""
        b, h = self.backend, dev.handle
        util = self._read("gpu_util_ratio", b.utilization, h)
        memory = self._read("memory_used_bytes", b.memory, h)
        power = self._read("power_watts", b.power_mw, h)
        # tensor_active_ratio stays None: NVML has no plain tensor-pipe counter, only GPM
        # metrics (Hopper and later) that need two timed samples.
        base = GpuSample(
            ts=now,
            cluster=self.cluster,
            node=self.node,
            gpu_uuid=dev.uuid,
            gpu_index=dev.index,
            gpu_model=dev.name,
            gpu_util_ratio=util[0] / 100 if util else None,
            mem_util_ratio=util[1] / 100 if util else None,
            memory_used_bytes=memory[0] if memory else None,
            memory_total_bytes=memory[1] if memory else dev.memory_total_bytes,
            power_watts=power / 1000 if power is not None else None,
            energy_millijoules=self._read("energy_millijoules", b.energy_mj, h),
            temperature_celsius=self._read("temperature_celsius", b.temperature_c, h),
            sm_clock_mhz=self._read("sm_clock_mhz", b.sm_clock_mhz, h),
            xid=_last_xid(xids, dev.uuid, None),
            source=SOURCE,
        )
        new_health = self._health(dev, now)
        # In MIG mode processes are listed per instance (the parent's list needs root).
        procs = [] if dev.mig_mode else self._processes(dev, h, "", now, owners, with_util=True)
        new_samples = [base._replace(job_id=_single_job(procs))]
        for m in dev.migs:
            mig_memory = self._read("memory_used_bytes", b.memory, m.handle)
            mig_procs = self._processes(dev, m.handle, str(m.gi), now, owners, with_util=False)
            procs += mig_procs
            new_samples.append(
                GpuSample(
                    ts=now,
                    cluster=self.cluster,
                    node=self.node,
                    gpu_uuid=dev.uuid,
                    gpu_index=dev.index,
                    gpu_model=dev.name,
                    mig_instance=str(m.gi),
                    mig_profile=m.profile,
                    memory_used_bytes=mig_memory[0] if mig_memory else None,
                    memory_total_bytes=mig_memory[1] if mig_memory else m.memory_total_bytes,
                    xid=_last_xid(xids, dev.uuid, m.gi),
                    job_id=_single_job(mig_procs),
                    source=SOURCE,
                )
            )
        samples += new_samples
        processes += procs
        health.append(new_health)

    def _health(self, dev: _Device, now: dt.datetime) -> GpuHealth:
        b, h = self.backend, dev.handle
        remapped = self._read("remapped_rows", b.remapped_rows, h)
        corr, unc, pending, failure = remapped if remapped else (None, None, None, None)
        return GpuHealth(
            now,
            dev.uuid,
            clock_event_reasons=self._read("clock_event_reasons", b.clock_event_reasons, h),
            ecc_dbe_volatile=self._read("ecc_dbe_volatile", b.ecc_dbe_volatile, h),
            remapped_rows_correctable=corr,
            remapped_rows_uncorrectable=unc,
            remapped_rows_pending=pending,
            remapped_rows_failure=failure,
            cluster=self.cluster,
            node=self.node,
        )

    def _processes(
        self,
        dev: _Device,
        h: Handle,
        mig: str,
        now: dt.datetime,
        owners: dict[int, CgroupOwner],
        *,
        with_util: bool,
    ) -> list[GpuProcess]:
        """The compute processes on ``h`` with their owners and (whole GPUs) SM shares."""
        found = self._read("processes", self.backend.compute_processes, h) or []
        if not found:
            return []
        sm = self._sm_shares(dev, h) if with_util else {}
        out = []
        for p in found:
            if p.pid not in owners:
                owners[p.pid] = owner_of_pid(p.pid, self.proc_root)
            owner = owners[p.pid]
            out.append(
                GpuProcess(
                    now,
                    dev.uuid,
                    mig,
                    p.pid,
                    p.used_memory_bytes,
                    sm.get(p.pid),
                    owner.pod_uid,
                    owner.container_id,
                    owner.slurm_job_id,
                    cluster=self.cluster,
                    node=self.node,
                )
            )
        return out

    def _sm_shares(self, dev: _Device, h: Handle) -> dict[int, float]:
        """Mean SM utilisation (ratio) per PID over the samples since the last poll."""
        since = self._proc_util_since.get(dev.uuid, 0)
        found = (
            self._read("process_sm_util_ratio", self.backend.process_utilization, h, since) or []
        )
        per_pid: dict[int, list[int]] = {}
        for s in found:
            per_pid.setdefault(s.pid, []).append(s.sm_util_percent)
            since = max(since, s.timestamp_us)
        self._proc_util_since[dev.uuid] = since
        return {pid: min(1.0, sum(v) / len(v) / 100) for pid, v in per_pid.items()}

    def _lost_reject(self, dev: _Device) -> Reject:
        payload = {
            "gpu_index": dev.index,
            "gpu_uuid": dev.uuid,
            "gpu_model": dev.name,
            "pci_bus_id": dev.pci_bus_id,
        }
        return Reject(
            source=f"{SOURCE}:{self.node}",
            kind="gpu_sample",
            field="gpu_uuid",
            value=dev.uuid or f"index {dev.index}",
            reason=dev.lost,
            payload=json.dumps(payload),
        )

    def close(self) -> None:
        """Release NVML (the backend)."""
        self.backend.close()

    def __enter__(self) -> NvmlCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lost_reason(err: NvmlCallError) -> str:
    if not isinstance(err, NvmlGpuLostError):
        return f"NVML cannot reach the GPU ({err}): check `nvidia-smi` on this node"
    return (
        f"GPU is lost ({err}): it fell off the bus or stopped responding; check dmesg "
        "for Xid 79, then reset the GPU or reboot the node"
    )


def _check_aware(now: dt.datetime) -> None:
    if now.tzinfo is None:
        raise ValueError(f"now must be timezone-aware (UTC), got {now!r}")


def _last_xid(events: Sequence[XidEvent], uuid: str, gi: int | None) -> int | None:
    """The last Xid on this GPU (``gi`` None: any instance) or on MIG instance ``gi``."""
    last = None
    for e in events:
        if e.gpu_uuid == uuid and (gi is None or e.gpu_instance_id == gi):
            last = e.xid
    return last


def _single_job(procs: Sequence[GpuProcess]) -> str:
    """The Slurm job that owns every process here, or "" (none, several, or a stranger)."""
    jobs = {p.slurm_job_id for p in procs}
    return jobs.pop() if len(jobs) == 1 else ""
