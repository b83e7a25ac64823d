"""The jobs waiting at an instant, each with why it waits: :func:`warehouse.analytics.explain.
why_job` for a whole queue at once, reading the cluster's free state, quotas and open
allocations once instead of once per job.

A tenant's view (``tenant=``) lists the tenant's own waiting jobs alone, and their reasons
are told to it (see :func:`~warehouse.analytics.explain.waiting_reasons`' ``viewer``): the
other tenants a reclaim waits on and the other tenants' jobs ahead in the queue are counted,
never named.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import polars as pl

from warehouse import queries
from warehouse.analytics import explain
from warehouse.analytics.fragmentation import free_state
from warehouse.analytics.tenancy import in_tenant
from warehouse.client import Warehouse


@dataclasses.dataclass(frozen=True)
class Waiting:
    """One job attempt waiting at ``at``, what it asks for, and why it does not start."""

    job_id: str
    attempt: int
    tenant: str
    queue: str
    pool: str
    gpu_model: str
    priority: int
    gpus_requested: float
    gpu_fraction: float
    queued_ts: dt.datetime | None
    waited_s: float | None  # None when its queue entry is unknown
    reasons: tuple[explain.Reason, ...]

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    def to_dict(self) -> dict[str, Any]:
        """Plain types for JSON (times in ISO 8601, floats rounded to 1e-4), as ``why job``."""
        doc = dataclasses.asdict(self)
        doc["reasons"] = [dataclasses.asdict(r) for r in self.reasons]
        plain: dict[str, Any] = explain.plain(doc)
        return plain


@dataclasses.dataclass(frozen=True)
class Queue:
    """What a cluster's waiting jobs are judged against at one instant (:func:`queue_at`):
    the attempts waiting, the open allocations, the quotas in force and the free state."""

    waiting: pl.DataFrame
    allocs: pl.DataFrame
    quotas: pl.DataFrame
    free: pl.DataFrame


def _utc(at: dt.datetime) -> dt.datetime:
    if not isinstance(at, dt.datetime) or at.tzinfo is None:
        raise explain.ExplainError(f"at {at!r} must be a timezone-aware datetime (UTC)")
    return at.astimezone(dt.UTC)


def queue_at(wh: Warehouse, cluster: str, at: dt.datetime) -> Queue:
    """:class:`Queue` of ``cluster`` at ``at``, asked of the warehouse."""
    at = _utc(at)
    return _queue(wh, cluster, at, explain.waiting_at(wh, cluster, at))


def _queue(wh: Warehouse, cluster: str, at: dt.datetime, waiting: pl.DataFrame) -> Queue:
    return Queue(
        waiting,
        queries.run(
            wh, "why_open_allocations", cluster=cluster, at=at, tenant="", util_window_s=3600
        ),
        queries.run(wh, "why_quotas_at", cluster=cluster, at=at),
        free_state(wh, cluster, at),
    )


def waiting_jobs(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    *,
    tenant: str | None = None,
    pool: str = "",
    gpu_model: str = "",
    queue: Queue | None = None,
) -> list[Waiting]:
    """Every job attempt of ``cluster`` waiting at ``at`` (of ``tenant``, ``pool`` and
    ``gpu_model`` alone when given), longest-waiting first, each with the reasons it does not
    start (judged against the whole queue). ``queue``: :func:`queue_at` of the same cluster
    and instant, kept from before (else its parts are asked of the warehouse)."""
    at = _utc(at)
    waiting = queue.waiting if queue is not None else explain.waiting_at(wh, cluster, at)
    keep = in_tenant(tenant) if tenant is not None else pl.lit(True)
    for column, value in (("pool", pool), ("gpu_model", gpu_model)):
        if value:
            keep = keep & (pl.col(column) == value)
    shown = waiting.filter(keep)
    if not shown.height:
        return []
    if queue is None:  # the rest is asked only when some job waits
        queue = _queue(wh, cluster, at, waiting)
    allocs, quotas, free = queue.allocs, queue.quotas, queue.free
    out = []
    memo: dict[Any, Any] = {}
    for job in shown.sort("queued_ts", "job_id", nulls_last=True).iter_rows(named=True):
        reasons = explain.waiting_reasons(
            job["job_id"], job, quotas, allocs, free, waiting, viewer=tenant, memo=memo
        )
        queued = job["queued_ts"]
        out.append(
            Waiting(
                job_id=job["job_id"],
                attempt=int(job["attempt"]),
                tenant=job["tenant"],
                queue=job["queue"],
                pool=job["pool"],
                gpu_model=job["gpu_model"],
                priority=int(job["priority"]),
                gpus_requested=float(job["gpus_requested"] or 0.0),
                gpu_fraction=float(job["gpu_fraction"] or 1.0),
                queued_ts=queued,
                waited_s=(at - queued).total_seconds() if queued is not None else None,
                reasons=tuple(reasons),
            )
        )
    return out


def reason_counts(jobs: list[Waiting]) -> pl.DataFrame:
    """How many waiting jobs (and GPUs they ask for) each reason holds back: reason, jobs,
    gpus. A job with several reasons counts under each."""
    rows = [(code, j.gpus_requested) for j in jobs for code in dict.fromkeys(j.codes)]
    frame = pl.DataFrame(rows, schema={"reason": pl.String, "gpus": pl.Float64}, orient="row")
    return (
        frame.group_by("reason")
        .agg(pl.len().cast(pl.Int64).alias("jobs"), pl.col("gpus").sum())
        .sort("jobs", "reason", descending=[True, False])
    )
