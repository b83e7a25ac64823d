"""The DCGM fields the dcgm-exporter source maps, their valid ranges, and DCGM's blank values.

:data:`FIELDS` is the catalogue :mod:`collector.dcgm.collector` parses against: for each exporter
metric, the sample field it fills, its Prometheus type, the scale to the field's unit, the range a
real reading can take and whether it is a property of the physical GPU (device-level, kept once per
board under MIG). :func:`is_blank` spots DCGM's blank sentinels. The docstring of
:mod:`collector.dcgm.collector` has the mapping as a table and the reasoning behind the blank
thresholds; that module re-exports these names.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["FIELDS", "FP64_BLANK", "INT32_BLANK", "INT64_BLANK", "is_blank"]

INT32_BLANK = 0x7FFFFFF0  # 2147483632
INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # 9223372036854775792
FP64_BLANK = 140737488355328.0  # 2**47


class _Field(NamedTuple):
    key: str  # sample field, or fb_used/fb_free/fb_reserved (MiB, combined later)
    prom_type: str  # the type in dcgm-exporter's catalogue (default-counters.csv)
    scale: float
    lo: float  # valid range, in the exporter's unit
    hi: float
    integer: bool
    device_level: bool
    unit: str


#: The DCGM fields this source maps; everything else in a body is ignored (and counted).
FIELDS: dict[str, _Field] = {
    "DCGM_FI_DEV_GPU_UTIL": _Field("gpu_util_ratio", "gauge", 0.01, 0, 100, False, False, "%"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": _Field(
        "gr_engine_active_ratio", "gauge", 1.0, 0, 1, False, False, "ratio"
    ),
    # Per GPU instance under MIG, like GR_ENGINE_ACTIVE: the ratio of cycles the tensor pipe ran.
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": _Field(
        "tensor_active_ratio", "gauge", 1.0, 0, 1, False, False, "ratio"
    ),
    "DCGM_FI_DEV_MEM_COPY_UTIL": _Field("mem_util_ratio", "gauge", 0.01, 0, 100, False, False, "%"),
    "DCGM_FI_DEV_FB_USED": _Field("fb_used", "gauge", 1.0, 0, 1 << 24, True, False, "MiB"),
    "DCGM_FI_DEV_FB_FREE": _Field("fb_free", "gauge", 1.0, 0, 1 << 24, True, False, "MiB"),
    "DCGM_FI_DEV_FB_RESERVED": _Field("fb_reserved", "gauge", 1.0, 0, 1 << 24, True, False, "MiB"),
    "DCGM_FI_DEV_POWER_USAGE": _Field("power_watts", "gauge", 1.0, 0, 10_000, False, True, "W"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": _Field(
        "energy_millijoules", "counter", 1.0, 0, INT64_BLANK - 1, True, True, "mJ"
    ),
    "DCGM_FI_DEV_GPU_TEMP": _Field("temperature_celsius", "gauge", 1.0, -40, 200, False, True, "C"),
    "DCGM_FI_DEV_SM_CLOCK": _Field("sm_clock_mhz", "gauge", 1.0, 0, 100_000, True, True, "MHz"),
    "DCGM_FI_DEV_XID_ERRORS": _Field("xid", "gauge", 1.0, 0, (1 << 32) - 1, True, True, "xid"),
}


def is_blank(value: float, counter: bool = False) -> bool:
    """True when ``value`` is one of DCGM's blank sentinels (see
    :mod:`collector.dcgm.collector`)."""
    return value >= (float(INT64_BLANK) if counter else float(INT32_BLANK))


def _check_value(spec: _Field, metric: str, value: float) -> float | int | str | None:
    """The converted value, None for a blank, or a reason string when the value is rejected."""
    if not math.isfinite(value):
        return f"{metric} is not a finite number"
    counter = spec.prom_type == "counter"
    if is_blank(value, counter):
        return None
    if value < spec.lo:
        what = "negative counter" if counter else f"below {spec.lo:g} {spec.unit}"
        return f"{metric} is {value:g}: {what}"
    if value > spec.hi + (1e-6 if spec.unit == "ratio" else 0):
        return f"{metric} is {value:g}: above {spec.hi:g} {spec.unit}"
    if spec.integer:
        return round(value)
    return min(value * spec.scale, 1.0) if spec.key.endswith("_ratio") else value * spec.scale
