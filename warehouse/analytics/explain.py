"""Explanations with numbers: why a job is waiting, why a GPU is idle, why a tenant is over quota.

Each answer is an :class:`Explanation` (a state, a one-line summary, and the reasons with the
numbers behind them) that renders as plain text (:meth:`Explanation.to_text`) and as a dict for
JSON (:meth:`Explanation.to_dict`). Everything is "as of ``at``" (default: now), read from the
warehouse: job events up to ``at``, the inventory history, the allocations open at ``at``
(start <= at < end), the quotas in force at ``at`` and the 1-minute utilisation rollup.

Quota terms (Kueue's): a tenant's *guarantee* in a pool for a GPU model may be exceeded by
*borrowing* unused guarantee of the cohort, up to its *borrow limit* (none: unlimited). What a
tenant holds above its guarantee is *borrowed*; what it holds below is lent to the others.
The idle threshold and durations are parameters; the CLI passes ``ledger.idle_threshold_ratio``
and ``ledger.idle_min_duration_s`` from the settings.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

from collector.records import TERMINAL_EVENTS
from gpuledger_errors import InputError
from warehouse import queries
from warehouse.analytics import queues
from warehouse.analytics.fragmentation import free_state
from warehouse.analytics.tenancy import in_tenant, owns
from warehouse.client import Warehouse

EPS = 1e-6
#: How a tenant's view names the other tenants it is told about (never by name).
OTHER_TENANTS = "other tenants"
REQUEUE_EVENTS = ("preempted", "evicted", "failed")
_MINUTE = dt.timedelta(minutes=1)


class ExplainError(InputError):
    """The thing to explain is not in the warehouse (as of the instant asked), or bad input."""


@dataclasses.dataclass(frozen=True)
class Reason:
    """One cause, with a sentence for people and the numbers behind it for machines."""

    code: str
    message: str
    numbers: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Lender:
    """A tenant whose guarantee in a pool goes unused while another borrows there."""

    tenant: str
    unused_gpus: float
    waiting_jobs: int


@dataclasses.dataclass(frozen=True)
class PoolPosition:
    """A tenant's position in one (pool, GPU model) at an instant: what it holds against its
    guarantee, what it borrowed from the cohort, how much of that sits idle, and whose unused
    guarantee it borrows. Scheduler advice reads these; ``why tenant`` explains them."""

    pool: str
    gpu_model: str
    has_quota: bool
    guaranteed_gpus: float
    borrow_limit_gpus: float | None
    held_gpus: float
    borrowed_gpus: float
    idle_gpus: float
    idle_borrowed_gpus: float
    no_samples_gpus: float
    idle_jobs: tuple[str, ...]
    lenders: tuple[Lender, ...]
    reasons: tuple[Reason, ...]

    def facts(self) -> dict[str, Any]:
        """The position without its reasons, in plain types."""
        doc = dataclasses.asdict(self)
        doc.pop("reasons")
        doc["idle_jobs"] = list(self.idle_jobs)
        doc["lenders"] = [dataclasses.asdict(x) for x in self.lenders]
        return doc


@dataclasses.dataclass(frozen=True)
class Explanation:
    """What a job, GPU or tenant is doing at ``at``, and why."""

    subject: str  # "job", "gpu" or "tenant"
    subject_id: str
    cluster: str
    at: dt.datetime
    state: str
    summary: str
    reasons: tuple[Reason, ...] = ()
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain types for JSON: times as ISO 8601, floats rounded to 1e-4."""
        return plain(
            {
                "subject": self.subject,
                "id": self.subject_id,
                "cluster": self.cluster,
                "at": self.at,
                "state": self.state,
                "summary": self.summary,
                "reasons": [dataclasses.asdict(r) for r in self.reasons],
                "facts": dict(self.facts),
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        return "\n".join(
            [self.summary, *(f"  - {r.message}" for r in self.reasons if r.message != self.summary)]
        )


def plain(value: Any) -> Any:
    """A value in plain types for JSON: times as ISO 8601, floats rounded to 1e-4."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _at(at: dt.datetime) -> dt.datetime:
    if not isinstance(at, dt.datetime) or at.tzinfo is None:
        raise ExplainError(f"at {at!r} must be a timezone-aware datetime (UTC)")
    return at.astimezone(dt.UTC)


def _ago(since: dt.datetime, at: dt.datetime) -> str:
    seconds = (at - since).total_seconds()
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _jobs(count: int) -> str:
    return "1 job is" if count == 1 else f"{count} jobs are"


def _when(ts: dt.datetime) -> str:
    return f"{ts:%Y-%m-%d %H:%M} UTC"


def waiting_at(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """The job attempts waiting at ``at`` (queued_ts <= at < left_queue_ts), read from the
    jobs that can be waiting then (:func:`warehouse.analytics.queues.attempts_waiting`)."""
    rows = queues.attempts_waiting(wh, cluster, at)
    return rows.filter(
        pl.col("queued_ts").is_not_null()
        & (pl.col("queued_ts") <= at)
        & (pl.col("left_queue_ts").is_null() | (pl.col("left_queue_ts") > at))
    )


def _quota(quotas: pl.DataFrame, tenant: str, pool: str, model: str) -> dict[str, Any] | None:
    """The tenant's quota row for (pool, model), else its pool-wide row (model ''), else None."""
    rows = quotas.filter((pl.col("tenant") == tenant) & (pl.col("pool") == pool))
    for wanted in (model, ""):
        exact = rows.filter(pl.col("gpu_model") == wanted)
        if exact.height:
            return exact.row(0, named=True)
    return None


def _held(allocs: pl.DataFrame, tenant: str | None, pool: str, model: str) -> float:
    """GPUs held at ``at`` in (pool, model) (model '': the whole pool), by one tenant or all."""
    rows = allocs.filter(pl.col("pool") == pool)
    if model:
        rows = rows.filter(pl.col("gpu_model") == model)
    if tenant is not None:
        rows = rows.filter(pl.col("tenant") == tenant)
    return float(rows["fraction"].sum())


def _open_allocations(
    wh: Warehouse, cluster: str, at: dt.datetime, tenant: str = "", util_window_s: int = 3600
) -> pl.DataFrame:
    return queries.run(
        wh,
        "why_open_allocations",
        cluster=cluster,
        at=at,
        tenant=tenant,
        util_window_s=util_window_s,
    )


# -- why is this job waiting ------------------------------------------------------------------
def why_job(wh: Warehouse, cluster: str, job_id: str, at: dt.datetime) -> Explanation:
    """Why ``job_id`` is waiting at ``at``: quota, capacity, fragmentation, priority, reclaim.

    A job that is not waiting says what it is doing instead (running, or how it ended).
    """
    at = _at(at)
    rows = list(
        queries.run(
            wh, "why_job", cluster=cluster, job_id=job_id, at=at, terminal=sorted(TERMINAL_EVENTS)
        ).iter_rows(named=True)
    )
    if not rows:
        raise ExplainError(
            f"no job {job_id!r} in cluster {cluster!r} as of {_when(at)}: check "
            "the id and the cluster (job ids are the scheduler's, e.g. a pod "
            "or Slurm job name)"
        )
    job = rows[-1]
    if job["queued_ts"] is None and len(rows) > 1 and rows[-2]["end_event"] in REQUEUE_EVENTS:
        job = {**job, "queued_ts": rows[-2]["ended_ts"]}
    shown = (
        "attempt",
        "tenant",
        "queue",
        "pool",
        "gpu_model",
        "priority",
        "gpus_requested",
        "gpu_fraction",
        "queued_ts",
        "started_ts",
        "ended_ts",
        "node",
    )
    facts: dict[str, Any] = {k: job[k] for k in shown}
    if job["ended_ts"] is not None:
        reason = f": {job['end_reason']}" if job["end_reason"] else ""
        return Explanation(
            "job",
            job_id,
            cluster,
            at,
            job["end_event"],
            f"job {job_id} is not waiting: attempt {job['attempt']} ended "
            f"{job['end_event']} at {_when(job['ended_ts'])}{reason}",
            (),
            facts,
        )
    if job["started_ts"] is not None:
        gpus = ", ".join(job["gpu_uuids"]) or "GPUs not named by the source"
        return Explanation(
            "job",
            job_id,
            cluster,
            at,
            "running",
            f"job {job_id} is not waiting: running since "
            f"{_when(job['started_ts'])} ({_ago(job['started_ts'], at)}) on "
            f"node {job['node'] or '?'} ({gpus})",
            (),
            facts,
        )
    allocs = _open_allocations(wh, cluster, at)
    quotas = queries.run(wh, "why_quotas_at", cluster=cluster, at=at)
    free = free_state(wh, cluster, at)
    facts["free_gpus_by_model"] = {
        r["gpu_model"]: r["free"]
        for r in free.group_by("gpu_model")
        .agg(pl.col("free").sum())
        .sort("gpu_model")
        .iter_rows(named=True)
    }
    reasons = waiting_reasons(job_id, job, quotas, allocs, free, waiting_at(wh, cluster, at))
    n, share = _shape(job)
    since = (
        f"since {_when(job['queued_ts'])} ({_ago(job['queued_ts'], at)})"
        if job["queued_ts"] is not None
        else "(queue entry unknown)"
    )
    summary = (
        f"job {job_id} (tenant {job['tenant']}, attempt {job['attempt']}) has been "
        f"waiting {since} for {n} x {share:g} {job['gpu_model'] or 'any-model'} GPU(s) "
        f"in pool {job['pool'] or '?'}: " + ", ".join(r.code for r in reasons)
    )
    return Explanation("job", job_id, cluster, at, "waiting", summary, tuple(reasons), facts)


def _shape(job: Mapping[str, Any]) -> tuple[int, float]:
    """(GPUs on one node, share of each) that a job asks for."""
    share = float(job["gpu_fraction"] or 1.0)
    return max(1, round(float(job["gpus_requested"]) / share)), share


def waiting_reasons(
    job_id: str,
    job: Mapping[str, Any],
    quotas: pl.DataFrame,
    allocs: pl.DataFrame,
    free: pl.DataFrame,
    waiting: pl.DataFrame,
    *,
    viewer: str | None = None,
    memo: dict[Any, Any] | None = None,
) -> list[Reason]:
    """The reasons a waiting job does not start, in the order a scheduler checks them.

    ``viewer`` set (an org or org/project): told to that tenant, so the tenants a reclaim
    waits on are named only when they are its own, and of the jobs ahead only its own are
    listed (the counts stay whole). ``memo``: a dict kept across the calls for one queue (the
    same frames), where what jobs of one shape or queue share is worked out once."""
    memo = {} if memo is None else memo
    tenant, pool, model = job["tenant"], job["pool"], job["gpu_model"]
    request = float(job["gpus_requested"])
    quota = _quota(quotas, tenant, pool, model)
    held = _held(allocs, tenant, pool, quota["gpu_model"] if quota else model)
    reasons = [
        r
        for r in (
            _quota_reason(tenant, pool, model, quota, held, request),
            _capacity(job, free, memo),
        )
        if r is not None
    ]
    if quota is not None and reasons[-1].code in ("no_free_gpu", "fragmented"):
        reclaim = _reclaim_reason(tenant, pool, quota, held, request, quotas, allocs, viewer)
        if reclaim is not None:
            reasons.append(reclaim)
    ahead = _priority_reason(job_id, job, waiting, memo, viewer)
    if ahead is not None:
        reasons.append(ahead)
    if [r.code for r in reasons] == ["capacity_available"]:
        reasons.append(
            Reason(
                "none_found",
                "no blocking reason found: quota and capacity allow "
                "it now, so the scheduler should start it at its next pass, or it "
                "waits on something gpuledger does not see (node selectors, CPU, "
                "memory)",
            )
        )
    return reasons


def _capacity(job: Mapping[str, Any], free: pl.DataFrame, memo: dict[Any, Any]) -> Reason:
    """:func:`capacity_reason`, once per shape (model, pool, GPUs, share): it reads no more."""
    key = ("capacity", job["gpu_model"], job["pool"], *_shape(job))
    if key not in memo:
        memo[key] = capacity_reason(job, free)
    reason: Reason = memo[key]
    return reason


def _quota_reason(
    tenant: str, pool: str, model: str, quota: Mapping[str, Any] | None, held: float, request: float
) -> Reason | None:
    if quota is None or quota["borrow_limit_gpus"] is None:
        return None
    guaranteed, limit = float(quota["guaranteed_gpus"]), float(quota["borrow_limit_gpus"])
    cap = guaranteed + limit
    if held + request <= cap + EPS:
        return None
    return Reason(
        "over_quota",
        f"over quota: tenant {tenant} holds {held:g} {model or ''} GPUs in pool {pool}; "
        f"its guarantee {guaranteed:g} + borrow limit {limit:g} = {cap:g}, and this job "
        f"asks for {request:g} more ({held + request:g} > {cap:g})",
        {
            "held_gpus": held,
            "guaranteed_gpus": guaranteed,
            "borrow_limit_gpus": limit,
            "request_gpus": request,
        },
    )


def capacity_reason(job: Mapping[str, Any], free: pl.DataFrame) -> Reason:
    """Whether free GPUs of the job's model (and pool, where the inventory knows it) fit it.

    ``no_free_gpu``: fewer GPUs than it needs can take its share; ``fragmented``: enough can,
    but no single node has as many; ``capacity_available``: some node could host it now.
    """
    n, share = _shape(job)
    model, pool = job["gpu_model"], job["pool"]
    units = free.filter(pl.col("gpu_model") == model) if model else free
    if pool and pool in set(units["pool"].to_list()):
        units = units.filter(pl.col("pool") == pool)
    fits = units.filter(pl.col("free") >= share - EPS)
    per_node = fits.group_by("node").len().sort("len", "node", descending=[True, False])
    total = int(fits.height)
    best = int(per_node["len"][0]) if per_node.height else 0
    biggest = max(units.group_by("node").len()["len"].to_list(), default=0)
    whole = int(units.filter((pl.col("free") >= 1 - EPS) & (pl.col("capacity") >= 1 - EPS)).height)
    name = f"{model} GPU" if model else "GPU"
    numbers = {
        "needed_gpus": n,
        "share": share,
        "fitting_gpus": total,
        "best_node_gpus": best,
        "nodes_with_room": int(per_node.height),
        "free_gpus": float(units["free"].sum()),
        "whole_free_gpus": whole,
    }
    if not units.height:
        return Reason(
            "no_free_gpu",
            f"no schedulable {name} in the inventory at all (none "
            "known, or all unhealthy, down or retired)",
            numbers,
        )
    if total < n:
        return Reason(
            "no_free_gpu",
            f"no free {name} for it: {total} can take a {share:g} share now "
            f"({numbers['free_gpus']:.2f} GPUs free in all, {whole} whole); the job "
            f"needs {n}",
            numbers,
        )
    if n <= biggest and best < n:
        return Reason(
            "fragmented",
            f"free GPUs are fragmented: {total} {name}s could take it, spread over "
            f"{per_node.height} nodes with at most {best} on one; the job needs {n} "
            "on one node",
            numbers,
        )
    where = per_node["node"][0]
    text = (
        f"node {where} has {best} {name}s with a {share:g} share free"
        if best >= n
        else f"{total} {name}s with a {share:g} share free across {per_node.height} nodes, "
        "enough for this multi-node request"
    )
    return Reason("capacity_available", f"capacity is there: {text}", {**numbers, "node": where})


def _reclaim_reason(
    tenant: str,
    pool: str,
    quota: Mapping[str, Any],
    held: float,
    request: float,
    quotas: pl.DataFrame,
    allocs: pl.DataFrame,
    viewer: str | None = None,
) -> Reason | None:
    guaranteed, model = float(quota["guaranteed_gpus"]), quota["gpu_model"]
    if held + request > guaranteed + EPS:
        return None
    borrowers = borrowed_by(quotas, allocs, pool, model, exclude=tenant)
    if not borrowers:
        return None
    total = sum(borrowers.values())
    if viewer is not None:
        borrowers = _told_to(viewer, borrowers)
    who = ", ".join(f"{t} {g:g}" for t, g in borrowers.items())
    return Reason(
        "reclaim",
        f"waiting on a reclaim: {tenant} is guaranteed {guaranteed:g} GPUs in pool "
        f"{pool} and holds {held:g}, so this job is within its guarantee, but "
        f"{total:g} GPUs of the pool are lent to tenants above their guarantee "
        f"({who}); they come back when those jobs end or are preempted",
        {
            "guaranteed_gpus": guaranteed,
            "held_gpus": held,
            "lent_gpus": total,
            "borrowers": borrowers,
        },
    )


def borrowed_by(
    quotas: pl.DataFrame, allocs: pl.DataFrame, pool: str, model: str, exclude: str = ""
) -> dict[str, float]:
    """GPUs each tenant holds above its guarantee in (pool, model), largest first: each
    tenant's quota row as :func:`_quota` picks it, its holdings as :func:`_held` sums them."""
    rows = allocs.filter(pl.col("pool") == pool)
    held: dict[str, dict[str, float]] = {}  # tenant -> GPU model -> GPUs held
    for tenant, gpu_model, gpus in (
        rows.group_by("tenant", "gpu_model").agg(pl.col("fraction").sum()).iter_rows()
    ):
        held.setdefault(tenant, {})[gpu_model] = float(gpus)
    guarantees: dict[tuple[str, str], dict[str, Any]] = {}
    for r in quotas.filter(pl.col("pool") == pool).iter_rows(named=True):
        guarantees.setdefault((r["tenant"], r["gpu_model"]), r)  # the first, as _quota
    out: dict[str, float] = {}
    for tenant in sorted(held):
        if tenant == exclude:
            continue
        quota = guarantees.get((tenant, model)) or guarantees.get((tenant, ""))
        guaranteed = float(quota["guaranteed_gpus"]) if quota else 0.0
        counted = quota["gpu_model"] if quota else model
        mine = held[tenant]
        over = (mine.get(counted, 0.0) if counted else sum(mine.values())) - guaranteed
        if over > EPS:
            out[tenant] = over
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _told_to(viewer: str, borrowers: Mapping[str, float]) -> dict[str, float]:
    """``borrowers`` with the tenants outside ``viewer`` folded into one unnamed line."""
    mine = {t: g for t, g in borrowers.items() if owns(viewer, t)}
    others = sum(g for t, g in borrowers.items() if not owns(viewer, t))
    return mine | ({OTHER_TENANTS: others} if others > EPS else {})


def _priority_reason(
    job_id: str,
    job: Mapping[str, Any],
    waiting: pl.DataFrame,
    memo: dict[Any, Any],
    viewer: str | None = None,
) -> Reason | None:
    """The attempts ahead of the job in its line: its queue, or without a queue its pool and
    model (each line's attempts picked out of ``waiting`` once per ``memo``)."""
    if job["queue"]:
        key: tuple[Any, ...] = ("queue", job["queue"])
        line = pl.col("queue") == job["queue"]
        where = f"queue {job['queue']}"
    else:
        key = ("pool", job["pool"], job["gpu_model"])
        line = (pl.col("pool") == job["pool"]) & (pl.col("gpu_model") == job["gpu_model"])
        where = f"pool {job['pool']}"
    if key not in memo:
        memo[key] = waiting.filter(line)
    same: pl.DataFrame = memo[key]
    higher = pl.col("priority") > job["priority"]
    earlier = (
        (pl.col("priority") == job["priority"]) & (pl.col("queued_ts") < job["queued_ts"])
        if job["queued_ts"] is not None
        else pl.lit(False)
    )
    ahead = same.filter((pl.col("job_id") != job_id) & (higher | earlier))
    if not ahead.height:
        return None
    n_higher = int((ahead["priority"] > job["priority"]).sum())
    n_earlier = ahead.height - n_higher
    return Reason(
        "priority",
        f"{_jobs(ahead.height)} ahead of it in {where}: {n_higher} of higher "
        f"priority, {n_earlier} of the same priority ({job['priority']}) that "
        f"waited longer; together they ask for {ahead['gpus_requested'].sum():g} GPUs",
        {
            "ahead": ahead.height,
            "higher_priority": n_higher,
            "same_priority_earlier": n_earlier,
            "ahead_gpus": float(ahead["gpus_requested"].sum()),
            "jobs": sorted(
                (ahead if viewer is None else ahead.filter(in_tenant(viewer)))["job_id"].to_list()
            ),
        },
    )


# -- why is this GPU idle ---------------------------------------------------------------------
def why_gpu(
    wh: Warehouse,
    cluster: str,
    gpu_uuid: str,
    at: dt.datetime,
    *,
    mig_instance: str = "",
    idle_threshold_ratio: float = 0.05,
    idle_min_duration_s: int = 1800,
) -> Explanation:
    """Why a GPU is idle at ``at``: retired or down, unhealthy (since when, which Xid),
    unallocated (since when), or allocated to a job that has stayed under
    ``idle_threshold_ratio`` for at least ``idle_min_duration_s`` (the current run of minutes
    whose busiest sample is under the threshold, from the 1-minute rollup).
    """
    at = _at(at)
    history = queries.run(
        wh, "why_gpu_history", cluster=cluster, gpu_uuid=gpu_uuid, mig_instance=mig_instance, at=at
    )
    gpu_rows = list(history.filter(pl.col("kind") == "gpu").iter_rows(named=True))
    if not gpu_rows:
        raise ExplainError(
            f"no GPU {gpu_uuid!r} in cluster {cluster!r}'s inventory as of "
            f"{_when(at)}: check the UUID (nvidia-smi -L shows it)"
        )
    gpu = gpu_rows[-1]
    node_rows = [
        r
        for r in history.filter(pl.col("kind") == "node").iter_rows(named=True)
        if r["node"] == gpu["node"]
    ]
    facts: dict[str, Any] = {
        "node": gpu["node"],
        "pool": gpu["pool"],
        "gpu_model": gpu["gpu_model"],
        "health": gpu["state"],
        "node_state": node_rows[-1]["state"] if node_rows else "unknown",
    }
    name = f"GPU {gpu_uuid}" + (f" (MIG {mig_instance})" if mig_instance else "")
    blocked = _unavailable(name, gpu_rows, node_rows, at)
    if blocked is not None:
        return dataclasses.replace(
            blocked, subject_id=gpu_uuid, cluster=cluster, at=at, facts=facts
        )
    allocations = queries.run(
        wh,
        "why_gpu_allocations",
        cluster=cluster,
        gpu_uuid=gpu_uuid,
        mig_instance=mig_instance,
        at=at,
    )
    holders = allocations.filter(pl.col("end_ts").is_null())
    if not holders.height:
        return _unallocated(name, gpu_uuid, cluster, at, gpu_rows, node_rows, allocations, facts)
    since = holders["start_ts"].min()
    run = queries.run(
        wh,
        "why_idle_run",
        cluster=cluster,
        gpu_uuid=gpu_uuid,
        mig_instance=mig_instance,
        since=since,
        at=at,
        threshold=idle_threshold_ratio,
    ).row(0, named=True)
    jobs = ", ".join(
        f"{r['job_id']} ({r['tenant']}, {r['fraction']:g} since {_when(r['start_ts'])})"
        for r in holders.iter_rows(named=True)
    )
    held = float(holders["fraction"].sum())
    reasons = []
    if held < float(gpu["capacity"]) - EPS:
        reasons.append(
            Reason(
                "partly_free",
                f"{float(gpu['capacity']) - held:.2f} of it is free for other jobs",
                {"held": held},
            )
        )
    facts.update(held=held, jobs=holders["job_id"].to_list(), threshold=idle_threshold_ratio)
    state, reason = _idle_verdict(name, jobs, run, idle_threshold_ratio, idle_min_duration_s)
    return Explanation(
        "gpu", gpu_uuid, cluster, at, state, reason.message, (reason, *reasons), facts
    )


def _run_start(rows: list[dict[str, Any]]) -> dt.datetime:
    """When the latest state in ``rows`` (oldest first) began: the start of its current run."""
    state, since = rows[-1]["state"], rows[-1]["ts"]
    for row in reversed(rows):
        if row["state"] != state:
            break
        since = row["ts"]
    return since


def _unavailable(
    name: str, gpu_rows: list[dict[str, Any]], node_rows: list[dict[str, Any]], at: dt.datetime
) -> Explanation | None:
    """Retired, node not ready, down or unhealthy: capacity that no job can use."""
    gpu = gpu_rows[-1]
    node = node_rows[-1] if node_rows else None
    if gpu["state"] == "retired" or (node is not None and node["state"] == "retired"):
        rows = gpu_rows if gpu["state"] == "retired" else node_rows
        code, since, why = "retired", _run_start(rows), rows[-1]["reason"]
        text = f"{name} is retired since {_when(since)}"
    elif node is not None and node["state"] != "ready":
        code, since, why = node["state"], _run_start(node_rows), node["reason"]
        text = f"{name} is on node {gpu['node']}, which is {node['state']} since {_when(since)}"
    elif gpu["state"] in ("down", "unhealthy"):
        code, since, why = gpu["state"], _run_start(gpu_rows), gpu["reason"]
        text = f"{name} is {gpu['state']} since {_when(since)} ({_ago(since, at)})"
    else:
        return None
    text += f": {why}" if why else ""
    reason = Reason(code, text, {"since": since, "reason": why})
    return Explanation("gpu", "", "", at, code, text, (reason,))


def _unallocated(
    name: str,
    gpu_uuid: str,
    cluster: str,
    at: dt.datetime,
    gpu_rows: list[dict[str, Any]],
    node_rows: list[dict[str, Any]],
    allocations: pl.DataFrame,
    facts: dict[str, Any],
) -> Explanation:
    available = max([_run_start(gpu_rows), *([_run_start(node_rows)] if node_rows else [])])
    last = allocations.sort("end_ts").tail(1).row(0, named=True) if allocations.height else None
    if last is not None and last["end_ts"] > available:
        since = last["end_ts"]
        detail = f"last held by job {last['job_id']} ({last['tenant']}) until {_when(since)}"
    else:
        since = available
        detail = f"not allocated since it became available at {_when(since)}"
    text = f"{name} is unallocated since {_when(since)} ({_ago(since, at)}): {detail}"
    reason = Reason(
        "unallocated", text, {"since": since, "idle_hours": (at - since).total_seconds() / 3600}
    )
    return Explanation("gpu", gpu_uuid, cluster, at, "unallocated", text, (reason,), facts)


def _idle_verdict(
    name: str, jobs: str, run: Mapping[str, Any], threshold: float, min_duration_s: int
) -> tuple[str, Reason]:
    if run["first_minute"] is None:
        if not run["sampled_minutes"]:
            return "no_samples", Reason(
                "no_samples",
                f"{name} is allocated to {jobs}; no "
                "utilisation samples since then, so gpuledger cannot "
                "tell whether it is used",
            )
        mean, peak = run["latest_util_mean"], run["latest_util_max"]
        busy = f"a mean of {mean:.0%}, " if mean is not None else ""
        return "busy", Reason(
            "busy",
            f"{name} is not idle: allocated to {jobs}, and its latest minute "
            f"({_when(run['latest_minute'])}) ran at {busy}peaking at {peak:.0%} "
            f"(idle is under {threshold:.0%})",
            {
                "last_busy_minute": run["last_busy_minute"],
                "latest_minute": run["latest_minute"],
                "latest_util_mean_ratio": mean,
                "latest_util_max_ratio": peak,
                "threshold_ratio": threshold,
            },
        )
    since = run["first_minute"]
    seconds = (run["last_minute"] + _MINUTE - since).total_seconds()
    numbers = {
        "idle_since": since,
        "idle_hours": seconds / 3600,
        "peak_util_ratio": run["peak_util"],
        "threshold_ratio": threshold,
    }
    if seconds >= min_duration_s:
        return "idle_allocated", Reason(
            "idle_allocated",
            f"{name} is allocated to {jobs} and has been under "
            f"{threshold:.0%} utilisation for {seconds / 3600:.1f} h (since {_when(since)}; "
            f"busiest sample {run['peak_util']:.0%})",
            numbers,
        )
    return "busy", Reason(
        "busy",
        f"{name} is not idle yet: allocated to {jobs}, under {threshold:.0%} for "
        f"{seconds / 60:.0f} min only (idle counts from {min_duration_s / 60:.0f} min)",
        numbers,
    )


# -- why is this tenant over quota ------------------------------------------------------------
def why_tenant(
    wh: Warehouse,
    cluster: str,
    tenant: str,
    at: dt.datetime,
    *,
    idle_threshold_ratio: float = 0.05,
    util_window_s: int = 3600,
) -> Explanation:
    """Why ``tenant`` is over quota at ``at``: per pool and model, held vs guaranteed, what it
    borrowed from the cohort and how much of that is idle (allocations whose GPU's mean
    utilisation over the last ``util_window_s`` is under ``idle_threshold_ratio``), and whose
    unused guarantee it borrows (with their waiting jobs).
    """
    at = _at(at)
    quotas = queries.run(wh, "why_quotas_at", cluster=cluster, at=at)
    allocs = _open_allocations(wh, cluster, at, util_window_s=util_window_s)
    pools = tenant_positions(
        tenant, quotas, allocs, lambda: waiting_at(wh, cluster, at), idle_threshold_ratio
    )
    if not pools:
        raise ExplainError(
            f"tenant {tenant!r} has no quota and holds no GPU in cluster "
            f"{cluster!r} as of {_when(at)}: tenants are 'org/project'"
        )
    reasons = [r for p in pools for r in p.reasons]
    borrowed = sum(p.borrowed_gpus for p in pools)
    idle = sum(p.idle_borrowed_gpus for p in pools)
    held = sum(p.held_gpus for p in pools)
    guaranteed = sum(p.guaranteed_gpus for p in pools)
    if any(r.code == "over_limit" for r in reasons):
        state = "over_limit"
    elif borrowed > EPS:
        state = "borrowing"
    else:
        state = "within_guarantee"
    summary = f"tenant {tenant} {_verdict(state, pools)}: " + _holdings(
        held, guaranteed, borrowed, idle
    )
    facts = {"pools": [p.facts() for p in pools]}
    return Explanation("tenant", tenant, cluster, at, state, summary, tuple(reasons), facts)


def quota_positions(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    *,
    idle_threshold_ratio: float = 0.05,
    util_window_s: int = 3600,
    kept: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None = None,
) -> dict[str, list[PoolPosition]]:
    """Every tenant's positions in ``cluster`` at ``at`` (as :func:`why_tenant` explains one
    tenant's), from one read of the quotas, the open allocations and the waiting jobs;
    ``kept``: those three of the same cluster and instant, read before with this util window
    (a :class:`~warehouse.analytics.pending.Queue`'s), so that none is asked again."""
    at = _at(at)
    if kept is not None:
        quotas, allocs, waiting = kept
    else:
        quotas = queries.run(wh, "why_quotas_at", cluster=cluster, at=at)
        allocs = _open_allocations(wh, cluster, at, util_window_s=util_window_s)
        waiting = waiting_at(wh, cluster, at)
    tenants = sorted(set(quotas["tenant"].to_list()) | set(allocs["tenant"].to_list()))
    out = {
        t: tenant_positions(t, quotas, allocs, lambda: waiting, idle_threshold_ratio)
        for t in tenants
    }
    return {t: p for t, p in out.items() if p}


def tenant_positions(
    tenant: str,
    quotas: pl.DataFrame,
    allocs: pl.DataFrame,
    waiting: Callable[[], pl.DataFrame],
    threshold: float,
) -> list[PoolPosition]:
    """The tenant's position in each (pool, model) where it has a quota or holds GPUs (a
    pool-wide quota row covers every model it holds there); [] when neither."""
    own = quotas.filter(pl.col("tenant") == tenant)
    keys = {(r["pool"], r["gpu_model"]) for r in own.iter_rows(named=True)}
    held = allocs.filter(pl.col("tenant") == tenant).select("pool", "gpu_model").unique()
    for pool, model in held.iter_rows():  # each (pool, model) once, not each allocation
        if _quota(quotas, tenant, pool, model) is None:
            keys.add((pool, model))
    if not keys:
        return []
    queued = waiting()  # read only when there is a position to find lenders for
    return [
        pool_position(tenant, pool, model, quotas, allocs, queued, threshold)
        for pool, model in sorted(keys)
    ]


def _verdict(state: str, pools: list[PoolPosition]) -> str:
    """What the tenant's state means, naming the pools where it borrows when, summed over
    pools, it holds no more than it is guaranteed."""
    if state == "within_guarantee":
        return "is within its guarantee"
    if state == "over_limit":
        return "is over its quota (above a borrow limit)"
    where = [
        p.pool + (f" ({p.gpu_model})" if p.gpu_model else "")
        for p in pools
        if p.borrowed_gpus > EPS
    ]
    if sum(p.held_gpus for p in pools) > sum(p.guaranteed_gpus for p in pools) + EPS:
        return "is over its guarantee (borrowing)"
    return f"is borrowing in {', '.join(where)} while guarantee of its own elsewhere goes unused"


def _holdings(held: float, guaranteed: float, borrowed: float, idle: float) -> str:
    if held > guaranteed + EPS:
        compared = f"{held - guaranteed:g} more than"
    elif held < guaranteed - EPS:
        compared = f"{guaranteed - held:g} fewer than"
    else:
        compared = "exactly"
    return (
        f"holds {held:g} GPUs, {compared} the {guaranteed:g} it is guaranteed; borrowed "
        f"{borrowed:g} from the cohort, of which {idle:g} idle"
    )


def pool_position(
    tenant: str,
    pool: str,
    model: str,
    quotas: pl.DataFrame,
    allocs: pl.DataFrame,
    waiting: pl.DataFrame,
    threshold: float,
) -> PoolPosition:
    """A tenant's position in one (pool, model): held, guaranteed, borrowed, idle, lenders."""
    quota = _quota(quotas, tenant, pool, model)
    guaranteed = float(quota["guaranteed_gpus"]) if quota else 0.0
    limit = quota["borrow_limit_gpus"] if quota else None
    held = _held(allocs, tenant, pool, model)
    rows = allocs.filter((pl.col("tenant") == tenant) & (pl.col("pool") == pool))
    if model:
        rows = rows.filter(pl.col("gpu_model") == model)
    idle_rows = rows.filter(pl.col("util_mean").is_not_null() & (pl.col("util_mean") < threshold))
    idle = float(idle_rows["fraction"].sum())
    unknown = float(rows.filter(pl.col("util_mean").is_null())["fraction"].sum())
    borrowed = max(0.0, held - guaranteed)
    idle_jobs = tuple(sorted(set(idle_rows["job_id"].to_list())))
    lent_by = tuple(lenders(tenant, pool, model, quotas, allocs, waiting))
    label = f"pool {pool}" + (f" ({model})" if model else "")
    reasons = []
    if borrowed > EPS:
        lent = (
            ", ".join(
                f"{x.tenant} {x.unused_gpus:g} unused ({x.waiting_jobs} waiting)" for x in lent_by
            )
            or "no tenant with a quota"
        )
        quota_text = f"guaranteed {guaranteed:g}" if quota else "no quota here"
        reasons.append(
            Reason(
                "borrowing",
                f"{label}: holds {held:g} GPUs, {quota_text}: borrowed {borrowed:g} "
                f"from the cohort, of which {min(borrowed, idle):g} idle (under {threshold:.0%} "
                f"over the last hour{': jobs ' + ', '.join(idle_jobs) if idle_jobs else ''}); "
                f"unused guarantee it borrows: {lent}",
                {
                    "held_gpus": held,
                    "guaranteed_gpus": guaranteed,
                    "borrowed_gpus": borrowed,
                    "idle_borrowed_gpus": min(borrowed, idle),
                    "idle_jobs": list(idle_jobs),
                },
            )
        )
    if limit is not None and held > guaranteed + float(limit) + EPS:
        reasons.append(
            Reason(
                "over_limit",
                f"{label}: holds {held:g} GPUs, above guarantee {guaranteed:g} + "
                f"borrow limit {float(limit):g} = {guaranteed + float(limit):g} (the limit was "
                "lowered, or jobs started before it applied)",
                {"held_gpus": held, "limit_gpus": guaranteed + float(limit)},
            )
        )
    return PoolPosition(
        pool=pool,
        gpu_model=model,
        has_quota=quota is not None,
        guaranteed_gpus=guaranteed,
        borrow_limit_gpus=None if limit is None else float(limit),
        held_gpus=held,
        borrowed_gpus=borrowed,
        idle_gpus=idle,
        idle_borrowed_gpus=min(borrowed, idle),
        no_samples_gpus=unknown,
        idle_jobs=idle_jobs,
        lenders=lent_by,
        reasons=tuple(reasons),
    )


def lenders(
    tenant: str,
    pool: str,
    model: str,
    quotas: pl.DataFrame,
    allocs: pl.DataFrame,
    waiting: pl.DataFrame,
) -> list[Lender]:
    """Other tenants with guarantee unused in (pool, model), with their waiting jobs there."""
    rows = quotas.filter((pl.col("pool") == pool) & (pl.col("tenant") != tenant))
    if model:
        rows = rows.filter(pl.col("gpu_model").is_in([model, ""]))
    out = []
    for r in rows.iter_rows(named=True):
        unused = float(r["guaranteed_gpus"]) - _held(allocs, r["tenant"], pool, r["gpu_model"])
        if unused > EPS:
            queued = waiting.filter((pl.col("tenant") == r["tenant"]) & (pl.col("pool") == pool))
            out.append(Lender(r["tenant"], unused, queued.height))
    return sorted(out, key=lambda x: (-x.unused_gpus, x.tenant))
