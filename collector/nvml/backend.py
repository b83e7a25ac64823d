"""NVML seam: the only module that imports ``pynvml`` (STYLE.md item 1).

:class:`NvmlBackend` is the protocol the collector talks to (one method per NVML query, NVML's
units, this module's exceptions); :class:`PynvmlBackend` implements it over pynvml, tests hand
in fakes. A missing library or driver raises :class:`NvmlUnavailableError` at start-up
(:meth:`PynvmlBackend.open`); one failed call raises an :class:`NvmlCallError` subclass that
says whether the value is unsupported or the GPU is lost.

The collector, which never touches pynvml, is :mod:`collector.nvml.collector`
(:class:`NvmlCollector` and its error policy); the package :mod:`collector.nvml` exports both.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeVar

import pynvml

from collector.records import GpuHealth, GpuProcess
from gpuledger_errors import SourceError

__all__ = [
    "GpuHealth",
    "GpuProcess",
    "MigDevice",
    "MigProfile",
    "NvmlBackend",
    "NvmlCallError",
    "NvmlError",
    "NvmlGpuLostError",
    "NvmlNotSupportedError",
    "NvmlUnavailableError",
    "ProcessInfo",
    "ProcessUtilization",
    "PynvmlBackend",
    "XidEvent",
    "call_error",
]

log = logging.getLogger("collector.nvml")  # one logger for the backend and the collector
T = TypeVar("T")
Handle = Any  # an opaque device handle (pynvml's c_nvmlDevice_t, or whatever a fake uses)
SOURCE = "nvml"
LIBRARY = "libnvidia-ml.so.1"

# NVML return codes (nvml.h); named here so that nothing above the backend needs pynvml.
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, DRIVER_NOT_LOADED, TIMEOUT = 3, 4, 6, 9, 10
LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH = 12, 13, 15, 18
_UNSUPPORTED = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION})
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId of an event that names no MIG instance


# -- errors ------------------------------------------------------------------------------------
class NvmlError(SourceError):
    """Root of this collector's errors."""


_START_ADVICE = {
    LIBRARY_NOT_FOUND: f"NVML library {LIBRARY} not found: install the NVIDIA driver (in "
    "a container, run it with the NVIDIA container toolkit or pass the "
    "mounted library's path), or run the dcgm collector instead",
    DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded: check `nvidia-smi` and "
    "`lsmod | grep nvidia` (modprobe nvidia), or run the dcgm "
    "collector instead",
    LIB_RM_VERSION_MISMATCH: "the NVML library and the loaded NVIDIA kernel driver are "
    "different versions (driver upgraded without a reboot?): "
    "reboot the node or reload the nvidia kernel modules",
    NO_PERMISSION: "no permission to open the NVIDIA devices (/dev/nvidiactl, "
    "/dev/nvidia*): run the collector as a user or in a container that "
    "can see the GPUs",
}


class NvmlUnavailableError(NvmlError):
    """NVML cannot start on this node (no library, no driver, a version mismatch).

    Raised once, by :meth:`PynvmlBackend.open`; the message says what to do.
    """

    def __init__(self, code: int, detail: str = ""):
        self.code = code
        advice = _START_ADVICE.get(
            code,
            "NVML failed to start: check `nvidia-smi` on this "
            "node, or run the dcgm collector instead",
        )
        super().__init__(f"{advice} (NVML: {detail})" if detail else advice)


class NvmlCallError(NvmlError):
    """One NVML call failed; ``code`` is NVML's return code, ``function`` the C function."""

    def __init__(self, code: int, function: str, detail: str = ""):
        self.code, self.function, self.detail = code, function, detail
        super().__init__(f"{function}: {detail or f'NVML error {code}'}")


class NvmlNotSupportedError(NvmlCallError):
    """The GPU, driver or our permissions do not offer this value: a missing value."""


class NvmlGpuLostError(NvmlCallError):
    """NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus or stopped responding."""


def call_error(code: int, function: str, detail: str = "") -> NvmlCallError:
    """The :class:`NvmlCallError` subclass for an NVML return code."""
    if code in _UNSUPPORTED:
        return NvmlNotSupportedError(code, function, detail)
    if code == GPU_IS_LOST:
        return NvmlGpuLostError(code, function, detail)
    return NvmlCallError(code, function, detail)


# -- what a backend returns --------------------------------------------------------------------
class MigProfile(NamedTuple):
    """A GPU-instance profile the GPU offers (``nvidia-smi mig -lgip``)."""

    id: int
    name: str  # e.g. "MIG 1g.5gb"
    slice_count: int
    memory_mib: int


class MigDevice(NamedTuple):
    """A MIG device (GPU instance) of a GPU in MIG mode, as its attributes describe it."""

    handle: Handle
    gpu_instance_id: int
    slice_count: int  # GPU-instance slices (1 of 7 for a 1g profile)
    memory_mib: int


class ProcessInfo(NamedTuple):
    pid: int
    used_memory_bytes: int | None  # None where the driver cannot tell (Windows WDDM)


