"""One GPU as the viewer may see it: its telemetry over the range (and which of it the GPU's
source does not report), the jobs that held it and when, and how much of each hold was idle.

Who sees what: a viewer limited to a tenant (a tenant's lead, or anyone who picked a tenant
in the filters) sees the GPU only while that tenant's jobs held it — its own holds, and the
telemetry of the minutes wholly inside them; no other tenant's job, and nothing of the GPU
outside those holds. A GPU it never held in the range (or one not in the warehouse) reads
the same: "no job of yours held it", so GPUs cannot be probed for.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import polars as pl

from dashboards import context
from dashboards.answers.ledger import cluster_of
from dashboards.context import Viewer
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.analytics import gpu

_MAX_UUID = 200
#: Where the GPU's idle runs and a manager's telemetry are read while its holds are (a
#: tenant's telemetry needs its holds first). Threads, never processes: the engine forbids
#: forking once open.
_BESIDE = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpu-telemetry")
#: The telemetry columns a GPU's source may not report at all (NVML has no tensor activity, a
#: vGPU no power): null in every bucket, they read "not reported", never as zero.
TELEMETRY = (
    "util_mean",
    "memory_used_bytes",
    "power_watts",
    "temperature_celsius",
    "sm_clock_mhz",
    "tensor_active_ratio",
)


@dataclasses.dataclass(frozen=True)
class Hold:
    """One job's hold of the GPU, cut to the range: held and idle GPU-hours in it."""

    job_id: str
    attempt: int
    tenant: str
    mig_instance: str
    fraction: float
    start: dt.datetime  # as stored (may be before the range)
    end: dt.datetime | None  # None: still held
    shown_from: dt.datetime  # cut to the range
    shown_to: dt.datetime
    held_gpu_hours: float
    idle_gpu_hours: float
    idle: tuple[tuple[dt.datetime, dt.datetime], ...]  # the idle stretches in the range


@dataclasses.dataclass(frozen=True)
class GpuView:
    gpu_uuid: str
    scope: str | None
    start: dt.datetime
    end: dt.datetime  # the range cut at now
    cluster: str = ""
    identity: dict[str, Any] | None = None
    holds: tuple[Hold, ...] = ()
    telemetry: pl.DataFrame | None = None
    message: str = ""  # the empty state, when there is nothing to show

    @property
    def held_gpu_hours(self) -> float:
        return sum(h.held_gpu_hours for h in self.holds)

    @property
    def idle_gpu_hours(self) -> float:
        return sum(h.idle_gpu_hours for h in self.holds)

    @property
    def unreported(self) -> tuple[str, ...]:
        """The :data:`TELEMETRY` columns with no value in any bucket although the GPU has
        telemetry in the range: its source does not report them."""
        frame = self.telemetry
        if frame is None or not frame.height:
            return ()
        return tuple(c for c in TELEMETRY if frame[c].null_count() == frame.height)


def _checked(gpu_uuid: str) -> str:
    text = (gpu_uuid or "").strip()
    if not text or len(text) > _MAX_UUID or any(ord(c) < 32 for c in text):
        raise InputError(
            f"GPU {text[:40]!r} is not a GPU's UUID: open a GPU from the Idle page or the inventory"
        )
    return text


def _holds(
    held: pl.DataFrame, idle: pl.DataFrame, a: dt.datetime, b: dt.datetime
) -> tuple[Hold, ...]:
    stretches: dict[int, list[tuple[dt.datetime, dt.datetime, float]]] = {}
    for r in idle.iter_rows(named=True):
        stretches.setdefault(r["hold"], []).append((r["start"], r["end"], r["idle_gpu_hours"]))
    out = []
    for r in held.iter_rows(named=True):
        s, e = max(r["start_ts"], a), min(r["end_ts"] or b, b)
        mine = stretches.get(r["hold"], [])
        out.append(
            Hold(
                r["job_id"], r["attempt"], r["tenant"], r["mig_instance"], r["fraction"],
                r["start_ts"], r["end_ts"], s, e,
                max(0.0, (e - s).total_seconds() / 3600 * r["fraction"]),
                sum(x[2] for x in mine), tuple((x[0], x[1]) for x in mine),
            )
        )  # fmt: skip
    return tuple(out)


def gpu_view(gpu_uuid: str, filters: Filters, viewer: Viewer) -> GpuView:
    """The GPU ``gpu_uuid`` over the filters' range, as ``viewer`` may see it."""
    ctx = context.get()
    scope = viewer.scope(filters.tenant)
    uuid = _checked(gpu_uuid)
    a, b = filters.window.start, filters.window.until(ctx.now())
    view = GpuView(uuid, scope, a, b)
    found = gpu.identity(ctx.wh, uuid, cluster_of(filters))
    nothing = (
        f"No job of {scope} held GPU {uuid} between {a:%Y-%m-%d %H:%M} and {b:%Y-%m-%d %H:%M} "
        "UTC: pick another range, or a GPU from the Idle page."
        if scope is not None
        else f"GPU {uuid} is not in the warehouse's inventory"
        + (f" of cluster {filters.cluster}" if filters.cluster else "")
        + ": open one from the Idle page or the inventory."
    )
    if not found.height:
        return dataclasses.replace(view, message=nothing)
    cluster = str(found["cluster"][0])
    beside: Future[pl.DataFrame] | None = None
    runs: Future[pl.DataFrame] | None = None
    threshold, min_s = ctx.idle.threshold_ratio, ctx.idle.min_duration_s
    if b > a:
        runs = _BESIDE.submit(
            gpu.idle_runs,
            ctx.wh,
            cluster,
            uuid,
            a=a,
            b=b,
            threshold_ratio=threshold,
            min_duration_s=min_s,
        )
        if scope is None:
            beside = _BESIDE.submit(gpu.telemetry, ctx.wh, cluster, uuid, a, b)
    held = gpu.holds(ctx.wh, cluster, uuid, a, b, tenant=scope or "")
    if scope is not None and not held.height:
        return dataclasses.replace(view, message=nothing)
    idle = gpu.hold_idle(
        ctx.wh,
        held,
        a=a,
        b=b,
        threshold_ratio=threshold,
        min_duration_s=min_s,
        runs=runs.result() if runs is not None else None,
    )
    holds = _holds(held, idle, a, b)
    if beside is not None:
        telemetry: pl.DataFrame | None = beside.result()
    elif b > a:
        within = [(h.shown_from, h.shown_to) for h in holds]
        telemetry = gpu.telemetry(ctx.wh, cluster, uuid, a, b, within=within)
    else:
        telemetry = None
    return dataclasses.replace(
        view,
        cluster=cluster,
        identity=found.row(0, named=True),
        holds=holds,
        telemetry=telemetry,
    )
