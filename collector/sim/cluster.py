"""The simulated cluster's hardware: nodes, GPUs, their states, and job placement.

Identities are derived from hashes of the cluster name, node and index (never from Python's
salted ``hash``), so a GPU keeps its UUID, serial and PCI bus id across runs and processes.
Each GPU also keeps a log of presence/health changes and Xid errors that the vectorised sample
builder (:mod:`collector.sim.samples`) turns into per-interval state.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from collector.records import GpuInventory, NodeInventory
from collector.sim.config import PoolSpec, SimulatorConfig

SOURCE = "simulator"

# GPU presence/health codes used in the change logs and the sample builder.
ABSENT, HEALTHY, UNHEALTHY = 0, 1, 2


def stable_digest(*parts: object) -> bytes:
    """A process-independent digest of ``parts`` (what Python's salted ``hash`` is not)."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    """A deterministic NVML-style UUID, ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``."""
    h = stable_digest("uuid", cluster, node, index).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclasses.dataclass
class SimGpu:
    """One physical GPU and what it currently holds."""

    gid: int  # dense id: row in the sample builder's arrays
    uuid: str
    node: str
    pool: str
    index: int
    spec_name: str
    serial: str
    pci_bus_id: str
    health: str = "healthy"  # GpuInventory.health
    health_reason: str = ""
    health_epoch: int = 0  # bumps on each health change; stale repair events are ignored
    used: float = 0.0  # sum of the fractions held by running jobs
    # running jobs on it: serial → share slot (0-3). Slots are fixed when a job starts, so
    # the sample builder's layering does not depend on where chunk boundaries fall.
    holders: dict[int, int] = dataclasses.field(default_factory=dict)
    changes: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (t_ms, code)
    xids: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (t_ms, xid)
    code_at_cut: int = ABSENT  # presence/health code before the first entry in ``changes``

    @property
    def schedulable(self) -> bool:
        """Whether new work may be placed on it."""
        return self.health == "healthy"

    def take_slot(self, serial: int) -> int:
        """Give job ``serial`` the lowest free share slot on this GPU and return it."""
        slot = min(set(range(4)) - set(self.holders.values()))
        self.holders[serial] = slot
        return slot

    def set_code(self, t_ms: int, code: int) -> None:
        """Record a presence/health change at ``t_ms`` for the sample builder."""
        self.changes.append((t_ms, code))


@dataclasses.dataclass
class SimNode:
    """One node of a pool with its GPUs."""

    name: str
    pool: PoolSpec
    gids: list[int]
    state: str = "ready"  # NodeInventory.state
    state_reason: str = ""
    epoch: int = 0  # bumps on each state change; stale repair events are ignored


class Cluster:
    """Nodes and GPUs, their inventory rows, and placement of jobs onto them."""

    def __init__(self, config: SimulatorConfig) -> None:
        """Create the starting nodes (all ready) of every pool in ``config``."""
        self.config = config
        self.pools = {p.name: p for p in config.pools}
        self.nodes: dict[str, SimNode] = {}
        self.by_pool: dict[str, list[SimNode]] = {p.name: [] for p in config.pools}
        self.gpus: list[SimGpu] = []
        self._next_node_no = {p.name: 1 for p in config.pools}
        for pool in config.pools:
            for _ in range(pool.nodes):
                self.add_node(pool.name, t_ms=None)

    def add_node(self, pool_name: str, t_ms: int | None) -> SimNode:
        """Add a ready node to ``pool_name``; ``t_ms`` None means present from the beginning."""
        pool = self.pools[pool_name]
        name = f"{pool.name}-{self._next_node_no[pool.name]:03d}"
        self._next_node_no[pool.name] += 1
        node = SimNode(name=name, pool=pool, gids=[])
        for index in range(pool.gpus_per_node):
            digest = stable_digest("serial", self.config.cluster, name, index)
            bus_ids = pool.model.pci_bus_ids
            derived = f"00000000:{0x18 + 0x11 * index:02X}:00.0"
            bus = bus_ids[index] if index < len(bus_ids) else derived
            gpu = SimGpu(
                gid=len(self.gpus),
                uuid=gpu_uuid(self.config.cluster, name, index),
                node=name,
                pool=pool.name,
                index=index,
                spec_name=pool.model.name,
                serial=str(1650000000000 + int.from_bytes(digest[:6]) % 10**12),
                pci_bus_id=bus,
            )
            if t_ms is None:
                gpu.code_at_cut = HEALTHY
            else:
                gpu.set_code(t_ms, HEALTHY)
            node.gids.append(gpu.gid)
            self.gpus.append(gpu)
        self.nodes[name] = node
        self.by_pool[pool.name].append(node)
        return node

    # -- inventory rows ------------------------------------------------------------------

    def gpu_row(self, gpu: SimGpu, ts: object) -> GpuInventory:
        """The GpuInventory row for ``gpu`` as it is now, stamped ``ts``."""
        spec = self.pools[gpu.pool].model
        return GpuInventory(
            ts=ts,  # type: ignore[arg-type]
            cluster=self.config.cluster,
            pool=gpu.pool,
            node=gpu.node,
            gpu_uuid=gpu.uuid,
            gpu_index=gpu.index,
            gpu_model=spec.name,
            memory_total_bytes=spec.memory_total_bytes,
            health=gpu.health,
            health_reason=gpu.health_reason,
            driver_version=self.config.driver_version,
            cuda_version=self.config.cuda_version,
            compute_capability=spec.compute_capability,
            pci_bus_id=gpu.pci_bus_id,
            serial=gpu.serial,
            source=SOURCE,
        )

    def node_row(self, node: SimNode, ts: object) -> NodeInventory:
        """The NodeInventory row for ``node`` as it is now, stamped ``ts``."""
        return NodeInventory(
            ts=ts,  # type: ignore[arg-type]
            cluster=self.config.cluster,
            pool=node.pool.name,
            node=node.name,
            gpu_model=node.pool.model.name,
            gpu_count=len(node.gids),
            state=node.state,
            state_reason=node.state_reason,
            cpu_milli=node.pool.cpu_milli,
            memory_bytes=node.pool.memory_bytes,
            source=SOURCE,
        )

    # -- placement -----------------------------------------------------------------------

    def free_gpus(self, node: SimNode, fraction: float) -> list[SimGpu]:
        """GPUs of a ready ``node`` that can take a share ``fraction`` (1.0: must be empty)."""
        if node.state != "ready":
            return []
        out = []
        for gid in node.gids:
            gpu = self.gpus[gid]
            if not gpu.schedulable:
                continue
            if (fraction >= 1.0 and gpu.used == 0.0) or (
                fraction < 1.0 and gpu.used + fraction <= 1.0 + 1e-9
            ):
                out.append(gpu)
        return out

    def pool_free(self, pool: str) -> float:
        """Free whole-GPU equivalents in ``pool`` (healthy GPUs on ready nodes)."""
        return sum(
            1.0 - self.gpus[g].used
            for n in self.by_pool[pool]
            if n.state == "ready"
            for g in n.gids
            if self.gpus[g].schedulable
        )

    def place(
        self, pool: str, gpus: int, fraction: float, rng: np.random.Generator
    ) -> tuple[SimNode, list[SimGpu]] | None:
        """Choose a node and GPUs for a single-node request, or None if nothing fits.

        ``spread`` picks the least-allocated node (Kubernetes' default LeastAllocated score),
        which scatters small jobs and strands capacity for 8-GPU jobs; ``pack`` the most
        allocated; ``random`` any node that fits. Shared (fractional) requests go to the GPU
        with the least room that still fits, so shares stack instead of taking whole GPUs.
        """
        fits: list[tuple[SimNode, list[SimGpu]]] = []
        for node in self.by_pool[pool]:
            free = self.free_gpus(node, fraction)
            if len(free) >= gpus:
                fits.append((node, free))
        if not fits:
            return None
        policy = self.config.placement
        if policy == "random":
            node, free = fits[int(rng.integers(len(fits)))]
        else:
            sign = 1.0 if policy == "spread" else -1.0

            def load(item: tuple[SimNode, list[SimGpu]]) -> float:
                return sign * sum(self.gpus[g].used for g in item[0].gids)

            node, free = min(fits, key=load)
        if fraction < 1.0:
            free = sorted(free, key=lambda g: (-g.used, g.index))
        return node, free[:gpus]
