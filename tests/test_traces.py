"""Public trace replay: Alibaba GPU v2023 (openb) and v2025 (DLRM serving).

The published files (copies in tests/data, see its README) are read once per module. Counts are
checked against the numbers the trace authors published and, independently of
collector.traces.alibaba, against the CSVs themselves (csv module / polars).
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.records import JOB_EVENTS, TERMINAL_EVENTS, Batch, JobEvent
from collector.tenancy import UNMAPPED
from collector.traces.alibaba import (
    TraceError,
    alibaba_v2023,
    alibaba_v2025,
    alibaba_v2025_window,
    allocation_intervals,
    gpu_hours,
    gpu_hours_by_tenant,
)

DATA = Path(__file__).resolve().parent / "data"
V2023 = DATA / "alibaba-gpu-v2023"
NODES = V2023 / "openb_node_list_all_node.csv"
PODS = V2023 / "openb_pod_list_default.csv"
V2025 = DATA / "alibaba-gpu-v2025" / "disaggregated_DLRM_trace.csv"
START = dt.datetime(2023, 1, 1, tzinfo=dt.UTC)


def _all(batches: list[Batch], kind: str) -> list:
    return [r for b in batches for r in getattr(b, kind)]


@pytest.fixture(scope="module")
def v2023() -> list[Batch]:
    return list(alibaba_v2023(NODES, PODS, START))


@pytest.fixture(scope="module")
def v2025() -> list[Batch]:
    return list(alibaba_v2025(V2025, START))


@pytest.fixture(scope="module")
def pods_csv() -> dict[str, dict[str, str]]:
    with PODS.open(newline="") as f:
        return {row["name"]: row for row in csv.DictReader(f)}


# -- v2023 -----------------------------------------------------------------------------------
def test_v2023_published_counts(v2023: list[Batch]) -> None:
    nodes, gpus, events = _all(v2023, "nodes"), _all(v2023, "gpus"), _all(v2023, "job_events")
    assert len(nodes) == 1523
    assert len(gpus) == 6212 == sum(n.gpu_count for n in nodes)
    assert len({e.job_id for e in events}) == 8152
    assert _all(v2023, "rejects") == []


def test_v2023_gpus_per_model_match_the_csv(v2023: list[Batch]) -> None:
    with NODES.open(newline="") as f:
        rows = list(csv.DictReader(f))
    per_model: Counter[str] = Counter()
    for row in rows:
        per_model[row["model"]] += int(row["gpu"])
    del per_model[""]
    assert sum(per_model.values()) == 6212
    assert per_model == {
        "A10": 2,
        "G2": 4392,
        "G3": 312,
        "P100": 265,
        "T4": 842,
        "V100M16": 195,
        "V100M32": 204,
    }
    assert Counter(g.gpu_model for g in _all(v2023, "gpus")) == per_model
    by_node_rows: Counter[str] = Counter()
    for n in _all(v2023, "nodes"):
        by_node_rows[n.gpu_model] += n.gpu_count
    del by_node_rows[""]
    assert by_node_rows == per_model


def test_v2023_inventory_rows(v2023: list[Batch]) -> None:
    nodes = {n.node: n for n in _all(v2023, "nodes")}
    cpu_only = nodes["openb-node-0000"]
    assert (cpu_only.pool, cpu_only.gpu_model, cpu_only.gpu_count) == ("cpu", "", 0)
    assert cpu_only.cpu_milli == 32000 and cpu_only.memory_bytes == 262144 * 2**20
    gpus = _all(v2023, "gpus")
    assert len({g.gpu_uuid for g in gpus}) == len(gpus)
    g = next(g for g in gpus if g.node == "openb-node-0228")
    assert g.gpu_uuid == "openb-node-0228-gpu0" and g.pool == g.gpu_model == "G3"
    assert all(g.ts == START and g.cluster == "alibaba-v2023" for g in gpus)


def test_v2023_pod_events(v2023: list[Batch], pods_csv: dict[str, dict[str, str]]) -> None:
    events = _all(v2023, "job_events")
    by_pod: dict[str, dict[str, JobEvent]] = {}
    for e in events:
        by_pod.setdefault(e.job_id, {})[e.event] = e
    shared = by_pod["openb-pod-0001"]  # 1 GPU, gpu_milli 460, Running until 12902960
    s = shared["started"]
    assert (s.gpus_requested, s.gpu_fraction, s.priority_class) == (0.46, 0.46, "LS")
    assert s.ts == START + dt.timedelta(seconds=427061)
    assert "finished" not in shared  # deleted at the trace's end: still running, so cut there
    assert shared["censored"].started_at == s.ts and "still Running when the trace ends" in (
        shared["censored"].reason
    )
    end = max(
        int(r[c])
        for r in pods_csv.values()
        for c in ("creation_time", "deletion_time", "scheduled_time")
        if r[c]
    )
    for name, row in pods_csv.items():
        got = by_pod[name]
        phase, deleted = row["pod_phase"], int(row["deletion_time"])
        assert got["submitted"].ts == START + dt.timedelta(seconds=int(row["creation_time"]))
        assert ("started" in got) == bool(row["scheduled_time"])
        terminal = [ev for ev in got if ev in TERMINAL_EVENTS]
        want = {
            "Succeeded": ["finished"],
            "Failed": ["failed"],
            "Running": ["censored"] if deleted == end else ["finished"],
            "Pending": ["censored"] if deleted == end else ["cancelled"],
        }[phase]
        assert terminal == want, name
        if terminal:
            t = got[terminal[0]]
            assert t.ts == START + dt.timedelta(seconds=deleted)
            assert t.started_at == (got["started"].ts if "started" in got else None)
        num_gpu, milli = int(row["num_gpu"]), int(row["gpu_milli"])
        assert got["submitted"].gpus_requested == (milli / 1000 if num_gpu == 1 else num_gpu)
    assert {e.tenant for e in events} == {UNMAPPED}
    assert all(e.gpu_uuids == () and e.workload_type == "other" for e in events)
    assert {e.event for e in events} <= set(JOB_EVENTS)


def test_v2023_allocation_from_events(v2023: list[Batch]) -> None:
    events = [
        e for e in _all(v2023, "job_events") if e.job_id in ("openb-pod-0001", "openb-pod-0017")
    ]
    shared, whole = allocation_intervals(events, key=lambda e: e.job_id)
    assert (shared.key, shared.gpus) == ("openb-pod-0001", 0.46)
    assert shared.end == START + dt.timedelta(seconds=12902960)  # the trace's end
    assert (whole.key, whole.gpus) == ("openb-pod-0017", 8.0)  # Succeeded, 8 GPUs
    assert whole.end == START + dt.timedelta(seconds=10769854)
    hours = gpu_hours([shared, whole], START, START + dt.timedelta(seconds=12902960))
    assert hours == {
        "openb-pod-0001": pytest.approx(0.46 * (12902960 - 427061) / 3600),
        "openb-pod-0017": pytest.approx(8 * (10769854 - 9437497) / 3600),
    }


def test_batches_are_bounded(v2023: list[Batch]) -> None:
    assert all(0 < len(b) <= 5000 for b in v2023)
    small = list(alibaba_v2023(NODES, PODS, START, chunk_size=997))
    assert all(len(b) <= 997 for b in small)
    assert sum(len(b) for b in small) == sum(len(b) for b in v2023)


def test_v2023_bad_rows_are_rejected(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "n1,32000,262144,2,T4\n"
        "n2,32000,262144,two,T4\n"
        "n3,32000,262144,2,\n"
        ",1,1,0,\n"
        "n5,1,1\n"
    )
    pods = tmp_path / "pods.csv"
    pods.write_text(
        ",".join(
            (
                "name",
                "cpu_milli",
                "memory_mib",
                "num_gpu",
                "gpu_milli",
                "gpu_spec",
                "qos",
                "pod_phase",
                "creation_time",
                "deletion_time",
                "scheduled_time",
            )
        )
        + "\n"
        "p1,1000,1024,1,250,V100M16|V100M32,BE,Succeeded,10,50,20\n"
        "p2,1000,1024,1,0,,BE,Running,10,50,20\n"
        "p3,1000,1024,1,1000,,BE,Exploded,10,50,20\n"
        "p4,1000,1024,1,1000,,BE,Running,10,50,5\n"
        "p5,1000,1024,1,1000,,BE,Failed,10,,20\n"
        "p6,1000,1024,1,1000,,BE,Running,ten,50,20\n"
        "p7,1000,1024,2,1000,,LS,Running,10,60,20\n"
    )
    batches = list(alibaba_v2023(nodes, pods, START))
    rejects = {r.payload.split(",")[0]: (r.kind, r.field) for r in _all(batches, "rejects")}
    assert rejects == {
        "n2": ("node_inventory", "gpu"),
        "n3": ("node_inventory", "model"),
        "": ("node_inventory", "sn"),
        "n5": ("node_inventory", "line"),
        "p2": ("job_event", "gpu_milli"),
        "p3": ("job_event", "pod_phase"),
        "p4": ("job_event", "scheduled_time"),
        "p5": ("job_event", "deletion_time"),
        "p6": ("job_event", "creation_time"),
    }
    events = {(e.job_id, e.event): e for e in _all(batches, "job_events")}
    assert events[("p1", "finished")].gpu_model == "V100M16|V100M32"
    assert events[("p1", "finished")].gpu_fraction == 0.25
    assert ("p7", "finished") not in events  # deleted at the end (60): still running
    assert events[("p7", "censored")].ts == START + dt.timedelta(seconds=60)
    assert events[("p7", "started")].gpus_requested == 2.0
    assert [n.node for n in _all(batches, "nodes")] == ["n1"]


def test_a_line_that_is_not_utf8_or_not_csv_is_rejected_and_the_rest_read(
    tmp_path: Path,
) -> None:
    nodes = tmp_path / "nodes.csv"
    long_field = b"9" * 200_000  # past the csv module's limit
    nodes.write_bytes(
        b"sn,cpu_milli,memory_mib,gpu,model\n"
        b"n1,32000,262144,2,T4\n"
        b"n\xe9,32000,262144,2,T4\n"  # Latin-1, not UTF-8
        b"n3," + long_field + b",1,0,\n"
        b"n4,32000,262144,1,T4\n"
    )
    batches = list(alibaba_v2023(nodes, PODS, START))
    rejects = [(r.field, r.value, r.reason, r.payload) for r in _all(batches, "rejects")]
    assert rejects == [
        ("line", "line 3", "not UTF-8 text", "n\ufffd,32000,262144,2,T4"),
        ("line", "line 4", "not CSV: field larger than field limit (131072)", ""),
    ]
    assert [n.node for n in _all(batches, "nodes")] == ["n1", "n4"]
    garbage = tmp_path / "garbage"
    garbage.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(TraceError, match="lacks the columns"):
        list(alibaba_v2023(NODES, garbage, START))


def test_wrong_files_and_naive_start(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="creation_time"):
        list(alibaba_v2023(NODES, V2023 / "openb_pod_list_multigpu50.csv", START))
    with pytest.raises(TraceError, match="cannot open"):
        list(alibaba_v2025(tmp_path / "missing.csv", START))
    with pytest.raises(ValueError, match="timezone-aware"):
        list(alibaba_v2025(V2025, dt.datetime(2023, 1, 1)))


# -- v2025 -----------------------------------------------------------------------------------
def test_v2025_published_counts(v2025: list[Batch]) -> None:
    events = _all(v2025, "job_events")
    assert _all(v2025, "rejects") == []
    roles = {e.job_id: e.pool for e in events}
    assert len(roles) == 23871
    assert Counter(roles.values()) == {"CN": 16485, "HN": 7386}
    assert len({e.tenant for e in events}) == 156
    assert all(e.tenant == f"{e.project}/{e.project}" == f"{e.org}/{e.project}" for e in events)
    assert all(0 < len(b) <= 5000 for b in v2025)


def test_v2025_events_follow_the_rows(v2025: list[Batch]) -> None:
    by = {}
    for e in _all(v2025, "job_events"):
        by.setdefault(e.job_id, {})[e.event] = e
    old = by["instance_0"]  # HN app_0, no times at all: the whole window
    assert list(old) == ["started", "censored"] and old["started"].ts == START
    assert old["censored"].ts == alibaba_v2025_window(V2025, START)[1]
    assert old["started"].gpus_requested == 1.0 and old["started"].workload_type == "inference"
    gone = by["instance_2454"]  # CN, only a deletion_time of 85 s
    assert list(gone) == ["started", "finished"]
    assert gone["finished"].ts == START + dt.timedelta(seconds=85)
    assert gone["finished"].started_at == START


@pytest.fixture(scope="module")
def v2025_intervals(v2025: list[Batch]):
    window = alibaba_v2025_window(V2025, START)
    return window, allocation_intervals(_all(v2025, "job_events"))


def test_v2025_gpu_hours_match_the_csv(v2025: list[Batch], v2025_intervals) -> None:
    (a, b), _ivs = v2025_intervals
    times = ["creation_time", "scheduled_time", "deletion_time"]
    frame = pl.read_csv(V2025, schema_overrides={c: pl.Float64 for c in times})
    end_s = frame.select(pl.max_horizontal(pl.col(times).max())).item()
    assert b == START + dt.timedelta(seconds=end_s)
    expected = (
        frame.filter(pl.col("role") == "HN")
        .with_columns(
            (
                (pl.col("deletion_time").fill_null(end_s) - pl.col("scheduled_time").fill_null(0.0))
                * pl.col("gpu_request")
                / 3600
            ).alias("h")
        )
        .group_by("app_name")
        .agg(pl.col("h").sum())
    )
    got = gpu_hours_by_tenant(_all(v2025, "job_events"), a, b)
    assert got.keys() == {f"{app}/{app}" for app in expected["app_name"]}
    for app, hours in expected.iter_rows():
        assert got[f"{app}/{app}"] == pytest.approx(hours, rel=1e-9, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.floats(0.0, 1.0, allow_nan=False), max_size=8))
def test_v2025_gpu_hours_add_up_however_the_window_is_split(
    v2025_intervals, cuts: list[float]
) -> None:
    (a, b), ivs = v2025_intervals
    points = sorted({a, b, *(a + (b - a) * c for c in cuts)})
    whole = gpu_hours(ivs, a, b)
    pieces: Counter[str] = Counter()
    for lo, hi in itertools.pairwise(points):
        for app, hours in gpu_hours(ivs, lo, hi).items():
            pieces[app] += hours
    assert pieces.keys() == whole.keys()
    for app, hours in whole.items():
        assert pieces[app] == pytest.approx(hours, rel=1e-12)
    total = gpu_hours([iv._replace(key="") for iv in ivs], a, b)
    assert total[""] == pytest.approx(sum(whole.values()), rel=1e-12)


def test_v2025_org_override_and_bad_rows(tmp_path: Path) -> None:
    header = (
        "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,"
        "rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,"
        "max_instance_per_node,creation_time,scheduled_time,deletion_time\n"
    )
    path = tmp_path / "trace.csv"
    path.write_text(
        header
        + "i1,HN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,10.5,20.25,\n"
        + "i1,HN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\n"
        + "i2,XN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\n"
        + "i3,HN,app_1,12,12,one,1,25,25,120.0,120.0,640.0,800.0,8,,,\n"
        + "i4,HN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,30,40,35\n"
        + "i5,HN,app_1,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,-4\n"
        + "i6,CN,app_2,12,12,0,0,25,25,120.0,120.0,640.0,800.0,8,5,,100\n"
        + "i7,HN,app_1\n"
    )
    batches = list(alibaba_v2025(path, START, org="dlrm", chunk_size=2))
    assert all(len(b) <= 2 for b in batches)
    rejects = [(r.payload.split(",")[0], r.field) for r in _all(batches, "rejects")]
    assert rejects == [
        ("i1", "instance_sn"),
        ("i2", "role"),
        ("i3", "gpu_request"),
        ("i4", "deletion_time"),
        ("i5", "deletion_time"),
        ("i7", "line"),
    ]
    events = {(e.job_id, e.event): e for e in _all(batches, "job_events")}
    started = events[("i1", "started")]
    assert (started.tenant, started.org, started.project) == ("dlrm/app_1", "dlrm", "app_1")
    assert started.ts == START + dt.timedelta(seconds=20.25)
    assert events[("i1", "submitted")].ts == START + dt.timedelta(seconds=10.5)
    assert ("i1", "finished") not in events
    # created in the window, never scheduled, deleted: cancelled, holds nothing
    assert events[("i6", "cancelled")].started_at is None
    assert alibaba_v2025_window(path, START) == (START, START + dt.timedelta(seconds=100))