class ProcessUtilization(NamedTuple):
    pid: int
    timestamp_us: int  # CPU time of the sample, microseconds since the epoch
    sm_util_percent: int


class XidEvent(NamedTuple):
    gpu_uuid: str
    gpu_instance_id: int | None  # the MIG GPU instance the Xid names, if any
    xid: int


class NvmlBackend(Protocol):
    """The NVML queries the collector needs, in NVML's units; every method may raise
    :class:`NvmlCallError` (or a subclass). ``h`` is a device handle from
    :meth:`device_handle` or :meth:`mig_devices`."""

    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...  # e.g. 12040 for CUDA 12.4
    def device_count(self) -> int: ...
    def device_handle(self, index: int) -> Handle: ...
    def name(self, h: Handle) -> str: ...
    def uuid(self, h: Handle) -> str: ...
    def serial(self, h: Handle) -> str: ...
    def pci_bus_id(self, h: Handle) -> str: ...
    def compute_capability(self, h: Handle) -> tuple[int, int]: ...
    def memory(self, h: Handle) -> tuple[int, int]: ...  # (used, total) bytes
    def mig_enabled(self, h: Handle) -> bool: ...  # current MIG mode
    def mig_devices(self, h: Handle) -> list[MigDevice]: ...  # existing MIG devices only
    def gpu_instance_profiles(self, h: Handle) -> list[MigProfile]: ...
    def utilization(self, h: Handle) -> tuple[int, int]: ...  # (gpu %, memory %)
    def power_mw(self, h: Handle) -> int: ...
    def energy_mj(self, h: Handle) -> int: ...
    def temperature_c(self, h: Handle) -> float: ...
    def sm_clock_mhz(self, h: Handle) -> int: ...
    def clock_event_reasons(self, h: Handle) -> int: ...
    def ecc_dbe_volatile(self, h: Handle) -> int: ...
    def remapped_rows(self, h: Handle) -> tuple[int, int, bool, bool]: ...
    def compute_processes(self, h: Handle) -> list[ProcessInfo]: ...
    def process_utilization(self, h: Handle, since_us: int) -> list[ProcessUtilization]: ...
    def watch_xid(self, h: Handle) -> None: ...  # register for Xid critical-error events
    def xid_events(self) -> list[XidEvent]: ...  # drain the events seen since; never blocks
    def close(self) -> None: ...


