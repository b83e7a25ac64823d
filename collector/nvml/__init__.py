"""NVML, the GPU driver's own counters: the backend (the only importer of ``pynvml``) and the
collector that turns its readings into records. Everything else imports from here."""

from collector.nvml.backend import (
    LIBRARY,
    SOURCE,
    GpuHealth,
    GpuProcess,
    MigDevice,
    MigProfile,
    NvmlBackend,
    NvmlCallError,
    NvmlError,
    NvmlGpuLostError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    ProcessInfo,
    ProcessUtilization,
    PynvmlBackend,
    XidEvent,
    call_error,
)
from collector.nvml.collector import NvmlCollector, NvmlPoll, mig_profile_name

__all__ = [
    "LIBRARY",
    "SOURCE",
    "GpuHealth",
    "GpuProcess",
    "MigDevice",
    "MigProfile",
    "NvmlBackend",
    "NvmlCallError",
    "NvmlCollector",
    "NvmlError",
    "NvmlGpuLostError",
    "NvmlNotSupportedError",
    "NvmlPoll",
    "NvmlUnavailableError",
    "ProcessInfo",
    "ProcessUtilization",
    "PynvmlBackend",
    "XidEvent",
    "call_error",
    "mig_profile_name",
]
