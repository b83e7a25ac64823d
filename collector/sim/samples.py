"""Vectorised GPU samples for one chunk of simulated time.

The engine decides *who holds which GPU when*; this module decides *what the GPU reports*
every ``interval_s``: utilisation, memory, power, energy, temperature, clocks, Xid and pod
labels, as whole ``(ticks × GPUs)`` numpy arrays turned into one polars frame per chunk.

Randomness here is counter-based (a splitmix64 hash of seed, stream, job/GPU and tick), not a
stateful generator, so a sample's value does not depend on where chunk boundaries fall: running
[t0, t2) in one call or as [t0, t1) + [t1, t2) gives identical rows.

Utilisation is shaped by a measured cluster: each job's state maps to a *latent* level in
[0, 1), turned into percent by the inverse CDF (quantile table) of a real cluster's GPU
utilisation (Philly by default, ``collector/data/``). Idle states sit below the reference's
share of zero samples, busy training near its top, so the mixture over the cluster lands close
to the reference distribution while each job still behaves like its workload type.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from collector.records import SAMPLE_SCHEMA
from collector.sim.cluster import ABSENT, HEALTHY, SOURCE, Cluster
from collector.sim.config import SimulatorConfig, diurnal, is_weekend
from collector.sim.engine import Alloc

DATA_DIR = Path(__file__).with_name("data")
MAX_LAYERS = 4  # at most four jobs share one GPU (quarter shares); see SimGpu.take_slot

_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic, no warnings on arrays)."""
    x = x + _G
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def hash_uniform(seed: int, stream: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) floats that depend only on ``(seed, stream, a, b)``, elementwise."""
    key = _mix(np.array([seed * 1_000_003 + stream], dtype=np.uint64))
    a64 = np.atleast_1d(np.asarray(a)).astype(np.uint64)
    b64 = np.atleast_1d(np.asarray(b)).astype(np.uint64)
    h = _mix(_mix(a64 ^ key) + b64)
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def load_reference(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The quantile table of a real cluster's GPU utilisation: (cumulative 0-1, percent)."""
    table = np.loadtxt(DATA_DIR / f"{name}_gpu_util.csv", delimiter=",", skiprows=1)
    return table[:, 0] / 100.0, table[:, 1]


def layer_slots(allocs: Sequence[Alloc], ticks: np.ndarray, n_gpus: int) -> np.ndarray:
    """Which alloc (index into ``allocs``, -1 none) holds each share slot of each (tick, GPU).

    Shape (MAX_LAYERS, ticks, GPUs). The slots were fixed by the engine when each job
    started, so a GPU shared by several jobs layers them the same way in every chunking.
    """
    slot = np.full((MAX_LAYERS, len(ticks), n_gpus), -1, dtype=np.int32)
    for k, a in enumerate(allocs):
        i0 = int(np.searchsorted(ticks, a.start_ms, "left"))
        i1 = len(ticks) if a.end_ms is None else int(np.searchsorted(ticks, a.end_ms, "left"))
        for g, layer in zip(a.gids, a.slots, strict=True):
            slot[layer, i0:i1, g] = k
    return slot