# -- the real backend --------------------------------------------------------------------------
def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class PynvmlBackend:
    """:class:`NvmlBackend` over ``pynvml`` (nvidia-ml-py); open it with :meth:`open`."""

    def __init__(self, library: ctypes.CDLL | None = None):
        self._library = library  # keeps a library loaded by path referenced
        self._events: Any = None

    @classmethod
    def open(cls, library_path: str | os.PathLike[str] | None = None) -> PynvmlBackend:
        """Initialise NVML, or raise :class:`NvmlUnavailableError` saying what to do.

        ``library_path`` loads ``libnvidia-ml.so.1`` from a place the dynamic loader does not
        search (a driver mounted into a container, a test stand-in); it must carry the
        ``libnvidia-ml.so.1`` soname, as NVIDIA's does, so pynvml then finds it loaded. It
        has no effect once pynvml has loaded a library in this process.
        """
        library = None
        if library_path is not None:
            try:
                library = ctypes.CDLL(os.fspath(library_path))
            except OSError as err:
                raise NvmlUnavailableError(LIBRARY_NOT_FOUND, str(err)) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise NvmlUnavailableError(err.value, str(err)) from None
        return cls(library)

    @staticmethod
    def _call(fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            raise call_error(err.value, fn.__name__, str(err)) from None

    def driver_version(self) -> str:
        return _text(self._call(pynvml.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> int:
        return int(self._call(pynvml.nvmlSystemGetCudaDriverVersion_v2))

    def device_count(self) -> int:
        return int(self._call(pynvml.nvmlDeviceGetCount))

    def device_handle(self, index: int) -> Handle:
        return self._call(pynvml.nvmlDeviceGetHandleByIndex, index)

    def name(self, h: Handle) -> str:
        return _text(self._call(pynvml.nvmlDeviceGetName, h))

    def uuid(self, h: Handle) -> str:
        return _text(self._call(pynvml.nvmlDeviceGetUUID, h))

    def serial(self, h: Handle) -> str:
        return _text(self._call(pynvml.nvmlDeviceGetSerial, h))

    def pci_bus_id(self, h: Handle) -> str:
        return _text(self._call(pynvml.nvmlDeviceGetPciInfo_v3, h).busId)

    def compute_capability(self, h: Handle) -> tuple[int, int]:
        major, minor = self._call(pynvml.nvmlDeviceGetCudaComputeCapability, h)
        return int(major), int(minor)

    def memory(self, h: Handle) -> tuple[int, int]:
        # v2 leaves the driver's reserved memory out of "used", as nvidia-smi does.
        try:
            info = self._call(pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2)
        except NvmlNotSupportedError:
            info = self._call(pynvml.nvmlDeviceGetMemoryInfo, h)
        return int(info.used), int(info.total)

    def mig_enabled(self, h: Handle) -> bool:
        current, _pending = self._call(pynvml.nvmlDeviceGetMigMode, h)
        return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)

    def mig_devices(self, h: Handle) -> list[MigDevice]:
        found = []
        for i in range(self._call(pynvml.nvmlDeviceGetMaxMigDeviceCount, h)):
            try:
                mig = self._call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            except NvmlCallError as err:
                if err.code == NOT_FOUND:  # an empty slot
                    continue
                raise
            attrs = self._call(pynvml.nvmlDeviceGetAttributes_v2, mig)
            found.append(
                MigDevice(
                    mig,
                    int(self._call(pynvml.nvmlDeviceGetGpuInstanceId, mig)),
                    int(attrs.gpuInstanceSliceCount),
                    int(attrs.memorySizeMB),
                )
            )
        return found

    def gpu_instance_profiles(self, h: Handle) -> list[MigProfile]:
        profiles = []
        for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._call(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, h, profile)
            except NvmlCallError as err:
                if err.code in (NOT_SUPPORTED, 2):  # not offered here / invalid argument
                    continue
                raise
            profiles.append(
                MigProfile(
                    int(info.id), _text(info.name), int(info.sliceCount), int(info.memorySizeMB)
                )
            )
        return profiles

    def utilization(self, h: Handle) -> tuple[int, int]:
        rates = self._call(pynvml.nvmlDeviceGetUtilizationRates, h)
        return int(rates.gpu), int(rates.memory)

    def power_mw(self, h: Handle) -> int:
        return int(self._call(pynvml.nvmlDeviceGetPowerUsage, h))

    def energy_mj(self, h: Handle) -> int:
        return int(self._call(pynvml.nvmlDeviceGetTotalEnergyConsumption, h))

    def temperature_c(self, h: Handle) -> float:
        return float(self._call(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, h: Handle) -> int:
        return int(self._call(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM))

    def clock_event_reasons(self, h: Handle) -> int:
        try:  # "clock event reasons" since driver 535; "throttle reasons" before
            return int(self._call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h))
        except NvmlNotSupportedError as err:
            if err.code != FUNCTION_NOT_FOUND:
                raise
            return int(self._call(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h))

    def ecc_dbe_volatile(self, h: Handle) -> int:
        return int(
            self._call(
                pynvml.nvmlDeviceGetTotalEccErrors,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            )
        )

    def remapped_rows(self, h: Handle) -> tuple[int, int, bool, bool]:
        corr, unc, pending, failure = self._call(pynvml.nvmlDeviceGetRemappedRows, h)
        return int(corr), int(unc), bool(pending), bool(failure)

    def compute_processes(self, h: Handle) -> list[ProcessInfo]:
        try:
            procs = self._call(pynvml.nvmlDeviceGetComputeRunningProcesses_v3, h)
        except NvmlNotSupportedError as err:
            if err.code != FUNCTION_NOT_FOUND:  # drivers before 510 have only _v2
                raise
            procs = self._call(pynvml.nvmlDeviceGetComputeRunningProcesses_v2, h)
        return [
            ProcessInfo(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
            for p in procs
        ]

    def process_utilization(self, h: Handle, since_us: int) -> list[ProcessUtilization]:
        try:
            found = self._call(pynvml.nvmlDeviceGetProcessUtilization, h, since_us)
        except NvmlCallError as err:
            if err.code in (NOT_FOUND, 0):  # no samples since since_us
                return []
            raise
        return [ProcessUtilization(int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in found]

    def watch_xid(self, h: Handle) -> None:
        if self._events is None:
            self._events = self._call(pynvml.nvmlEventSetCreate)
        self._call(
            pynvml.nvmlDeviceRegisterEvents, h, pynvml.nvmlEventTypeXidCriticalError, self._events
        )

    def xid_events(self, limit: int = 1000) -> list[XidEvent]:
        events: list[XidEvent] = []
        while self._events is not None and len(events) < limit:
            try:
                data = self._call(pynvml.nvmlEventSetWait, self._events, 0)
            except NvmlCallError as err:
                if err.code == TIMEOUT:  # nothing (more) queued
                    break
                raise
            if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
                continue
            gi = int(data.gpuInstanceId)
            events.append(
                XidEvent(
                    self.uuid(data.device), None if gi == _NO_INSTANCE else gi, int(data.eventData)
                )
            )
        return events

    def close(self) -> None:
        """Free the event set and shut NVML down (best effort: errors are logged)."""
        try:
            if self._events is not None:
                self._call(pynvml.nvmlEventSetFree, self._events)
            self._call(pynvml.nvmlShutdown)
        except NvmlCallError as err:
            log.warning("NVML shutdown: %s", err)
        self._events = None


# -- the collector's names, re-exported --------------------------------------------------------
