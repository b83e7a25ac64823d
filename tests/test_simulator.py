"""Unit tests of the synthetic cluster (collector.sim.simulator): records, behaviour, realism.

One 7-day run of the default 64-GPU cluster (seed 0) is shared by most tests; its samples are
kept as a slim frame (the columns the checks need, strings as categoricals) to stay small.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import re
import time
from decimal import Decimal

import numpy as np
import polars as pl
import pytest

from collector.records import SAMPLE_SCHEMA, TERMINAL_EVENTS, UTC, GpuInventory, JobEvent
from collector.sim.samples import load_reference
from collector.sim.simulator import Simulator, SimulatorConfig

START = dt.datetime(2025, 3, 3, tzinfo=UTC)  # a Monday
END = START + dt.timedelta(days=7)
CHUNK = dt.timedelta(hours=1)
SLIM = (
    "ts",
    "node",
    "gpu_uuid",
    "gpu_model",
    "gpu_util_ratio",
    "gr_engine_active_ratio",
    "tensor_active_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "energy_millijoules",
    "xid",
    "pod",
    "job_id",
)
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclasses.dataclass
class Week:
    """What one default run produced, flattened for the checks."""

    config: SimulatorConfig
    sim: Simulator
    samples: pl.DataFrame
    events: list[JobEvent]
    gpus: list[GpuInventory]
    nodes: list
    first: object  # the first Batch
    schemas_ok: bool
    bounds_ok: bool
    seconds: float  # time spent inside the simulator


@pytest.fixture(scope="module")
def week() -> Week:
    config = SimulatorConfig.default(gpus=64, seed=0)
    sim = Simulator(config)
    frames, events, gpus, nodes = [], [], [], []
    schemas_ok = bounds_ok = True
    it, seconds, first, t0 = sim.run(START, END, CHUNK), 0.0, None, START
    while True:
        tick = time.perf_counter()
        batch = next(it, None)
        seconds += time.perf_counter() - tick
        if batch is None:
            break
        first = first or batch
        df = batch.samples
        schemas_ok &= dict(df.schema) == SAMPLE_SCHEMA
        bounds_ok &= bool(df["ts"].min() >= t0 and df["ts"].max() < t0 + CHUNK)
        frames.append(
            df.select(SLIM).with_columns(
                pl.col("node", "gpu_uuid", "gpu_model", "pod", "job_id").cast(pl.Categorical)
            )
        )
        events += batch.job_events
        gpus += batch.gpus
        nodes += batch.nodes
        t0 += CHUNK
    return Week(
        config, sim, pl.concat(frames), events, gpus, nodes, first, schemas_ok, bounds_ok, seconds
    )


def attempts(events: list[JobEvent]) -> dict[tuple[str, int], dict[str, JobEvent]]:
    """(job_id, attempt) → {event name: event}."""
    out: dict[tuple[str, int], dict[str, JobEvent]] = collections.defaultdict(dict)
    for e in events:
        assert e.event not in out[(e.job_id, e.attempt)], f"duplicate {e.event} for {e.job_id}"
        out[(e.job_id, e.attempt)][e.event] = e
    return out


def terminal(evs: dict[str, JobEvent]) -> JobEvent | None:
    ends = [e for name, e in evs.items() if name in TERMINAL_EVENTS]
    assert len(ends) <= 1, f"several terminal events: {ends}"
    return ends[0] if ends else None


Interval = tuple[dt.datetime, dt.datetime, JobEvent, JobEvent | None]


def intervals(events: list[JobEvent]) -> list[Interval]:
    """Allocation intervals: (start, end, started event, terminal event or None if running)."""
    out = []
    for evs in attempts(events).values():
        if "started" in evs:
            end = terminal(evs)
            out.append((evs["started"].ts, end.ts if end else END, evs["started"], end))
    return out


def ks_to_reference(util_percent: np.ndarray, name: str) -> tuple[float, float, float]:
    """(KS distance, simulated share at 0%, reference share at 0%) against a quantile table."""
    p, v = load_reference(name)
    xs = np.arange(0, 101)
    ref = np.array([p[v <= x + 1e-9].max() for x in xs])
    sim = np.searchsorted(np.sort(util_percent), xs + 1e-6, side="right") / len(util_percent)
    return float(np.abs(sim - ref).max()), float(sim[0]), float(ref[0])


# -- records and inventory ------------------------------------------------------------------


def test_samples_match_the_schema_and_the_interval_grid(week: Week) -> None:
    assert week.schemas_ok and week.bounds_ok
    s = week.samples
    ms = s["ts"].dt.epoch("ms")
    assert (ms % 10_000 == 0).all()
    assert s.select("ts", "gpu_uuid").is_unique().all()
    first = week.first.samples  # type: ignore[attr-defined]
    assert set(first["source"]) == {"simulator"} and set(first["vendor"]) == {"nvidia"}
    assert set(first["cluster"]) == {"sim-cluster"}


def test_a_week_has_a_sample_per_gpu_and_interval(week: Week) -> None:
    # 7 days x 64-72 GPUs x 10 s is about 4M samples (its speed is measured in `make bench`)
    assert len(week.samples) > 3_900_000


def test_initial_inventory(week: Week) -> None:
    # stamped at the warm-up's start: the jobs running at START started on known capacity
    known = START - dt.timedelta(hours=24)
    gpus = [g for g in week.first.gpus if g.ts == known]  # type: ignore[attr-defined]
    nodes = [n for n in week.first.nodes if n.ts == known]  # type: ignore[attr-defined]
    assert len(gpus) == 64 and len(nodes) == 8
    assert len({g.gpu_uuid for g in gpus}) == 64 and all(UUID_RE.match(g.gpu_uuid) for g in gpus)
    per_node = collections.Counter(g.node for g in gpus)
    assert set(per_node.values()) == {8}
    assert {n.node: n.gpu_count for n in nodes} == dict(per_node)
    models = collections.Counter((g.pool, g.gpu_model) for g in gpus)
    assert models == {
        ("train-h100", "NVIDIA H100 80GB HBM3"): 32,
        ("a100", "NVIDIA A100-SXM4-80GB"): 16,
        ("inference-l40s", "NVIDIA L40S"): 16,
    }
    for node in per_node:
        assert sorted(g.gpu_index for g in gpus if g.node == node) == list(range(8))
    assert {g.memory_total_bytes for g in gpus if "H100" in g.gpu_model} == {81559 * 2**20}
    assert all(g.serial and g.pci_bus_id and g.driver_version for g in gpus)


def test_samples_only_from_present_gpus(week: Week) -> None:
    """Every sample's GPU is healthy or unhealthy per its latest inventory row (never down)."""
    inv = pl.DataFrame(
        {
            "ts": [g.ts for g in week.gpus],
            "gpu_uuid": [g.gpu_uuid for g in week.gpus],
            "health": [g.health for g in week.gpus],
        },
    ).with_columns(pl.col("ts").dt.cast_time_unit("ms"), pl.col("gpu_uuid").cast(pl.Categorical))
    joined = (
        week.samples.select("ts", "gpu_uuid")
        .sort("ts")
        .join_asof(inv.sort("ts"), on="ts", by="gpu_uuid", strategy="backward")
    )
    assert joined["health"].null_count() == 0
    assert set(joined["health"].unique()) <= {"healthy", "unhealthy"}
    assert {g.health for g in week.gpus} >= {"down", "retired", "unhealthy", "healthy"}


