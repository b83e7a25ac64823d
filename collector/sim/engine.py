"""Event-level simulation of a shared GPU cluster: jobs, queueing, placement and faults.

The engine steps from event to event (arrivals, job ends, give-ups, node failures and repairs,
Xid errors, capacity changes) with one seeded ``numpy`` generator, so the sequence of draws —
and therefore every record — depends only on the config, never on how the caller slices time.
It emits :class:`~collector.records.JobEvent` and inventory rows, and keeps allocation
intervals (:class:`Alloc`) from which :mod:`collector.sim.samples` builds utilisation series.

Scheduling is Kueue-like: per-tenant quota (guarantee + borrow limit) per pool, best-effort
FIFO within priority, preemption of strictly lower-priority jobs when a job fits nowhere,
and single-node placement (see :meth:`Cluster.place`), which strands capacity.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import heapq
import math
import re
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from collector.records import UTC, GpuInventory, JobEvent, NodeInventory
from collector.sim.cluster import ABSENT, HEALTHY, SOURCE, UNHEALTHY, Cluster, SimGpu, SimNode
from collector.sim.config import (
    HOUR_MS,
    CapacityChange,
    SimulatorConfig,
    TenantSpec,
    WorkloadSpec,
    diurnal,
    expected_shares,
    is_weekend,
)

EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
KIND_CODES = {"training": 0, "inference": 1, "notebook": 2, "other": 3}
_SHORT = {"training": "train", "inference": "serve", "notebook": "nb", "other": "job"}
_CONTAINER = {"training": "trainer", "inference": "server", "notebook": "notebook", "other": "main"}
_XID_RE = re.compile(r"^Xid (\d+)")
_NODE_CAUSES = ("kernel panic", "PSU failure", "network partition", "kubelet stopped posting")
T = TypeVar("T")


def to_datetime(t_ms: int) -> dt.datetime:
    """Milliseconds since the epoch → an aware UTC datetime (exact, no float rounding)."""
    return EPOCH + dt.timedelta(milliseconds=int(t_ms))


def to_ms(ts: dt.datetime) -> int:
    """An aware datetime → milliseconds since the epoch (truncated to the millisecond)."""
    if ts.tzinfo is None:
        raise ValueError(f"datetime must be timezone-aware (UTC), got naive {ts.isoformat()}")
    return (ts - EPOCH) // dt.timedelta(milliseconds=1)


@dataclasses.dataclass
class SimJob:
    """A job across its attempts; mutable while it lives in the engine."""

    serial: int
    job_id: str
    workload: WorkloadSpec
    tenant: TenantSpec
    user: str
    pool: str
    gpus: int
    fraction: float
    priority_class: str
    priority: int
    squatter: bool
    work_ms: int  # run time still needed to finish (checkpointed progress survives retries)
    patience_ms: int
    level: float  # utilisation level parameter (0-1 latent, see sim_samples)
    mem_frac: float  # share of the GPU's memory it uses on each GPU it holds
    attempt: int = 0
    state: str = "pending"  # pending, running, done
    submitted_ms: int = 0
    started_ms: int = 0
    node: str = ""
    gids: tuple[int, ...] = ()
    alloc: Alloc | None = None

    @property
    def kind(self) -> str:
        """The workload type."""
        return self.workload.kind

    @property
    def gpu_share(self) -> float:
        """Whole-GPU equivalents it holds (4 GPUs → 4.0, a quarter GPU → 0.25)."""
        return self.gpus * self.fraction


@dataclasses.dataclass
class Alloc:
    """One attempt's hold on its GPUs, [start_ms, end_ms), with what shapes its samples."""

    alloc_id: int
    gids: tuple[int, ...]
    slots: tuple[int, ...]  # share slot on each GPU, parallel to gids
    fraction: float
    start_ms: int
    end_ms: int | None
    kind_code: int
    squatter: bool
    level: float
    mem_frac: float
    pod: str
    namespace: str
    container: str
    job_id: str


def _choice(rng: np.random.Generator, pairs: Sequence[tuple[T, float]]) -> T:
    """Draw one value from ``(value, weight)`` pairs."""
    weights = np.array([w for _, w in pairs], dtype=float)
    return pairs[int(rng.choice(len(pairs), p=weights / weights.sum()))][0]


