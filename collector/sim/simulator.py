"""A synthetic but realistic shared GPU cluster that emits the same records as real sources.

For demos, tests and benchmarks: ``Simulator(SimulatorConfig.default(gpus=64)).run(start, end)``
yields one :class:`~collector.records.Batch` per chunk of simulated time — a samples frame
with exactly :data:`~collector.records.SAMPLE_SCHEMA`, inventory rows for every change, and
job lifecycle events — plus :meth:`Simulator.config_records` (tenants, mapping rules, quotas,
price book) for the warehouse's configuration tables.

What it simulates (see ``sim_config``, ``sim_engine``, ``sim_samples``):
training (1/2/4/8 GPUs, long, high utilisation with stalls and checkpoints), inference (whole
or 0.25/0.5 shared GPUs, following daily traffic), notebooks (bursty by day, idle at night)
and squatters (hold GPUs at 0-5%); diurnal Poisson arrivals; quota, queueing, priorities and
preemption; failures (OOMKilled, NCCL timeout, exit codes, application Xids); hardware Xids
that make a GPU unhealthy until repaired; node failures and repairs; nodes added and retired;
fragmentation from spread placement. Utilisation is shaped after a real cluster's measured
distribution (Philly by default).

Conventions worth knowing downstream:

* Samples are taken at multiples of ``interval_s`` since the epoch, for every present GPU
  (healthy or unhealthy, allocated or not); none while its node is down or retired.
* On a GPU shared by several jobs, the labels (pod, namespace, container, job_id) are those
  of one holder — the one that has held it longest; utilisation is the combined activity.
* ``gr_engine_active_ratio`` is a bit below ``gpu_util_ratio`` on H100/A100 and NULL on
  L40S, so consumers exercise their fallback.
* ``tensor_active_ratio`` is about half of ``gpu_util_ratio`` (0 when idle) where
  ``gr_engine_active_ratio`` is reported, and NULL where it is not.
* ``energy_millijoules`` counts since driver load: it resets when a node comes back.
* The first run starts after a silent warm-up (``config.warmup``) so the cluster is busy from
  the first sample; the first batch carries the full inventory and the earlier
  ``submitted``/``admitted``/``started`` events of the jobs still queued or running then.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator

from collector.records import (
    Batch,
    GpuInventory,
    JobEvent,
    NodeInventory,
    Price,
    Quota,
    Tenant,
    TenantRule,
)
from collector.sim.cluster import Cluster
from collector.sim.config import (
    A100,
    H100,
    L40S,
    CapacityChange,
    GpuModelSpec,
    PoolSpec,
    SimulatorConfig,
    TenantSpec,
    WorkloadSpec,
)
from collector.sim.engine import Engine, to_datetime, to_ms
from collector.sim.samples import SampleBuilder

__all__ = [
    "A100",
    "H100",
    "L40S",
    "CapacityChange",
    "ConfigRecords",
    "GpuModelSpec",
    "PoolSpec",
    "Simulator",
    "SimulatorConfig",
    "TenantSpec",
    "WorkloadSpec",
]


@dataclasses.dataclass(frozen=True)
class ConfigRecords:
    """The configuration tables a simulated cluster needs: who, how to map, quotas, prices."""

    tenants: tuple[Tenant, ...]
    tenant_rules: tuple[TenantRule, ...]
    quotas: tuple[Quota, ...]
    prices: tuple[Price, ...]


class Simulator:
    """A stateful simulated cluster: ``run`` advances it; a later ``run`` continues it."""

    def __init__(self, config: SimulatorConfig) -> None:
        """Build the starting cluster; nothing is simulated until the first :meth:`run`."""
        self.config = config
        self.cluster = Cluster(config)
        self._engine: Engine | None = None
        self._samples = SampleBuilder(config, self.cluster)
        self._now_ms: int | None = None
        # inventory and carried-over events for the first batch (set by the warm-up)
        self._initial: tuple[list[GpuInventory], list[NodeInventory], list[JobEvent]] = ([], [], [])

    @property
    def now(self) -> dt.datetime | None:
        """Where the simulation stands (the end of the last run), or None before any run."""
        return None if self._now_ms is None else to_datetime(self._now_ms)

    @property
    def stats(self) -> dict[str, int]:
        """Counters of what happened so far (preemptions, node_failures, xid_unhealthy ...)."""
        return {} if self._engine is None else dict(self._engine.stats)

    def config_records(self) -> ConfigRecords:
        """Tenants, namespace/label/account rules, quotas per (tenant, pool) and the price book.

        Quotas guarantee each tenant its expected share of each pool it uses (rounded down);
        the borrow limit comes from the tenant's spec (None: unlimited).
        """
        cfg, since = self.config, self.config.config_effective_from
        tenants = tuple(
            Tenant(
                t.tenant, t.org, t.project, t.display_name or t.project, t.users[0], t.cost_center
            )
            for t in cfg.tenants
        )
        rules: list[TenantRule] = []
        for t in cfg.tenants:
            rules.append(TenantRule("namespace", t.project, t.tenant, 10))
            rules.append(TenantRule("label", f"team={t.project}", t.tenant, 20))
            rules.append(TenantRule("slurm_account", t.project, t.tenant, 30))
        specs = {t.tenant: t for t in cfg.tenants}
        models = {p.name: p.model.name for p in cfg.pools}
        quotas = tuple(
            Quota(
                since,
                tenant,
                pool,
                models[pool],
                guaranteed,
                specs[tenant].borrow_limit_gpus,
                cluster=cfg.cluster,
            )
            for (tenant, pool), guaranteed in sorted(Engine.guarantees(cfg).items())
        )
        seen: dict[str, GpuModelSpec] = {p.model.name: p.model for p in cfg.pools}
        prices = [
            Price(since, name, spec.price_per_gpu_hour, cfg.currency) for name, spec in seen.items()
        ]
        prices.append(
            Price(since, "", cfg.energy_price_per_kwh, cfg.currency, resource="energy_kwh")
        )
        return ConfigRecords(tenants, tuple(rules), quotas, tuple(prices))

    def run(
        self,
        start: dt.datetime,
        end: dt.datetime,
        chunk: dt.timedelta = dt.timedelta(hours=1),
    ) -> Iterator[Batch]:
        """Simulate [start, end) and yield one Batch per ``chunk`` of it, in order.

        The first call fixes the simulation's origin at ``start``; later calls must start at
        :attr:`now` and continue seamlessly (run(a, b) then run(b, c) equals run(a, c)).
        Nothing is simulated until the iterator is consumed; stopping early leaves
        :attr:`now` at the end of the last batch yielded.
        """
        t0, t1, step = to_ms(start), to_ms(end), chunk // dt.timedelta(milliseconds=1)
        if step <= 0:
            raise ValueError(f"chunk must be positive, got {chunk}")
        if self._now_ms is not None and t0 != self._now_ms:
            raise ValueError(
                f"run must continue from sim.now ({self.now}), got start={start.isoformat()}"
            )
        if t1 < t0:
            raise ValueError(f"end ({end.isoformat()}) is before start ({start.isoformat()})")
        return self._chunks(t0, t1, step)

    def _chunks(self, t0: int, t1: int, step: int) -> Iterator[Batch]:
        if self._engine is None:
            self._engine = self._warm_up(t0)
        engine = self._engine
        t = t0
        while t < t1:
            u = min(t + step, t1)
            gpus, nodes, events = self._initial
            self._initial = ([], [], [])
            engine.advance(u)
            allocs = [a for a in engine.closed if a.end_ms is not None and a.end_ms > t]
            allocs += [j.alloc for j in engine.running.values() if j.alloc is not None]
            allocs.sort(key=lambda a: a.alloc_id)
            batch = Batch(
                samples=self._samples.build(t, u, allocs),
                gpus=gpus + engine.gpu_rows,
                nodes=nodes + engine.node_rows,
                job_events=events + engine.events,
            )
            engine.events, engine.gpu_rows, engine.node_rows = [], [], []
            self._forget_before(engine, u)
            self._now_ms = t = u
            yield batch
        self._now_ms = t1

    def _warm_up(self, origin_ms: int) -> Engine:
        """Simulate ``config.warmup`` before the origin silently; keep what is still live.

        The first batch then carries the inventory (stamped at the warm-up's start) and the
        earlier events of jobs still queued or running, as a real collector lists existing pods
        when it starts.
        """
        engine = Engine(self.config, self.cluster, origin_ms)
        engine.advance(origin_ms)
        live = {(j.job_id, j.attempt) for j in (*engine.pending.values(), *engine.running.values())}
        # The cluster existed through the warm-up: its inventory is stamped at the warm-up's
        # start, so that the jobs still running at the origin started on known capacity.
        ts = to_datetime(origin_ms - int(self.config.warmup.total_seconds() * 1000))
        self._initial = (
            [self.cluster.gpu_row(g, ts) for g in self.cluster.gpus],
            [self.cluster.node_row(n, ts) for n in self.cluster.nodes.values()],
            [e for e in engine.events if (e.job_id, e.attempt) in live],
        )
        engine.events, engine.gpu_rows, engine.node_rows = [], [], []
        self._forget_before(engine, origin_ms)
        for gpu in self.cluster.gpus:
            gpu.xids.clear()
        return engine

    def _forget_before(self, engine: Engine, t_ms: int) -> None:
        """Drop state the sample builder no longer needs once ticks before ``t_ms`` are done."""
        engine.closed = [a for a in engine.closed if (a.end_ms or 0) > t_ms]
        iv = self.config.interval_s * 1000
        last_tick = (t_ms - 1) // iv * iv
        for gpu in self.cluster.gpus:
            if gpu.changes:
                gpu.code_at_cut = gpu.changes[-1][1]
                gpu.changes.clear()
            gpu.xids[:] = [x for x in gpu.xids if x[0] > last_tick]