# -- job lifecycle --------------------------------------------------------------------------


def test_job_events_are_in_a_valid_order(week: Week) -> None:
    by_attempt = attempts(week.events)
    assert len(by_attempt) > 500
    for (job_id, attempt), evs in by_attempt.items():
        assert "submitted" in evs, (job_id, attempt)
        sub, end = evs["submitted"], terminal(evs)
        if "started" in evs:
            st = evs["started"]
            assert evs["admitted"].ts == st.ts >= sub.ts
            assert st.node and len(st.gpu_uuids) == round(st.gpus_requested / st.gpu_fraction)
            if end is not None:
                assert end.ts >= st.ts and end.started_at == st.ts
                assert end.gpu_uuids == st.gpu_uuids and end.node == st.node
        elif end is not None:
            assert end.event == "cancelled" and end.started_at is None and end.ts >= sub.ts
        if (job_id, attempt - 1) in by_attempt:
            previous = terminal(by_attempt[(job_id, attempt - 1)])
            assert previous is not None and previous.ts <= sub.ts
        elif attempt > 0:
            assert sub.ts < START  # earlier attempts ended in the warm-up, before the first batch
        assert sub.tenant == f"{sub.org}/{sub.project}" and sub.namespace == sub.project
        assert sub.queue == f"{sub.project}-queue" and sub.user and sub.priority_class
    # batches carry events of their own chunk, except the first (jobs live at the start)
    assert all(e.ts >= START for e in week.events if e.event in TERMINAL_EVENTS)
    early = [e for e in week.events if e.ts < START]
    assert early and {e.event for e in early} <= {"submitted", "admitted", "started"}