class SampleBuilder:
    """Turns the engine's allocations and the GPUs' state logs into sample frames."""

    def __init__(self, config: SimulatorConfig, cluster: Cluster) -> None:
        """Load the utilisation reference; energy counters start at the first build."""
        self.config = config
        self.cluster = cluster
        self.ref_p, self.ref_v = load_reference(config.util_reference)
        self.energy_mj = np.zeros(0, dtype=np.int64)  # counter at each GPU's last sample
        self.present_last = np.zeros(0, dtype=bool)  # present at the last tick built

    def _grow(self) -> None:
        """Start counters for GPUs the arrays have not seen yet.

        GPUs present from the beginning get a counter as if the driver had been loaded weeks
        ago; GPUs added later start absent, so their first sample resets the counter.
        """
        known, n = len(self.energy_mj), len(self.cluster.gpus)
        if n == known:
            return
        gids = np.arange(known, n)
        start = (1e9 + 4e10 * hash_uniform(self.config.seed, 90, gids, gids)).astype(np.int64)
        present = np.array([self.cluster.gpus[g].code_at_cut != ABSENT for g in gids])
        self.energy_mj = np.concatenate([self.energy_mj, np.where(present, start, 0)])
        self.present_last = np.concatenate([self.present_last, present])

    def ticks(self, t0_ms: int, t1_ms: int) -> np.ndarray:
        """Sample instants in [t0, t1): multiples of the interval since the epoch, in ms."""
        iv = self.config.interval_s * 1000
        k0, k1 = -(-t0_ms // iv), -(-t1_ms // iv)
        return np.arange(k0, k1, dtype=np.int64) * iv

    def _state(self, ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Presence/health code and Xid per (tick, GPU) from each GPU's change log."""
        n_t, n_g = len(ticks), len(self.cluster.gpus)
        state = np.empty((n_t, n_g), dtype=np.int8)
        xid = np.zeros((n_t, n_g), dtype=np.uint32)
        for gpu in self.cluster.gpus:
            col = state[:, gpu.gid]
            col[:] = gpu.code_at_cut
            for t_ms, code in gpu.changes:
                col[int(np.searchsorted(ticks, t_ms, "left")) :] = code
            for t_ms, code in gpu.xids:
                i = int(np.searchsorted(ticks, t_ms, "left"))
                if i < n_t:
                    xid[i, gpu.gid] = code
        return state, xid

    def _job_util(self, a: dict[str, np.ndarray], t: np.ndarray) -> np.ndarray:
        """Utilisation percent of each (alloc, tick) pair: latent level → reference quantile."""
        seed, iv = self.config.seed, self.config.interval_s * 1000
        aid = a["alloc_id"]
        n1 = hash_uniform(seed, 1, aid, t // iv)
        age_s = (t - a["start_ms"]) / 1000.0
        day = diurnal(t)
        # training: steady near its level, with stalls (5-minute blocks) and checkpoints.
        stall = hash_uniform(seed, 2, aid, t // 300_000) < 0.08
        period_s = 1800.0 + 3600.0 * hash_uniform(seed, 3, aid, aid)
        ckpt = (age_s % period_s) < 150.0
        u_train = np.where(stall | ckpt, 0.33 + 0.17 * n1, a["level"] + 0.06 * (n1 - 0.5))
        # inference: follows the day's traffic.
        u_inf = 0.34 + (a["level"] - 0.34) * (0.1 + 0.9 * day) + 0.08 * (n1 - 0.5)
        # notebook: 15-minute bursts of work, mostly in working hours, idle otherwise.
        p_active = 0.04 + 0.5 * day * ~is_weekend(t)
        active = hash_uniform(seed, 4, aid, t // 900_000) < p_active
        u_nb = np.where(active, 0.36 + (a["level"] - 0.36) * n1, 0.34 * n1)
        kind = a["kind_code"]
        u = np.where(kind == 0, u_train, np.where(kind == 1, u_inf, u_nb))
        u = np.where(a["squatter"], 0.34 * n1, u)
        startup_s = 60.0 + 240.0 * hash_uniform(seed, 5, aid, aid)
        u = np.where(age_s < startup_s, 0.0, np.clip(u, 0.0, 0.9999))
        pct = np.rint(np.interp(u, self.ref_p, self.ref_v))
        return np.where(a["squatter"], np.minimum(pct, 5.0), pct)

    def build(self, t0_ms: int, t1_ms: int, allocs: Sequence[Alloc]) -> pl.DataFrame:
        """The sample frame (exactly SAMPLE_SCHEMA) for ticks in [t0_ms, t1_ms)."""
        self._grow()
        ticks = self.ticks(t0_ms, t1_ms)
        if len(ticks) == 0:
            return pl.DataFrame(schema=SAMPLE_SCHEMA)
        n_t, n_g = len(ticks), len(self.cluster.gpus)
        state, xid = self._state(ticks)
        layers = layer_slots(allocs, ticks, n_g)
        cols: dict[str, np.ndarray] = {
            "alloc_id": np.array([a.alloc_id for a in allocs], dtype=np.int64),
            "start_ms": np.array([a.start_ms for a in allocs], dtype=np.int64),
            "kind_code": np.array([a.kind_code for a in allocs], dtype=np.int8),
            "squatter": np.array([a.squatter for a in allocs], dtype=bool),
            "level": np.array([a.level for a in allocs], dtype=np.float64),
            "mem_frac": np.array([a.mem_frac for a in allocs], dtype=np.float64),
        }
        idle = np.ones((n_t, n_g))  # probability that no job's kernel is running
        mem_idle = np.ones((n_t, n_g))
        mem_used = np.zeros((n_t, n_g))
        label = np.zeros((n_t, n_g), dtype=np.int32)  # 0: unallocated, k+1: allocs[k]
        mem_factor = np.array([0.45, 0.7, 0.35, 0.5])
        seed = self.config.seed
        for layer in range(MAX_LAYERS - 1, -1, -1):
            ti, gi = np.nonzero(layers[layer] >= 0)
            if len(ti) == 0:
                continue
            k = layers[layer][ti, gi]
            a = {name: v[k] for name, v in cols.items()}
            t = ticks[ti]
            busy = self._job_util(a, t) / 100.0
            n2 = hash_uniform(seed, 6, a["alloc_id"], t)
            idle[ti, gi] *= 1.0 - busy
            mem_idle[ti, gi] *= 1.0 - busy * mem_factor[a["kind_code"]] * (0.85 + 0.3 * n2)
            starting = (t - a["start_ms"]) < 60_000
            mem_used[ti, gi] += a["mem_frac"] * np.where(starting, 0.3, 1.0 + 0.01 * (n2 - 0.5))
        for k in range(len(allocs) - 1, -1, -1):  # the earliest-started holder wins the labels
            alloc = allocs[k]
            i0 = int(np.searchsorted(ticks, alloc.start_ms, "left"))
            i1 = n_t if alloc.end_ms is None else int(np.searchsorted(ticks, alloc.end_ms, "left"))
            label[i0:i1, list(alloc.gids)] = k + 1
        present = state != ABSENT
        util = np.where(state == HEALTHY, 1.0 - idle, 0.0)
        frame = self._frame(ticks, present, util, 1.0 - mem_idle, mem_used, label, xid, allocs)
        return frame

    def _energy(self, present: np.ndarray, power_w: np.ndarray) -> np.ndarray:
        """Energy counter (mJ) per (tick, GPU): integrates power, resets when a GPU reappears."""
        n_t = present.shape[0]
        iv_s = self.config.interval_s
        inc = np.where(present, np.rint(power_w * iv_s * 1000.0), 0).astype(np.int64)
        prev = np.vstack([self.present_last[None, :], present[:-1]])
        reset = present & ~prev
        csum = np.cumsum(inc, axis=0)
        marks = np.where(reset, np.arange(n_t)[:, None], -1)
        last = np.maximum.accumulate(marks, axis=0)
        at = np.maximum(last, 0)
        since_reset = csum - np.take_along_axis(csum, at, 0) + np.take_along_axis(inc, at, 0)
        energy = np.where(last >= 0, since_reset, self.energy_mj[None, :] + csum)
        seen = present.any(axis=0)
        last_row = n_t - 1 - np.argmax(present[::-1], axis=0)
        self.energy_mj = np.where(
            seen, energy[last_row, np.arange(present.shape[1])], self.energy_mj
        )
        self.present_last = present[-1].copy()
        return energy

    def _frame(
        self,
        ticks: np.ndarray,
        present: np.ndarray,
        util: np.ndarray,
        mem_busy: np.ndarray,
        mem_frac: np.ndarray,
        label: np.ndarray,
        xid: np.ndarray,
        allocs: Sequence[Alloc],
    ) -> pl.DataFrame:
        """Derive power, clocks, temperature and energy, and assemble the polars frame."""
        gpus = self.cluster.gpus
        specs = [self.cluster.pools[g.pool].model for g in gpus]
        idle_w = np.array([s.idle_watts for s in specs])
        tdp = np.array([s.tdp_watts for s in specs])
        mem_total = np.array([s.memory_total_bytes for s in specs], dtype=np.float64)
        seed, n_t, n_g = self.config.seed, len(ticks), len(gpus)
        noise = hash_uniform(seed, 7, np.tile(np.arange(n_g), n_t), np.repeat(ticks, n_g))
        noise = noise.reshape(n_t, n_g)
        allocated = label > 0
        span = tdp - idle_w
        power = idle_w + span * (0.06 * allocated + 0.85 * util**1.1 * (0.92 + 0.1 * noise))
        power = np.minimum(power + 3.0 * (noise - 0.5), tdp)
        energy = self._energy(present, power)
        ti, gi = np.nonzero(present)
        u = util[ti, gi]
        has_gr = np.array([s.has_gr_engine for s in specs])[gi]
        gr = np.where(has_gr, u * (0.8 + 0.15 * noise[ti, gi]), np.nan)
        # The tensor pipe runs part of the engine's busy time (0 when idle); a model without
        # profiling metrics reports neither.
        tensor = np.where(has_gr, u * (0.35 + 0.3 * (1.0 - noise[ti, gi])), np.nan)
        temp = 27.0 + 50.0 * (power[ti, gi] - idle_w[gi]) / span[gi] + 2.0 * noise[ti, gi]
        max_clock = np.array([s.max_sm_clock_mhz for s in specs])[gi]
        idle_clock = np.array([s.idle_sm_clock_mhz for s in specs])[gi]
        clock = np.where(u > 0, np.rint(max_clock * (0.9 + 0.1 * noise[ti, gi])), idle_clock)
        used = np.minimum(mem_frac[ti, gi], 0.99) * mem_total[gi]
        lab = label[ti, gi]
        strings = {
            "node": [g.node for g in gpus],
            "gpu_uuid": [g.uuid for g in gpus],
            "gpu_model": [s.name for s in specs],
        }
        labels = {
            "pod": [""] + [a.pod for a in allocs],
            "namespace": [""] + [a.namespace for a in allocs],
            "container": [""] + [a.container for a in allocs],
            "job_id": [""] + [a.job_id for a in allocs],
        }
        n = len(ti)
        data = {
            "ts": pl.Series(ticks[ti]).cast(pl.Datetime("ms")).dt.replace_time_zone("UTC"),
            "cluster": pl.repeat(self.config.cluster, n, eager=True, dtype=pl.String),
            **{k: pl.Series(v, dtype=pl.String).gather(gi) for k, v in strings.items()},
            "gpu_index": np.array([g.index for g in gpus], dtype=np.uint16)[gi],
            "vendor": pl.repeat("nvidia", n, eager=True, dtype=pl.String),
            "mig_instance": pl.repeat("", n, eager=True, dtype=pl.String),
            "mig_profile": pl.repeat("", n, eager=True, dtype=pl.String),
            "gpu_util_ratio": u.astype(np.float32),
            "gr_engine_active_ratio": pl.Series(gr.astype(np.float32), nan_to_null=True),
            "mem_util_ratio": mem_busy[ti, gi].astype(np.float32),
            "memory_used_bytes": np.rint(used).astype(np.uint64),
            "memory_total_bytes": mem_total[gi].astype(np.uint64),
            "power_watts": power[ti, gi].astype(np.float32),
            "energy_millijoules": energy[ti, gi].astype(np.uint64),
            "temperature_celsius": np.round(temp, 1).astype(np.float32),
            "sm_clock_mhz": clock.astype(np.uint32),
            "tensor_active_ratio": pl.Series(tensor.astype(np.float32), nan_to_null=True),
            "xid": pl.Series(xid[ti, gi]).replace(0, None),
            **{k: pl.Series(v, dtype=pl.String).gather(lab) for k, v in labels.items()},
            "source": pl.repeat(SOURCE, n, eager=True, dtype=pl.String),
        }
        return pl.DataFrame(data).cast(SAMPLE_SCHEMA)  # type: ignore[arg-type]
