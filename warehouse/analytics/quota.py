"""Every tenant's position against its quota in each pool and GPU model of a cluster at one
instant, with the jobs it has waiting there: what scheduler advice weighs (who borrows, whose
guarantee goes unused, whose jobs wait under their own guarantee).

The terms are :mod:`warehouse.analytics.explain`'s (Kueue's): a tenant holding more than its
guarantee *borrows* the difference from the cohort (the pool); what it holds less than its
guarantee is *unused*, lent to the others as far as its lend limit allows (None: all of it).
The quotas are the warehouse's in force at the instant (``why_quotas_at.sql``), or a frame of
the same columns the caller read elsewhere (a Kueue cluster's ClusterQueues).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from warehouse import queries
from warehouse.analytics import queues
from warehouse.client import Warehouse

EPS = 1e-6
#: The columns a quotas frame has (NULL limits: none).
QUOTA_COLUMNS = {
    "tenant": pl.String,
    "pool": pl.String,
    "gpu_model": pl.String,
    "guaranteed_gpus": pl.Float64,
    "borrow_limit_gpus": pl.Float64,
    "lend_limit_gpus": pl.Float64,
}


@dataclasses.dataclass(frozen=True)
class WaitingJob:
    """A job attempt waiting at the instant, and since when."""

    job_id: str
    tenant: str
    pool: str
    gpu_model: str
    gpus: float
    since: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Position:
    """A tenant's position in one (pool, GPU model) (model '': a pool-wide quota)."""

    tenant: str
    pool: str
    gpu_model: str
    has_quota: bool
    guaranteed_gpus: float
    borrow_limit_gpus: float | None
    lend_limit_gpus: float | None
    held_gpus: float
    waiting: tuple[WaitingJob, ...] = ()
    #: the jobs holding GPUs here, with how many each holds (shares summed)
    holders: tuple[tuple[str, float], ...] = ()

    @property
    def borrowed_gpus(self) -> float:
        return max(0.0, self.held_gpus - self.guaranteed_gpus)

    @property
    def unused_gpus(self) -> float:
        return max(0.0, self.guaranteed_gpus - self.held_gpus)

    @property
    def waiting_gpus(self) -> float:
        return sum(w.gpus for w in self.waiting)

    @property
    def waiting_within_guarantee_gpus(self) -> float:
        """The waiting demand its own unused guarantee covers: what a reclaim would serve."""
        return min(self.unused_gpus, self.waiting_gpus)

    def facts(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc.pop("waiting")
        doc.pop("holders")
        doc.update(
            borrowed_gpus=self.borrowed_gpus,
            unused_gpus=self.unused_gpus,
            waiting_gpus=self.waiting_gpus,
            waiting_jobs=[w.job_id for w in self.waiting],
        )
        return doc


def quotas_at(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """The warehouse's quotas of ``cluster`` in force at ``at`` (:data:`QUOTA_COLUMNS`)."""
    frame = queries.run(wh, "why_quotas_at", cluster=cluster, at=at)
    return frame.select(list(QUOTA_COLUMNS)).cast(QUOTA_COLUMNS)  # type: ignore[arg-type]


def waiting_jobs(wh: Warehouse, cluster: str, at: dt.datetime) -> list[WaitingJob]:
    """The job attempts of ``cluster`` waiting at ``at``, longest waiting first."""
    rows = queues.attempts(wh, cluster, at, at + dt.timedelta(milliseconds=1)).filter(
        pl.col("queued_ts").is_not_null()
        & (pl.col("queued_ts") <= at)
        & (pl.col("left_queue_ts").is_null() | (pl.col("left_queue_ts") > at))
    )
    return [
        WaitingJob(r["job_id"], r["tenant"], r["pool"], r["gpu_model"], float(r["gpus_requested"]),
                   r["queued_ts"])
        for r in rows.sort("queued_ts", "job_id").iter_rows(named=True)
    ]  # fmt: skip


def _quota(quotas: pl.DataFrame, tenant: str, pool: str, model: str) -> dict[str, Any] | None:
    """The tenant's quota row for (pool, model), else its pool-wide row (model ''), else None."""
    rows = quotas.filter((pl.col("tenant") == tenant) & (pl.col("pool") == pool))
    for wanted in (model, ""):
        exact = rows.filter(pl.col("gpu_model") == wanted)
        if exact.height:
            return exact.row(0, named=True)
    return None


def _key(quotas: pl.DataFrame, tenant: str, pool: str, model: str) -> tuple[str, str, str]:
    """Where a holding or a waiting job of (pool, model) counts: its quota's (pool, model)."""
    found = _quota(quotas, tenant, pool, model)
    return (tenant, pool, found["gpu_model"] if found else model)


def positions(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    *,
    quotas: pl.DataFrame | None = None,
) -> list[Position]:
    """Every tenant's position at ``at`` in each (pool, model) of ``cluster`` where it has a
    quota, holds GPUs or has jobs waiting, sorted by tenant, pool and model. ``quotas``
    (:data:`QUOTA_COLUMNS`) replaces the warehouse's (:func:`quotas_at`)."""
    if quotas is None:
        quotas = quotas_at(wh, cluster, at)
    allocs = queries.run(
        wh, "why_open_allocations", cluster=cluster, at=at, tenant="", util_window_s=60
    )
    waiting = waiting_jobs(wh, cluster, at)
    keys = {(r["tenant"], r["pool"], r["gpu_model"]) for r in quotas.iter_rows(named=True)}
    held: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in allocs.iter_rows(named=True):
        jobs = held.setdefault(_key(quotas, r["tenant"], r["pool"], r["gpu_model"]), {})
        jobs[r["job_id"]] = jobs.get(r["job_id"], 0.0) + float(r["fraction"])
    queued: dict[tuple[str, str, str], list[WaitingJob]] = {}
    for w in waiting:
        queued.setdefault(_key(quotas, w.tenant, w.pool, w.gpu_model), []).append(w)
    out = []
    for tenant, pool, model in sorted(keys | set(held) | set(queued)):
        quota = _quota(quotas, tenant, pool, model)
        out.append(
            Position(
                tenant,
                pool,
                model,
                quota is not None,
                float(quota["guaranteed_gpus"]) if quota else 0.0,
                _limit(quota, "borrow_limit_gpus"),
                _limit(quota, "lend_limit_gpus"),
                sum(held.get((tenant, pool, model), {}).values()),
                tuple(queued.get((tenant, pool, model), ())),
                tuple(sorted(held.get((tenant, pool, model), {}).items())),
            )
        )
    return out


def _limit(quota: Mapping[str, Any] | None, name: str) -> float | None:
    return None if quota is None or quota[name] is None else float(quota[name])


def job_details(wh: Warehouse, cluster: str, job_ids: Iterable[str]) -> dict[str, dict[str, str]]:
    """What the scheduler calls each job (name, namespace), its workload type and queue."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    frame = queries.run(wh, "advice_jobs", cluster=cluster, job_ids=ids)
    return {r["job_id"]: r for r in frame.iter_rows(named=True)}