def test_no_gpu_is_ever_more_than_fully_allocated(week: Week) -> None:
    changes: dict[str, list[tuple[dt.datetime, float]]] = collections.defaultdict(list)
    node_of = {g.gpu_uuid: g.node for g in week.gpus}
    for start, end, st, _ in intervals(week.events):
        for uuid in st.gpu_uuids:
            assert node_of[uuid] == st.node
            changes[uuid] += [(start, st.gpu_fraction), (end, -st.gpu_fraction)]
    shared = 0
    for uuid, deltas in changes.items():
        level = 0.0
        for _, delta in sorted(deltas, key=lambda d: (d[0], d[1])):  # releases first
            level += delta
            assert level <= 1.0 + 1e-9, uuid
            shared += 0 < level < 1
    assert shared > 0  # fractional sharing happened


def test_sample_labels_fall_inside_the_jobs_allocations(week: Week) -> None:
    spans = (
        week.samples.filter(pl.col("pod") != "")
        .group_by("pod")
        .agg(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
    )
    by_pod = {f"{st.job_id}-{st.attempt}": (s, e) for s, e, st, _ in intervals(week.events)}
    for pod, first, last in spans.iter_rows():
        start, end = by_pod[pod]
        assert start <= first and last < end, pod


def test_queueing_preemption_failures_and_cancellations(week: Week) -> None:
    by_attempt = attempts(week.events)
    waits = [
        (e["started"].ts - e["submitted"].ts).total_seconds()
        for e in by_attempt.values()
        if "started" in e
    ]
    assert sum(w > 0 for w in waits) > 50 and max(waits) > 3600
    preempted = [e for e in week.events if e.event == "preempted"]
    assert len(preempted) > 10
    started = {(e.job_id, e.ts): e for e in week.events if e.event == "started"}
    for victim in preempted:
        m = re.match(r"^preempted by (\S+) \(priority class (\w+)\)$", victim.reason)
        assert m, victim.reason
        winner = started[(m.group(1), victim.ts)]
        assert winner.node == victim.node and winner.priority > victim.priority
    retried = {(e.job_id, e.attempt - 1) for e in week.events if e.event == "submitted"}
    assert any((v.job_id, v.attempt) in retried for v in preempted)
    reasons = " | ".join(e.reason for e in week.events if e.event == "failed")
    for needle in ("OOMKilled", "NCCL timeout", "Error: exit code", "NodeFailure", "Xid "):
        assert needle in reasons
    cancelled = [e for e in week.events if e.event == "cancelled"]
    assert any(e.started_at is None for e in cancelled)  # gave up waiting in the queue
    assert any(e.started_at is not None for e in cancelled)  # stopped while running
    assert {e.workload_type for e in week.events} == {"training", "inference", "notebook"}


def test_fragmentation_strands_multi_gpu_jobs(week: Week) -> None:
    """A multi-GPU job waits while enough GPUs are free in its pool, but on different nodes."""
    pool_of = {g.node: g.pool for g in week.gpus}
    health = pl.DataFrame(
        {
            "ts": [g.ts for g in week.gpus],
            "gpu_uuid": [g.gpu_uuid for g in week.gpus],
            "health": [g.health for g in week.gpus],
        }
    )
    stranded = 0
    for evs in attempts(week.events).values():
        st, sub = evs.get("started"), evs["submitted"]
        if st is None or st.gpu_fraction < 1 or st.gpus_requested < 2:
            continue
        if st.ts - sub.ts < dt.timedelta(minutes=10):
            continue
        mid = sub.ts + (st.ts - sub.ts) / 2
        tick = mid.replace(microsecond=0) - dt.timedelta(seconds=mid.second % 10)
        unhealthy = set(
            health.filter(pl.col("ts") <= tick)
            .group_by("gpu_uuid")
            .agg(pl.col("health").last())
            .filter(pl.col("health") != "healthy")["gpu_uuid"]
        )
        free = week.samples.filter((pl.col("ts") == tick) & (pl.col("job_id") == "")).select(
            pl.col("node").cast(pl.String), pl.col("gpu_uuid").cast(pl.String)
        )
        per_node = collections.Counter(
            n for n, u in free.iter_rows() if pool_of[n] == st.pool and u not in unhealthy
        )
        if sum(per_node.values()) >= st.gpus_requested > max(per_node.values(), default=0):
            stranded += 1
        if stranded >= 3:
            break
    assert stranded >= 3


# -- faults and capacity --------------------------------------------------------------------


def test_node_failure_and_recovery(week: Week) -> None:
    downs = [n for n in week.nodes if n.state == "down" and n.ts > START]
    assert downs and all(n.state_reason.startswith("NodeFailure") for n in downs)
    ivs = intervals(week.events)
    for down in downs:
        up = min((n.ts for n in week.nodes if n.node == down.node and n.ts > down.ts), default=END)
        assert up < END or down.ts > END - dt.timedelta(hours=6)
        node_samples = week.samples.filter(pl.col("node") == down.node)
        assert node_samples.filter(pl.col("ts").is_between(down.ts, up, closed="left")).is_empty()
        if up < END:
            assert not node_samples.filter(pl.col("ts") >= up).is_empty()
            # the energy counter restarts with the driver
            before = node_samples.filter(pl.col("ts") < down.ts)["energy_millijoules"]
            after = node_samples.filter(pl.col("ts") >= up)["energy_millijoules"]
            if len(before) and len(after):
                assert after[0] < before[-1]
        for start, end, st, endev in ivs:
            if st.node == down.node and start < down.ts < end:
                raise AssertionError(f"{st.job_id} kept running on a failed node")
            if st.node == down.node and end == down.ts and endev is not None:
                assert endev.event == "failed" and endev.reason == "NodeFailure"
    assert any(e.reason == "NodeFailure" for e in week.events)


def test_xid_makes_a_gpu_unhealthy_until_repaired(week: Week) -> None:
    bad = [g for g in week.gpus if g.health == "unhealthy"]
    assert bad
    ivs = intervals(week.events)
    for row in bad:
        code = int(re.match(r"^Xid (\d+): \S", row.health_reason).group(1))  # type: ignore[union-attr]
        later = [g for g in week.gpus if g.gpu_uuid == row.gpu_uuid and g.ts > row.ts]
        until = min((g.ts for g in later), default=END)
        assert later or row.ts > END - dt.timedelta(hours=12)
        gs = week.samples.filter((pl.col("gpu_uuid") == row.gpu_uuid) & (pl.col("ts") >= row.ts))
        assert gs["xid"][0] == code
        while_bad = gs.filter(pl.col("ts") < until)
        assert (while_bad["gpu_util_ratio"] == 0).all() and (while_bad["job_id"] == "").all()
        for start, end, st, endev in ivs:
            if row.gpu_uuid in st.gpu_uuids and start < row.ts <= end and endev is not None:
                assert endev.ts == row.ts and endev.reason == row.health_reason
    assert any(
        g.health == "healthy" and g.ts > b.ts and g.gpu_uuid == b.gpu_uuid
        for b in bad
        for g in week.gpus
    )
    app_xids = set(week.samples["xid"].drop_nulls().unique()) & {13, 31, 43}
    assert app_xids  # application errors show up on the failing job's GPU


def test_nodes_added_and_retired(week: Week) -> None:
    added = [
        n
        for n in week.nodes
        if n.ts > START and n.state == "ready" and n.node not in {m.node for m in week.first.nodes}
    ]  # type: ignore[attr-defined]
    assert {n.node for n in added} == {"train-h100-005"}
    at = min(n.ts for n in added)
    assert at == START + dt.timedelta(days=2)
    new_gpus = [g for g in week.gpus if g.node == "train-h100-005" and g.ts == at]
    assert len(new_gpus) == 8 and all(g.health == "healthy" for g in new_gpus)
    rows = week.samples.filter(pl.col("node") == "train-h100-005")
    assert rows["ts"].min() == at and rows["gpu_uuid"].n_unique() == 8

    retired = [n for n in week.nodes if n.state == "retired"]
    assert [n.node for n in retired] == ["a100-002"]
    gone = retired[0].ts
    assert {g.health for g in week.gpus if g.node == "a100-002" and g.ts == gone} == {"retired"}
    assert week.samples.filter((pl.col("node") == "a100-002") & (pl.col("ts") >= gone)).is_empty()
    evicted = [e for e in week.events if e.event == "evicted"]
    assert evicted and all(e.node == "a100-002" and e.ts == gone for e in evicted)


# -- utilisation ----------------------------------------------------------------------------


def test_utilisation_distribution_is_close_to_philly(week: Week) -> None:
    """Allocated and unallocated samples together look like Microsoft Philly's GPU-minutes.

    Measured for seeds 0-9 of this config: KS distance to Philly 0.032-0.074 (seed 0: 0.062),
    share of samples at 0% 0.278-0.377 (seed 0: 0.377; Philly 0.322) — the weekly load, hence
    the unallocated share, varies by seed; against Kalos (a pre-training cluster pinned near
    100%) the KS distance is 0.34-0.39. The bounds leave room for that seed-to-seed spread
    while failing if the cluster's idle or busy time is badly off: counting only allocated,
    non-squatting GPUs (seed 0), the share at 0% is 0.045 and the KS distance 0.29.
    """
    util = week.samples["gpu_util_ratio"].to_numpy().astype(np.float64) * 100
    ks, zero, zero_ref = ks_to_reference(util, "philly")
    assert ks < 0.1, ks
    assert abs(zero - zero_ref) < 0.07, (zero, zero_ref)
    assert ks_to_reference(util, "kalos")[0] > ks + 0.1


def test_workloads_behave_like_their_type(week: Week) -> None:
    kinds = {e.job_id: e.workload_type for e in week.events}
    s = week.samples.filter(pl.col("job_id") != "").with_columns(
        kind=pl.col("job_id").cast(pl.String).replace_strict(kinds), hour=pl.col("ts").dt.hour()
    )
    mean = dict(s.group_by("kind").agg(pl.col("gpu_util_ratio").mean()).iter_rows())
    assert mean["training"] > 0.5 > mean["notebook"]
    inf = dict(
        s.filter(pl.col("kind") == "inference")
        .group_by("hour")
        .agg(pl.col("gpu_util_ratio").mean())
        .iter_rows()
    )
    assert inf[15] > inf[3] + 0.1  # follows daily traffic
    # squatters: hold GPUs for hours at under 5%
    per_pod = s.group_by("pod").agg(pl.len(), pl.col("gpu_util_ratio").max().alias("peak"))
    assert per_pod.filter((pl.col("len") >= 360) & (pl.col("peak") < 0.05)).height >= 3


def test_sample_values_are_physical(week: Week) -> None:
    s = week.samples
    assert s["gpu_util_ratio"].is_between(0, 1).all()
    gr = s.filter(pl.col("gr_engine_active_ratio").is_not_null())
    assert (gr["gr_engine_active_ratio"] <= gr["gpu_util_ratio"]).all()
    nulls = s.filter(pl.col("gr_engine_active_ratio").is_null())["gpu_model"].unique()
    assert nulls.cast(pl.String).to_list() == ["NVIDIA L40S"]
    # tensor activity: part of the engine's, 0 when idle, NULL where engine activity is
    assert (gr["tensor_active_ratio"] <= gr["gr_engine_active_ratio"]).all()
    assert (gr.filter(pl.col("gpu_util_ratio") == 0)["tensor_active_ratio"] == 0).all()
    assert gr["tensor_active_ratio"].mean() > 0.05
    assert s["tensor_active_ratio"].null_count() == s["gr_engine_active_ratio"].null_count()
    assert (s["memory_used_bytes"] <= s["memory_total_bytes"]).all()
    idle = s.filter(pl.col("job_id") == "")
    assert (idle["gpu_util_ratio"] == 0).all() and (idle["memory_used_bytes"] == 0).all()
    assert s["power_watts"].is_between(30, 700).all()
    assert idle["power_watts"].max() < 100
    # the energy counter only goes back when a GPU reappears (driver reload)
    d = s.sort("gpu_uuid", "ts").with_columns(
        de=pl.col("energy_millijoules").cast(pl.Int64).diff().over("gpu_uuid"),
        gap=pl.col("ts").diff().over("gpu_uuid"),
    )
    assert d.filter(pl.col("de") < 0)["gap"].min() > dt.timedelta(minutes=30)
    steady = d.filter(pl.col("gap") == dt.timedelta(seconds=10))
    assert (steady["de"] > 0).all()


# -- determinism, continuation, config --------------------------------------------------------


def _collect(
    sim: Simulator, start: dt.datetime, end: dt.datetime, chunk: dt.timedelta = CHUNK
) -> tuple[pl.DataFrame, list, list, list]:
    batches = list(sim.run(start, end, chunk))
    return (
        pl.concat([b.samples for b in batches]),
        [e for b in batches for e in b.job_events],
        [g for b in batches for g in b.gpus],
        [n for b in batches for n in b.nodes],
    )


def test_same_seed_same_output_other_seed_differs() -> None:
    config = SimulatorConfig.default(gpus=32, seed=5)
    a = _collect(Simulator(config), START, START + dt.timedelta(hours=12))
    b = _collect(Simulator(config), START, START + dt.timedelta(hours=12))
    assert a[0].equals(b[0]) and a[1:] == b[1:]
    other = Simulator(dataclasses.replace(config, seed=6))
    c = _collect(other, START, START + dt.timedelta(hours=12))
    assert not a[0].equals(c[0]) and a[1] != c[1]


def test_continuing_a_run_equals_one_run() -> None:
    config = dataclasses.replace(
        SimulatorConfig.default(gpus=32, seed=3),
        node_failures_per_node_day=1.0,
        gpu_xids_per_gpu_day=0.1,
    )
    end, cut = START + dt.timedelta(hours=30), START + dt.timedelta(hours=13, minutes=17, seconds=3)
    whole = _collect(Simulator(config), START, end)
    sim = Simulator(config)
    first = _collect(sim, START, cut)
    assert sim.now == cut
    with pytest.raises(ValueError, match=r"continue from sim\.now"):
        next(iter(sim.run(START, end)))
    second = _collect(sim, cut, end, dt.timedelta(minutes=45))
    assert sim.now == end
    assert pl.concat([first[0], second[0]]).equals(whole[0])
    for i in (1, 2, 3):
        assert first[i] + second[i] == whole[i]
    assert any(n.state == "down" for n in whole[3])  # faults happened inside the window


def test_config_records() -> None:
    config = SimulatorConfig.default(gpus=64)
    rec = Simulator(config).config_records()
    assert len(rec.tenants) == 6 and len({t.tenant for t in rec.tenants}) == 6
    namespaces = {r.pattern: r.tenant for r in rec.tenant_rules if r.kind == "namespace"}
    assert namespaces["llm-pretrain"] == "research/llm-pretrain"
    prices = {p.gpu_model: Decimal(p.price) for p in rec.prices if p.resource == "gpu_hour"}
    assert prices["NVIDIA H100 80GB HBM3"] == Decimal("2.99")
    assert prices["NVIDIA H100 80GB HBM3"] > prices["NVIDIA A100-SXM4-80GB"] > prices["NVIDIA L40S"]
    assert any(p.resource == "energy_kwh" for p in rec.prices)
    sizes = {p.name: (p.nodes * p.gpus_per_node, p.model.name) for p in config.pools}
    for pool, (size, model) in sizes.items():
        quotas = [q for q in rec.quotas if q.pool == pool]
        assert quotas and all(q.gpu_model == model for q in quotas)
        assert 0.8 * size <= sum(q.guaranteed_gpus for q in quotas) <= size
    assert any(q.borrow_limit_gpus is not None for q in rec.quotas)


def test_default_config_sizes_and_validation() -> None:
    small = SimulatorConfig.default(gpus=16, gpus_per_node=4)
    assert small.total_gpus == 16 and {p.gpus_per_node for p in small.pools} == {4}
    with pytest.raises(ValueError, match="multiple of 8"):
        SimulatorConfig.default(gpus=60)
    with pytest.raises(ValueError, match="placement"):
        dataclasses.replace(small, placement="best")
    df = _collect(Simulator(small), START, START + dt.timedelta(hours=2))[0]
    assert df.height == 16 * 720 and dict(df.schema) == SAMPLE_SCHEMA
