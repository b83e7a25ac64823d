"""Configuration of the synthetic cluster that :mod:`collector.sim.simulator` runs.

Everything the simulator does is decided here (hardware, pools, tenants, workload mix, fault
rates, capacity changes) plus one seed, so that the same config always yields the same records.
:meth:`SimulatorConfig.default` builds a realistic mixed cluster for any multiple of the node
size; tests and demos start from it and change fields with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import numpy as np
import numpy.typing as npt

from collector.records import UTC, WORKLOAD_TYPES

MIB = 1024 * 1024
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def diurnal(t_ms: npt.ArrayLike) -> np.ndarray:
    """The day shape of demand, 0 at 03:00 UTC and 1 at 15:00 UTC (works on arrays)."""
    hours = (np.asarray(t_ms) % DAY_MS) / HOUR_MS
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * (hours - 3.0) / 24.0)


def is_weekend(t_ms: npt.ArrayLike) -> np.ndarray:
    """True on Saturdays and Sundays (UTC); 1970-01-01 was a Thursday."""
    return (np.asarray(t_ms) // DAY_MS + 3) % 7 >= 5


@dataclasses.dataclass(frozen=True)
class GpuModelSpec:
    """One GPU model as NVML reports it, plus the power and clock envelope the simulator uses.

    ``memory_total_bytes`` is NVML's ``memory.total`` (what ``nvidia-smi`` prints in MiB).
    ``has_gr_engine`` says whether the source reports DCGM's profiling metrics
    ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` and ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``; when False the
    samples carry NULL there, so consumers exercise their fallback to ``gpu_util_ratio`` and
    their "not reported" state.
    """

    name: str
    memory_total_bytes: int
    idle_watts: float
    tdp_watts: float
    idle_sm_clock_mhz: int
    max_sm_clock_mhz: int
    compute_capability: str
    price_per_gpu_hour: str  # in the config's currency, a decimal string
    has_gr_engine: bool = True
    pci_bus_ids: tuple[str, ...] = ()  # per GPU index on a node; "" entries are derived


H100 = GpuModelSpec(
    name="NVIDIA H100 80GB HBM3",
    memory_total_bytes=81559 * MIB,
    idle_watts=68.0,
    tdp_watts=700.0,
    idle_sm_clock_mhz=345,
    max_sm_clock_mhz=1980,
    compute_capability="9.0",
    price_per_gpu_hour="2.99",
    pci_bus_ids=tuple(
        f"00000000:{b}:00.0" for b in ("53", "64", "75", "86", "97", "A8", "B9", "CA")
    ),
)
A100 = GpuModelSpec(
    name="NVIDIA A100-SXM4-80GB",
    memory_total_bytes=81920 * MIB,
    idle_watts=58.0,
    tdp_watts=400.0,
    idle_sm_clock_mhz=210,
    max_sm_clock_mhz=1410,
    compute_capability="8.0",
    price_per_gpu_hour="1.79",
    pci_bus_ids=tuple(
        f"00000000:{b}:00.0" for b in ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
    ),
)
# L40S: dcgm-exporter can report profiling metrics on it, but the simulator leaves them out
# so that every consumer's "no GR_ENGINE_ACTIVE, use GPU_UTIL" path runs in demos and tests.
L40S = GpuModelSpec(
    name="NVIDIA L40S",
    memory_total_bytes=46068 * MIB,
    idle_watts=36.0,
    tdp_watts=350.0,
    idle_sm_clock_mhz=210,
    max_sm_clock_mhz=2520,
    compute_capability="8.9",
    price_per_gpu_hour="0.99",
    has_gr_engine=False,
)


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """A pool of identical nodes (a Kueue ResourceFlavor / Slurm partition)."""

    name: str
    model: GpuModelSpec
    nodes: int
    gpus_per_node: int = 8
    cpu_milli: int = 224_000
    memory_bytes: int = 2048 * 1024 * MIB


@dataclasses.dataclass(frozen=True)
class TenantSpec:
    """An org/project with its users and how much of each workload type it submits.

    The three weights are relative shares of that workload type's arrivals.
    """

    org: str
    project: str
    users: tuple[str, ...]
    display_name: str = ""
    cost_center: str = ""
    training_weight: float = 1.0
    inference_weight: float = 1.0
    notebook_weight: float = 1.0
    borrow_limit_gpus: float | None = None  # per pool; None: may borrow without limit

    @property
    def tenant(self) -> str:
        """The tenant key, "org/project"."""
        return f"{self.org}/{self.project}"

    def weight(self, kind: str) -> float:
        """The share weight of workload ``kind`` ("training", "inference", "notebook")."""
        return float(getattr(self, f"{kind}_weight"))


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    """How jobs of one workload type arrive, what they ask for, and how they end.

    Weighted choices are tuples of ``(value, weight)``. ``shapes`` are
    ``(gpus, gpu_fraction, weight)``: 4 whole GPUs is ``(4, 1.0, w)``, a quarter of a shared
    GPU is ``(1, 0.25, w)``. Durations are log-normal (median, sigma of the log).
    """

    kind: str
    arrivals_per_hour: float  # mean over a weekday
    pools: tuple[tuple[str, float], ...]
    shapes: tuple[tuple[int, float, float], ...]
    duration_median_h: float
    duration_sigma: float
    priority_classes: tuple[tuple[str, float], ...]
    diurnal_amplitude: float = 0.5  # 0: flat, 1: no arrivals at night
    weekend_factor: float = 0.6
    squatter_prob: float = 0.0  # holds its GPUs at 0-5% for its whole life
    squatter_duration_factor: float = 3.0
    failure_prob: float = 0.05
    failure_reasons: tuple[tuple[str, float], ...] = (("Error: exit code 1", 1.0),)
    cancel_prob: float = 0.03  # cancelled by the user while running
    patience_median_h: float = 24.0  # cancelled if still waiting after this (log-normal)
    retry_prob: float = 0.8  # resubmitted as a new attempt after preemption/eviction/failure


@dataclasses.dataclass(frozen=True)
class CapacityChange:
    """A node added to or retired from ``pool`` at ``at`` after the first ``run`` start."""

    at: dt.timedelta
    action: str  # "add" or "retire"
    pool: str


PRIORITY_CLASSES: tuple[tuple[str, int], ...] = (("low", 100), ("normal", 500), ("high", 1000))

TRAINING_FAILURES: tuple[tuple[str, float], ...] = (
    ("OOMKilled", 0.3),
    ("NCCL timeout: watchdog caught collective operation timeout", 0.2),
    ("Error: exit code 1", 0.3),
    ("Xid 31: GPU memory page fault", 0.1),
    ("Xid 43: GPU stopped processing", 0.05),
    ("Xid 13: Graphics Engine Exception", 0.05),
)
HARDWARE_XIDS: tuple[tuple[int, str], ...] = (
    (79, "GPU has fallen off the bus"),
    (48, "Double Bit ECC Error"),
    (94, "Contained ECC error"),
    (95, "Uncontained ECC error"),
    (74, "NVLink Error"),
)


@dataclasses.dataclass(frozen=True)
class SimulatorConfig:
    """Everything that decides a simulated cluster's records; same config → same output."""

    cluster: str = "sim-cluster"
    seed: int = 0
    interval_s: int = 10
    pools: tuple[PoolSpec, ...] = ()
    tenants: tuple[TenantSpec, ...] = ()
    workloads: tuple[WorkloadSpec, ...] = ()
    priority_classes: tuple[tuple[str, int], ...] = PRIORITY_CLASSES
    placement: str = "spread"  # "spread" (least-allocated node), "pack", or "random"
    enforce_quotas: bool = True
    node_failures_per_node_day: float = 0.05
    node_repair_hours: tuple[float, float] = (1.0, 6.0)
    gpu_xids_per_gpu_day: float = 0.008
    gpu_repair_hours: tuple[float, float] = (2.0, 12.0)
    hardware_xids: tuple[tuple[int, str], ...] = HARDWARE_XIDS
    capacity_changes: tuple[CapacityChange, ...] = ()
    warmup: dt.timedelta = dt.timedelta(hours=24)  # simulated silently before the first start
    util_reference: str = "philly"  # shape of utilisation: "philly" or "kalos" (collector/data)
    energy_price_per_kwh: str = "0.12"
    currency: str = "USD"  # of every price the simulated price book holds
    config_effective_from: dt.datetime = dt.datetime(2025, 1, 1, tzinfo=UTC)
    driver_version: str = "580.105.08"
    cuda_version: str = "13.0"

    def __post_init__(self) -> None:
        """Reject configs that cannot run, naming the field and the value."""
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {self.interval_s}")
        if not self.pools or not self.tenants or not self.workloads:
            raise ValueError("pools, tenants and workloads must not be empty")
        pool_names = [p.name for p in self.pools]
        if len(set(pool_names)) != len(pool_names):
            raise ValueError(f"pool names must be unique, got {pool_names}")
        if self.placement not in ("spread", "pack", "random"):
            raise ValueError(f"placement must be spread, pack or random, got {self.placement!r}")
        if self.util_reference not in ("philly", "kalos"):
            raise ValueError(f"util_reference must be philly or kalos, got {self.util_reference!r}")
        classes = dict(self.priority_classes)
        for w in self.workloads:
            if w.kind not in WORKLOAD_TYPES:
                raise ValueError(f"workload kind must be one of {WORKLOAD_TYPES}, got {w.kind!r}")
            for pool, _ in w.pools:
                if pool not in pool_names:
                    raise ValueError(f"workload {w.kind} names unknown pool {pool!r}")
            for cls, _ in w.priority_classes:
                if cls not in classes:
                    raise ValueError(f"workload {w.kind} names unknown priority class {cls!r}")
            for gpus, fraction, _ in w.shapes:
                if fraction < 1.0 and gpus != 1:
                    raise ValueError(f"fractional shapes must ask for 1 GPU, got {gpus}")
        for change in self.capacity_changes:
            if change.action not in ("add", "retire") or change.pool not in pool_names:
                raise ValueError(f"bad capacity change {change}")

    @property
    def total_gpus(self) -> int:
        """GPUs at the start (before any capacity change)."""
        return sum(p.nodes * p.gpus_per_node for p in self.pools)

    @classmethod
    def default(cls, gpus: int = 64, seed: int = 0, gpus_per_node: int = 8) -> SimulatorConfig:
        """A mixed H100/A100/L40S cluster of ``gpus`` GPUs with six tenants and a week of life.

        Half the nodes are H100 training nodes, a quarter A100, a quarter L40S inference nodes.
        Arrival rates scale with the size so the cluster runs at roughly 75-85% allocation with
        queueing at the diurnal peak. One H100 node is added after 2 days and one A100 node is
        retired after 5 days.
        """
        if gpus <= 0 or gpus % gpus_per_node:
            raise ValueError(f"gpus ({gpus}) must be a positive multiple of {gpus_per_node}")
        nodes = gpus // gpus_per_node
        n_a100 = nodes // 4 if nodes >= 3 else 0
        n_l40s = nodes // 4 if nodes >= 3 else 0
        n_h100 = nodes - n_a100 - n_l40s
        pools = [PoolSpec("train-h100", H100, n_h100, gpus_per_node)]
        if n_a100:
            pools.append(PoolSpec("a100", A100, n_a100, gpus_per_node))
        if n_l40s:
            pools.append(PoolSpec("inference-l40s", L40S, n_l40s, gpus_per_node, 128_000))
        names = [p.name for p in pools]
        scale = gpus / 64.0

        def spread(*pairs: tuple[str, float]) -> tuple[tuple[str, float], ...]:
            kept = tuple((p, w) for p, w in pairs if p in names)
            return kept or (("train-h100", 1.0),)

        workloads = (
            WorkloadSpec(
                kind="training",
                arrivals_per_hour=3.4 * scale,
                pools=spread(("train-h100", 0.7), ("a100", 0.3)),
                shapes=((1, 1.0, 0.35), (2, 1.0, 0.25), (4, 1.0, 0.25), (8, 1.0, 0.15)),
                duration_median_h=3.0,
                duration_sigma=1.0,
                priority_classes=(("low", 0.25), ("normal", 0.7), ("high", 0.05)),
                diurnal_amplitude=0.4,
                squatter_prob=0.06,
                failure_prob=0.12,
                failure_reasons=TRAINING_FAILURES,
                cancel_prob=0.04,
                patience_median_h=18.0,
                retry_prob=0.85,
            ),
            WorkloadSpec(
                kind="inference",
                arrivals_per_hour=1.6 * scale,
                pools=spread(("inference-l40s", 0.8), ("a100", 0.2)),
                shapes=((1, 1.0, 0.5), (1, 0.5, 0.25), (1, 0.25, 0.25)),
                duration_median_h=8.0,
                duration_sigma=1.2,
                priority_classes=(("normal", 0.3), ("high", 0.7)),
                diurnal_amplitude=0.2,
                squatter_prob=0.03,
                failure_prob=0.03,
                failure_reasons=(("OOMKilled", 0.5), ("Error: exit code 1", 0.5)),
                cancel_prob=0.02,
                patience_median_h=6.0,
            ),
            WorkloadSpec(
                kind="notebook",
                arrivals_per_hour=2.6 * scale,
                pools=spread(("a100", 0.5), ("inference-l40s", 0.5)),
                shapes=((1, 1.0, 0.7), (1, 0.5, 0.3)),
                duration_median_h=2.5,
                duration_sigma=0.9,
                priority_classes=(("normal", 1.0),),
                diurnal_amplitude=0.9,
                weekend_factor=0.3,
                squatter_prob=0.15,
                squatter_duration_factor=5.0,
                failure_prob=0.02,
                failure_reasons=(("OOMKilled", 0.6), ("Error: exit code 137", 0.4)),
                cancel_prob=0.05,
                patience_median_h=2.0,
                retry_prob=0.0,
            ),
        )
        tenants = (
            TenantSpec(
                "research",
                "llm-pretrain",
                ("alice", "bob", "carol"),
                "LLM pre-training",
                "CC-1001",
                5.0,
                0.0,
                1.0,
            ),
            TenantSpec(
                "research",
                "vision",
                ("dave", "erin"),
                "Computer vision",
                "CC-1002",
                2.0,
                0.5,
                2.0,
                borrow_limit_gpus=8.0,
            ),
            TenantSpec(
                "product",
                "search-ranking",
                ("frank", "grace"),
                "Search ranking",
                "CC-2001",
                1.0,
                3.0,
                1.0,
            ),
            TenantSpec(
                "product",
                "chat-serving",
                ("heidi", "ivan"),
                "Chat serving",
                "CC-2002",
                1.0,
                4.0,
                0.5,
            ),
            TenantSpec(
                "data-science",
                "forecasting",
                ("judy", "mallory", "niaj"),
                "Demand forecasting",
                "CC-3001",
                0.5,
                0.5,
                4.0,
                borrow_limit_gpus=4.0,
            ),
            TenantSpec(
                "platform",
                "ml-infra",
                ("oscar", "peggy"),
                "ML infrastructure",
                "CC-4001",
                0.5,
                1.0,
                1.0,
            ),
        )
        changes = [CapacityChange(dt.timedelta(days=2), "add", "train-h100")]
        if n_a100:
            changes.append(CapacityChange(dt.timedelta(days=5), "retire", "a100"))
        return cls(
            seed=seed,
            pools=tuple(pools),
            tenants=tenants,
            workloads=workloads,
            capacity_changes=tuple(changes),
        )


def expected_shares(config: SimulatorConfig) -> dict[tuple[str, str], float]:
    """Each (tenant, pool)'s expected share of the pool's demand, from the workload mix.

    Used to size default quota guarantees: demand in GPU-hours per hour is arrival rate ×
    mean GPUs × mean duration, split over pools and tenants by their weights.
    """
    demand: dict[tuple[str, str], float] = {}
    for w in config.workloads:
        total_w = sum(t.weight(w.kind) for t in config.tenants) or 1.0
        shape_w = sum(s[2] for s in w.shapes)
        mean_gpus = sum(g * f * s for g, f, s in w.shapes) / shape_w
        mean_h = w.duration_median_h * math.exp(w.duration_sigma**2 / 2)
        pool_w = sum(p[1] for p in w.pools)
        for t in config.tenants:
            for pool, pw in w.pools:
                key = (t.tenant, pool)
                share = t.weight(w.kind) / total_w * pw / pool_w
                gpu_hours_per_hour = w.arrivals_per_hour * mean_gpus * mean_h * share
                demand[key] = demand.get(key, 0.0) + gpu_hours_per_hour
    pool_totals: dict[str, float] = {}
    for (_, pool), d in demand.items():
        pool_totals[pool] = pool_totals.get(pool, 0.0) + d
    return {k: d / pool_totals[k[1]] for k, d in demand.items() if d > 0 and pool_totals[k[1]]}