class Engine:
    """Runs the cluster's events in time order and collects what they produce."""

    def __init__(self, config: SimulatorConfig, cluster: Cluster, origin_ms: int) -> None:
        """Prepare a simulation whose output starts at ``origin_ms`` (warm-up runs before)."""
        self.config = config
        self.cluster = cluster
        self.rng = np.random.default_rng([config.seed, 0x51E])
        self.now_ms = origin_ms - int(config.warmup.total_seconds() * 1000)
        self._heap: list[tuple[int, int, str, tuple[Any, ...]]] = []
        self._seq = 0
        self._serial = 0
        self._alloc_ids = 0
        self.priorities = dict(config.priority_classes)
        self.pending: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.closed: list[Alloc] = []
        self.events: list[JobEvent] = []
        self.gpu_rows: list[GpuInventory] = []
        self.node_rows: list[NodeInventory] = []
        self.stats: collections.Counter[str] = collections.Counter()
        self.usage: dict[tuple[str, str], float] = collections.defaultdict(float)
        self.guaranteed = self.guarantees(config)
        self.quota_caps = self._quota_caps()
        self._freed = False  # a job started or ended, or a GPU came back, since the last pass
        self._fresh: list[SimJob] = []  # jobs submitted since the last scheduling pass
        for i in range(len(config.workloads)):
            self._push(self._next_arrival(i, self.now_ms), "arrive", i)
        n_nodes, n_gpus = len(cluster.nodes), len(cluster.gpus)
        self._node_fail_rate = config.node_failures_per_node_day * n_nodes / (24 * HOUR_MS)
        self._xid_rate = config.gpu_xids_per_gpu_day * n_gpus / (24 * HOUR_MS)
        if self._node_fail_rate > 0:
            self._push(self.now_ms + self._exp(self._node_fail_rate), "node_fail")
        if self._xid_rate > 0:
            self._push(self.now_ms + self._exp(self._xid_rate), "xid")
        for change in config.capacity_changes:
            self._push(origin_ms + int(change.at.total_seconds() * 1000), "capacity", change)

    # -- the event loop ------------------------------------------------------------------

    def _push(self, t_ms: int, kind: str, *args: Any) -> None:
        heapq.heappush(self._heap, (int(t_ms), self._seq, kind, args))
        self._seq += 1

    def _exp(self, rate_per_ms: float) -> int:
        return max(1000, round(self.rng.exponential(1.0 / rate_per_ms) / 1000) * 1000)

    def advance(self, until_ms: int) -> None:
        """Process every event before ``until_ms`` (half-open), then stand at ``until_ms``."""
        while self._heap and self._heap[0][0] < until_ms:
            t_ms, _, kind, args = heapq.heappop(self._heap)
            self.now_ms = t_ms
            getattr(self, f"_on_{kind}")(t_ms, *args)
            self._schedule(t_ms)
        self.now_ms = until_ms

    # -- arrivals and the queue ----------------------------------------------------------

    def _rate(self, w: WorkloadSpec, t_ms: float) -> float:
        shape = 1.0 - w.diurnal_amplitude + 2.0 * w.diurnal_amplitude * float(diurnal(t_ms))
        return w.arrivals_per_hour * shape * (w.weekend_factor if is_weekend(t_ms) else 1.0)

    def _next_arrival(self, index: int, t_ms: int) -> int:
        """The next arrival of workload ``index`` after ``t_ms``: Poisson, thinned diurnally."""
        w = self.config.workloads[index]
        peak = w.arrivals_per_hour * (1.0 + w.diurnal_amplitude)
        if peak <= 0:
            return 2**62
        t = float(t_ms)
        while True:
            t += self.rng.exponential(HOUR_MS / peak)
            if self.rng.random() * peak <= self._rate(w, t):
                return max(int(t_ms) + 1000, round(t / 1000) * 1000)

    def _on_arrive(self, t_ms: int, index: int) -> None:
        self._push(self._next_arrival(index, t_ms), "arrive", index)
        self._submit(self._new_job(self.config.workloads[index]), t_ms)

    def _new_job(self, w: WorkloadSpec) -> SimJob:
        rng = self.rng
        tenant = _choice(rng, [(t, t.weight(w.kind)) for t in self.config.tenants])
        shape = _choice(rng, [((g, f), s) for g, f, s in w.shapes])
        squatter = bool(rng.random() < w.squatter_prob)
        hours = w.duration_median_h * math.exp(w.duration_sigma * rng.standard_normal())
        hours = min(max(hours, 0.1), 24.0 * 7) * (w.squatter_duration_factor if squatter else 1.0)
        patience_h = w.patience_median_h * math.exp(0.7 * rng.standard_normal())
        pclass = _choice(rng, w.priority_classes)
        # latent utilisation level (see sim_samples): a fifth of training jobs are input-bound
        # or debugging runs that never get the GPU busy; the rest run hot.
        if w.kind == "training":
            low, high = (0.35, 0.5) if rng.random() < 0.2 else (0.55, 0.995)
        else:
            low, high = (0.6, 0.95) if w.kind == "inference" else (0.4, 0.9)
        if squatter:
            mem = rng.uniform(0.02, 0.5)
        elif w.kind == "training":
            mem = rng.uniform(0.55, 0.95)
        elif w.kind == "inference":
            mem = rng.uniform(0.6, 0.92)
        else:
            mem = rng.uniform(0.05, 0.6)
        self._serial += 1
        return SimJob(
            serial=self._serial,
            job_id=f"{tenant.project}-{_SHORT[w.kind]}-{self._serial:06d}",
            workload=w,
            tenant=tenant,
            user=str(rng.choice(tenant.users)),
            pool=_choice(rng, w.pools),
            gpus=shape[0],
            fraction=shape[1],
            priority_class=pclass,
            priority=self.priorities[pclass],
            squatter=squatter,
            work_ms=int(hours * HOUR_MS) // 1000 * 1000,
            patience_ms=int(patience_h * HOUR_MS) // 1000 * 1000,
            level=float(rng.uniform(low, high)),
            mem_frac=float(mem * shape[1]),
        )

    def _submit(self, job: SimJob, t_ms: int) -> None:
        job.state, job.submitted_ms = "pending", t_ms
        job.node, job.gids, job.alloc = "", (), None
        self.pending[job.serial] = job
        self._fresh.append(job)
        self._emit(job, "submitted", t_ms)
        self._push(t_ms + job.patience_ms, "give_up", job.serial, job.attempt)

    def _on_give_up(self, t_ms: int, serial: int, attempt: int) -> None:
        job = self.pending.get(serial)
        if job is None or job.attempt != attempt:
            return
        del self.pending[serial]
        job.state = "done"
        waited = (t_ms - job.submitted_ms) / HOUR_MS
        self._emit(job, "cancelled", t_ms, reason=f"cancelled by user after {waited:.1f}h in queue")
        self.stats["gave_up"] += 1

    def _quota_ok(self, job: SimJob) -> bool:
        cap = self.quota_caps.get((job.tenant.tenant, job.pool))
        if not self.config.enforce_quotas or cap is None:
            return True
        return self.usage[(job.tenant.tenant, job.pool)] + job.gpu_share <= cap + 1e-9

    def _quota_caps(self) -> dict[tuple[str, str], float | None]:
        """guarantee + borrow limit per (tenant, pool); None where borrowing is unlimited."""
        caps: dict[tuple[str, str], float | None] = {}
        for (tenant, pool), guaranteed in self.guarantees(self.config).items():
            spec = next(t for t in self.config.tenants if t.tenant == tenant)
            limit = spec.borrow_limit_gpus
            caps[(tenant, pool)] = None if limit is None else guaranteed + limit
        return caps

    @staticmethod
    def guarantees(config: SimulatorConfig) -> dict[tuple[str, str], float]:
        """Guaranteed GPUs per (tenant, pool): the pool's starting size × expected share."""
        sizes = {p.name: p.nodes * p.gpus_per_node for p in config.pools}
        return {k: float(math.floor(sizes[k[1]] * s)) for k, s in expected_shares(config).items()}

    def _schedule(self, t_ms: int) -> None:
        """Start every pending job that quota and placement allow, highest priority first.

        When nothing changed for the jobs already waiting since the last pass (no job started
        or ended, no GPU came back), only new arrivals are tried: the others would be blocked
        again, so the outcome is the same as a full pass with less work.
        """
        while self.pending:
            if self._freed:
                candidates = list(self.pending.values())
            else:
                candidates = [j for j in self._fresh if j.serial in self.pending]
            self._freed, self._fresh = False, []
            if not candidates or not self._schedule_pass(t_ms, candidates):
                break  # no preemption resubmitted victims, so another pass would not help

    def _schedule_pass(self, t_ms: int, candidates: list[SimJob]) -> bool:
        """One pass over ``candidates``; True if it preempted anything."""
        preempted = self.stats["preemptions"]
        blocked: set[tuple[str, int, float, str]] = set()  # shapes that fit nowhere now
        for job in sorted(candidates, key=lambda j: (-j.priority, j.submitted_ms, j.serial)):
            shape = (job.pool, job.gpus, job.fraction, job.tenant.tenant)
            if shape in blocked:
                continue
            if not self._quota_ok(job):
                self.stats["quota_waits"] += 1
                continue
            placed = self.cluster.place(job.pool, job.gpus, job.fraction, self.rng)
            if placed is None:
                placed = self._preempt_for(job, t_ms)
            if placed is None:
                blocked.add(shape)
                continue
            self._start(job, placed[0], placed[1], t_ms)
        return self.stats["preemptions"] > preempted

    def _preempt_for(self, job: SimJob, t_ms: int) -> tuple[SimNode, list[SimGpu]] | None:
        """Evict the fewest lower-priority jobs from one node so that ``job`` fits there."""
        best: tuple[tuple[int, float], list[SimJob]] | None = None
        if all(r.priority >= job.priority for r in self.running.values() if r.pool == job.pool):
            return None
        for node in self.cluster.by_pool[job.pool]:
            if node.state != "ready":
                continue
            holders = {s for g in node.gids for s in self.cluster.gpus[g].holders}
            victims = sorted(
                (self.running[s] for s in holders if self._may_preempt(job, self.running[s])),
                key=lambda v: (v.priority, -v.started_ms, v.serial),
            )
            used = {g: self.cluster.gpus[g].used for g in node.gids}
            chosen: list[SimJob] = []
            for victim in victims:
                chosen.append(victim)
                for g in victim.gids:
                    used[g] -= victim.fraction
                whole = job.fraction >= 1.0
                room = [
                    g
                    for g in node.gids
                    if self.cluster.gpus[g].schedulable
                    and (used[g] < 1e-9 if whole else used[g] + job.fraction <= 1 + 1e-9)
                ]
                if len(room) >= job.gpus:
                    cost = (len(chosen), sum(v.gpu_share for v in chosen))
                    if best is None or cost < best[0]:
                        best = (cost, list(chosen))
                    break
        if best is None:
            return None
        for victim in best[1]:
            reason = f"preempted by {job.job_id} (priority class {job.priority_class})"
            self._end(victim, t_ms, "preempted", reason)
            self.stats["preemptions"] += 1
            self._maybe_retry(victim, t_ms, victim.workload.retry_prob)
        return self.cluster.place(job.pool, job.gpus, job.fraction, self.rng)

    def _may_preempt(self, job: SimJob, victim: SimJob) -> bool:
        """Kueue's rule: a lower-priority job of the same tenant, or of one that is borrowing.

        Within its own queue a job preempts lower priorities; across tenants it only
        reclaims capacity from tenants running above their guarantee in that pool.
        """
        if victim.priority >= job.priority:
            return False
        key = (victim.tenant.tenant, victim.pool)
        return victim.tenant == job.tenant or self.usage[key] > self.guaranteed.get(key, 0.0)

    # -- running jobs --------------------------------------------------------------------

    def _start(self, job: SimJob, node: SimNode, gpus: list[SimGpu], t_ms: int) -> None:
        del self.pending[job.serial]
        self.running[job.serial] = job
        job.state, job.started_ms, job.node = "running", t_ms, node.name
        job.gids = tuple(g.gid for g in gpus)
        slots = []
        for g in gpus:
            g.used += job.fraction
            slots.append(g.take_slot(job.serial))
        self.usage[(job.tenant.tenant, job.pool)] += job.gpu_share
        self._freed = True  # a new running job may be preemptible by one already waiting
        self._alloc_ids += 1
        job.alloc = Alloc(
            alloc_id=self._alloc_ids,
            gids=job.gids,
            slots=tuple(slots),
            fraction=job.fraction,
            start_ms=t_ms,
            end_ms=None,
            kind_code=KIND_CODES[job.kind],
            squatter=job.squatter,
            level=job.level,
            mem_frac=job.mem_frac,
            pod=f"{job.job_id}-{job.attempt}",
            namespace=job.tenant.project,
            container=_CONTAINER[job.kind],
            job_id=job.job_id,
        )
        if t_ms > job.submitted_ms:
            self.stats["waited"] += 1
        self._emit(job, "admitted", t_ms)
        self._emit(job, "started", t_ms)
        w, u = job.workload, self.rng.random()
        if u < w.failure_prob:
            at = t_ms + max(60_000, int(job.work_ms * self.rng.uniform(0.02, 1.0)))
            reason = _choice(self.rng, w.failure_reasons)
            self._push(at, "end", job.serial, job.attempt, "failed", reason)
        elif u < w.failure_prob + w.cancel_prob:
            at = t_ms + max(60_000, int(job.work_ms * self.rng.uniform(0.05, 1.0)))
            self._push(at, "end", job.serial, job.attempt, "cancelled", "cancelled by user")
        else:
            self._push(t_ms + job.work_ms, "end", job.serial, job.attempt, "finished", "")

    def _on_end(self, t_ms: int, serial: int, attempt: int, event: str, reason: str) -> None:
        job = self.running.get(serial)
        if job is None or job.attempt != attempt:
            return
        self._end(job, t_ms, event, reason)
        self.stats[event] += 1
        if event == "failed":
            self._maybe_retry(job, t_ms, job.workload.retry_prob * 0.4)

    def _end(self, job: SimJob, t_ms: int, event: str, reason: str) -> None:
        """Release ``job``'s GPUs at ``t_ms`` and emit its terminal event."""
        del self.running[job.serial]
        self._freed = True
        for gid in job.gids:
            gpu = self.cluster.gpus[gid]
            gpu.used = max(0.0, round(gpu.used - job.fraction, 9))
            del gpu.holders[job.serial]
        self.usage[(job.tenant.tenant, job.pool)] -= job.gpu_share
        assert job.alloc is not None
        job.alloc.end_ms = t_ms
        self.closed.append(job.alloc)
        job.work_ms = max(0, job.work_ms - (t_ms - job.started_ms))
        job.state = "done"
        self._emit(job, event, t_ms, reason=reason, placed=True)
        match = _XID_RE.match(reason)
        if match and event == "failed" and job.gids:
            xid_gpu = self.cluster.gpus[job.gids[0]]
            if not xid_gpu.xids or xid_gpu.xids[-1] != (t_ms, int(match.group(1))):
                xid_gpu.xids.append((t_ms, int(match.group(1))))

    def _maybe_retry(self, job: SimJob, t_ms: int, prob: float) -> None:
        """Resubmit ``job`` as its next attempt with probability ``prob``."""
        if job.work_ms > 60_000 and job.attempt < 5 and self.rng.random() < prob:
            job.attempt += 1
            self._submit(job, t_ms)

    def _jobs_on(self, gids: Sequence[int]) -> list[SimJob]:
        serials = sorted({s for g in gids for s in self.cluster.gpus[g].holders})
        return [self.running[s] for s in serials]

    # -- faults and capacity -------------------------------------------------------------

    def _set_gpu(self, gpu: SimGpu, t_ms: int, health: str, reason: str, code: int) -> None:
        self._freed = True  # a repaired or added GPU may fit waiting jobs
        gpu.health, gpu.health_reason = health, reason
        gpu.health_epoch += 1
        gpu.set_code(t_ms, code)
        self.gpu_rows.append(self.cluster.gpu_row(gpu, to_datetime(t_ms)))

    def _set_node(self, node: SimNode, t_ms: int, state: str, reason: str) -> None:
        node.state, node.state_reason = state, reason
        node.epoch += 1
        self.node_rows.append(self.cluster.node_row(node, to_datetime(t_ms)))

    def _on_node_fail(self, t_ms: int) -> None:
        self._push(t_ms + self._exp(self._node_fail_rate), "node_fail")
        ready = [n for n in self.cluster.nodes.values() if n.state == "ready"]
        if not ready:
            return
        node = ready[int(self.rng.integers(len(ready)))]
        cause = _NODE_CAUSES[int(self.rng.integers(len(_NODE_CAUSES)))]
        for job in self._jobs_on(node.gids):
            self._end(job, t_ms, "failed", "NodeFailure")
            self._maybe_retry(job, t_ms, job.workload.retry_prob)
        self._set_node(node, t_ms, "down", f"NodeFailure: {cause}")
        for gid in node.gids:
            self._set_gpu(self.cluster.gpus[gid], t_ms, "down", f"node {node.name} down", ABSENT)
        low, high = self.config.node_repair_hours
        repair = t_ms + int(self.rng.uniform(low, high) * HOUR_MS) // 1000 * 1000
        self._push(repair, "node_repair", node.name, node.epoch)
        self.stats["node_failures"] += 1

    def _on_node_repair(self, t_ms: int, name: str, epoch: int) -> None:
        node = self.cluster.nodes[name]
        if node.epoch != epoch or node.state != "down":
            return
        self._set_node(node, t_ms, "ready", "")
        for gid in node.gids:
            self._set_gpu(self.cluster.gpus[gid], t_ms, "healthy", "", HEALTHY)
        self.stats["node_repairs"] += 1

    def _on_xid(self, t_ms: int) -> None:
        self._push(t_ms + self._exp(self._xid_rate), "xid")
        healthy = [
            g
            for g in self.cluster.gpus
            if g.health == "healthy" and self.cluster.nodes[g.node].state == "ready"
        ]
        if not healthy:
            return
        gpu = healthy[int(self.rng.integers(len(healthy)))]
        xids = self.config.hardware_xids
        code, text = xids[int(self.rng.integers(len(xids)))]
        reason = f"Xid {code}: {text}"
        for job in self._jobs_on([gpu.gid]):
            self._end(job, t_ms, "failed", reason)
            self._maybe_retry(job, t_ms, job.workload.retry_prob)
        gpu.xids.append((t_ms, code))
        self._set_gpu(gpu, t_ms, "unhealthy", reason, UNHEALTHY)
        low, high = self.config.gpu_repair_hours
        repair = t_ms + int(self.rng.uniform(low, high) * HOUR_MS) // 1000 * 1000
        self._push(repair, "gpu_repair", gpu.gid, gpu.health_epoch)
        self.stats["xid_unhealthy"] += 1

    def _on_gpu_repair(self, t_ms: int, gid: int, epoch: int) -> None:
        gpu = self.cluster.gpus[gid]
        if gpu.health_epoch == epoch and gpu.health == "unhealthy":
            self._set_gpu(gpu, t_ms, "healthy", "", HEALTHY)
            self.stats["gpu_repairs"] += 1

    def _on_capacity(self, t_ms: int, change: CapacityChange) -> None:
        ts = to_datetime(t_ms)
        if change.action == "add":
            node = self.cluster.add_node(change.pool, t_ms)
            self._freed = True
            self.node_rows.append(self.cluster.node_row(node, ts))
            self.gpu_rows.extend(self.cluster.gpu_row(self.cluster.gpus[g], ts) for g in node.gids)
            self.stats["nodes_added"] += 1
            return
        live = [
            n
            for n in self.cluster.nodes.values()
            if n.pool.name == change.pool and n.state != "retired"
        ]
        if not live:
            return
        node = live[-1]
        for job in self._jobs_on(node.gids):
            self._end(job, t_ms, "evicted", f"Evicted: node {node.name} drained for retirement")
            self._maybe_retry(job, t_ms, job.workload.retry_prob)
        self._set_node(node, t_ms, "retired", "decommissioned")
        for gid in node.gids:
            self._set_gpu(self.cluster.gpus[gid], t_ms, "retired", "node retired", ABSENT)
        self.stats["nodes_retired"] += 1

    # -- records -------------------------------------------------------------------------

    def _emit(
        self, job: SimJob, event: str, t_ms: int, reason: str = "", placed: bool = False
    ) -> None:
        """Append one JobEvent; ``started``/terminal events name the node and the GPUs."""
        named = placed or event == "started"
        uuids = tuple(self.cluster.gpus[g].uuid for g in job.gids) if named else ()
        tenant = job.tenant
        self.events.append(
            JobEvent(
                ts=to_datetime(t_ms),
                cluster=self.config.cluster,
                job_id=job.job_id,
                event=event,
                attempt=job.attempt,
                name=job.job_id,
                tenant=tenant.tenant,
                org=tenant.org,
                project=tenant.project,
                user=job.user,
                namespace=tenant.project,
                pool=job.pool,
                queue=f"{tenant.project}-queue",
                priority=job.priority,
                priority_class=job.priority_class,
                workload_type=job.kind,
                gpu_model=self.cluster.pools[job.pool].model.name,
                gpus_requested=job.gpu_share,
                gpu_fraction=job.fraction,
                node=job.node if named else "",
                gpu_uuids=uuids,
                started_at=to_datetime(job.started_ms) if placed else None,
                reason=reason,
                source=SOURCE,
            )
        )
