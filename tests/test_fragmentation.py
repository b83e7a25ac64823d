"""Fragmentation (FGD), stranded GPU-hours and their attribution, on a hand-computed cluster.

The fixture cluster at T = 2026-03-02 12:00 UTC (4-GPU H100 nodes in pool train, 2-GPU L40S
nodes in pool infer). "share" is the part of the GPU that jobs hold at T:

    node  model  GPU   health at T        held at T (job, tenant, share)       free at T
    n1    H100   g1    healthy            j1 ml/vision 1.0                      0
                 g2    healthy            j2 ml/nlp    0.5                      0.5
                 g3    healthy (*)        -                                     1
                 g4    healthy            -                                     1
    n2    H100   g1    healthy            - (j0 held it T-5h .. T-1h)           1
                 g2    healthy            - (j7 starts at T+30m)                1
                 g3,g4 healthy            -                                     1, 1
                 g5    retired            -                                     (not capacity)
    n3    H100   g1-g3 healthy            j3 ml/nlp    1.0 each                 0, 0, 0
                 g4    unhealthy (Xid 79 since T-2h)                            (not schedulable)
    n4    L40S   g1    healthy            j4 ml/vision 0.25 + j5 prod/chat 0.25 0.5
                 g2    healthy            j6 prod/chat 0.75                     0.25
    n5    L40S   g1,g2 healthy            node down since T-3h                  (not schedulable)
    (*) a row at T+1h makes n1/g3 unhealthy: after T, so not seen at T.

Task mix at T (attempts started in (T-7d, T]; j10 started 8 days before, j7 after T):

    model  GPUs  share  attempts (jobs)            popularity: scope model | scope cluster
    H100   1     1.0    2 (j0, j1)                 2/5                     | 2/8
    H100   1     0.5    1 (j2)                     1/5                     | 1/8
    H100   3     1.0    1 (j3)                     1/5                     | 1/8
    H100   4     1.0    1 (j9, T-3d .. T-2d)       1/5                     | 1/8
    L40S   1     0.25   2 (j4, j5)                 2/3                     | 2/8
    L40S   1     0.75   1 (j6)                     1/3                     | 1/8

FGD at T, scope model (each node against the tasks for its model):
    n1 free (0, .5, 1, 1): 1x1.0 fits, frag .5 | 1x.5 fits, frag 0 | 3x1.0, 4x1.0 do not fit,
       frag 2.5 each  ->  2/5*.5 + 1/5*2.5 + 1/5*2.5 = 1.2
    n2 free (1, 1, 1, 1): everything fits -> 0;  n3: nothing free -> 0
    n4 free (.5, .25): 1x.25 fits, frag 0 | 1x.75 does not fit, frag .75  ->  1/3*.75 = 0.25
    cluster FGD = 1.45 of 7.25 free GPUs
    by tenant: n1's 1.2 by shares held on n1 (vision 1.0, nlp 0.5) -> vision .8, nlp .4;
               n4's .25 by shares (vision .25, chat 1.0) -> vision .05, chat .2
FGD at T, scope cluster (the paper's literal form; other models' tasks cannot run at all):
    n1: 2/8*.5 + 1/8*2.5 + 1/8*2.5 + 3/8*2.5 = 1.6875;  n2: 3/8*4 = 1.5 (nobody holds n2:
    __unallocated__);  n4: 5/8*.75 + 1/8*.75 = .5625;  cluster = 3.75

Hourly over [T-2h, T+1h), scope model:
    T-2h: j0 holds n2/g1, j4-j6 not started, mix = the five H100 attempts only:
          n1 1.2; n2 free (0,1,1,1): only 4x1.0 fails, 1/5*3 = .6 (j0's tenant vision); n4 0
          -> H100 1.8, L40S 0
    T-1h: j0 ended at T-1h (end is exclusive), j4-j6 started at T-1h: as at T -> 1.2 + .25
    T:    1.2 + .25
    stranded GPU-hours = 1.8 + 1.45 + 1.45 = 4.7
    by tenant: vision/H100 .8*3 + .6 = 3.0, nlp/H100 1.2, vision/L40S .1, chat/L40S .4
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.records import GpuInventory, JobEvent, NodeInventory
from warehouse.analytics import fragmentation as fr
from warehouse.analytics.fragmentation import Task
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

T = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)
D = dt.timedelta(days=1)
H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"


def _gpu(
    node: str, index: int, model: str, ts: dt.datetime = T - 10 * D, **kw: object
) -> GpuInventory:
    pool = "train" if model == H100 else "infer"
    return GpuInventory(ts, "c1", pool, node, f"{node}-g{index}", index, model, **kw)


def _job(
    job_id: str,
    tenant: str,
    model: str,
    uuids: tuple[str, ...],
    share: float,
    start: dt.datetime,
    end: dt.datetime | None = None,
) -> list[JobEvent]:
    org, project = tenant.split("/")
    common = dict(
        cluster="c1",
        job_id=job_id,
        tenant=tenant,
        org=org,
        project=project,
        pool="train" if model == H100 else "infer",
        queue=f"{project}-q",
        gpu_model=model,
        gpus_requested=len(uuids) * share,
        gpu_fraction=share,
        node=uuids[0].rsplit("-", 1)[0],
    )
    events = [
        JobEvent(start - 10 * 60 * dt.timedelta(seconds=1), event="submitted", **common),
        JobEvent(start, event="started", gpu_uuids=uuids, **common),
    ]
    if end is not None:
        events.append(JobEvent(end, event="finished", gpu_uuids=uuids, started_at=start, **common))
    return events


def write_cluster(wh: Warehouse) -> Ingestor:
    ing = Ingestor(wh, 35, now=lambda: T + 2 * H)
    gpus = [_gpu(n, i, H100) for n in ("n1", "n2", "n3") for i in (1, 2, 3, 4)]
    gpus += [_gpu(n, i, L40S) for n in ("n4", "n5") for i in (1, 2)]
    gpus += [
        _gpu("n2", 5, H100, health="retired", health_reason="decommissioned"),
        _gpu(
            "n3",
            4,
            H100,
            ts=T - 2 * H,
            health="unhealthy",
            health_reason="Xid 79: GPU has fallen off the bus",
        ),
        _gpu("n1", 3, H100, ts=T + H, health="unhealthy", health_reason="Xid 48"),
    ]
    ing.write_gpus(gpus)
    nodes = [
        NodeInventory(
            T - 10 * D,
            "c1",
            "train" if n < "n4" else "infer",
            n,
            H100 if n < "n4" else L40S,
            4 if n < "n4" else 2,
        )
        for n in ("n1", "n2", "n3", "n4", "n5")
    ]
    nodes.append(
        nodes[-1]._replace(ts=T - 3 * H, state="down", state_reason="NodeFailure: PSU failure")
    )
    ing.write_nodes(nodes)
    events = [
        *_job("j0", "ml/vision", H100, ("n2-g1",), 1.0, T - 5 * H, T - H),
        *_job("j1", "ml/vision", H100, ("n1-g1",), 1.0, T - 3 * H),
        *_job("j2", "ml/nlp", H100, ("n1-g2",), 0.5, T - 2 * H),
        *_job("j3", "ml/nlp", H100, ("n3-g1", "n3-g2", "n3-g3"), 1.0, T - 4 * H),
        *_job(
            "j9", "ml/nlp", H100, tuple(f"n2-g{i}" for i in (1, 2, 3, 4)), 1.0, T - 3 * D, T - 2 * D
        ),
        *_job("j10", "ml/nlp", H100, ("n2-g1", "n2-g2"), 1.0, T - 8 * D, T - 8 * D + H),
        *_job("j4", "ml/vision", L40S, ("n4-g1",), 0.25, T - H),
        *_job("j5", "prod/chat", L40S, ("n4-g1",), 0.25, T - H),
        *_job("j6", "prod/chat", L40S, ("n4-g2",), 0.75, T - H),
        *_job("j7", "prod/chat", H100, ("n2-g2",), 1.0, T + 30 * 60 * dt.timedelta(seconds=1)),
    ]
    ing.write_job_events(events)
    return ing


@pytest.fixture
def cluster(wh: Warehouse) -> Warehouse:
    write_cluster(wh)
    return wh


def _rows(frame, *cols: str) -> dict[tuple, float]:  # type: ignore[no-untyped-def]
    value = cols[-1]
    return {tuple(r[c] for c in cols[:-1]): round(r[value], 6) for r in frame.iter_rows(named=True)}


# -- the pure measure ---------------------------------------------------------------------------
def test_task_fragment_follows_the_papers_cases() -> None:
    free = [0.0, 0.5, 1.0, 1.0]
    whole, half = Task(1, 1.0, "A", 1.0), Task(1, 0.5, "A", 1.0)
    assert fr.task_fragment(free, "A", whole) == 0.5  # fits: the partly free GPU is fragment
    assert fr.task_fragment(free, "A", half) == 0.0  # fits: the 0.5 share is usable by it
    assert fr.task_fragment(free, "A", Task(3, 1.0, "A", 1.0)) == 2.5  # cannot run: all free
    assert fr.task_fragment(free, "B", whole) == 2.5  # wrong model: cannot run at all
    assert fr.task_fragment(free, "B", Task(1, 1.0, "", 1.0)) == 0.5  # "" runs on any model
    assert fr.task_fragment([1.0] * 4, "A", Task(8, 1.0, "A", 1.0)) == 0.0  # gang: whole node
    assert fr.task_fragment([1.0, 1.0, 0.5], "A", Task(8, 1.0, "A", 1.0)) == 2.5


def test_node_fgd_weights_by_popularity_and_scope() -> None:
    mix = [
        Task(1, 1.0, "A", 2),
        Task(1, 0.5, "A", 1),
        Task(3, 1.0, "A", 1),
        Task(4, 1.0, "A", 1),
        Task(1, 0.25, "B", 2),
        Task(1, 0.75, "B", 1),
    ]
    mix = list(
        fr.mix_from_counts(
            {"gpu_model": t.gpu_model, "gpus": t.gpus, "share": t.share, "attempts": t.popularity}
            for t in mix
        )
    )
    assert sum(t.popularity for t in mix) == pytest.approx(1.0)
    assert fr.node_fgd([0, 0.5, 1, 1], "A", mix) == pytest.approx(1.2)
    assert fr.node_fgd([0, 0.5, 1, 1], "A", mix, "cluster") == pytest.approx(1.6875)
    assert fr.node_fgd([0.5, 0.25], "B", mix) == pytest.approx(0.25)
    assert fr.node_fgd([1, 1, 1, 1], "C", mix) == 0.0  # no typical task for model C
    assert fr.node_fgd([1, 1, 1, 1], "C", mix, "cluster") == 4.0
    with pytest.raises(fr.FragmentationError, match="scope"):
        fr.node_fgd([1.0], "A", mix, "pool")


def test_split_by_holders_conserves_the_amount() -> None:
    assert fr.split_by_holders(1.2, {"a": 1.0, "b": 0.5}) == pytest.approx({"a": 0.8, "b": 0.4})
    assert fr.split_by_holders(1.5, {}) == {fr.UNALLOCATED: 1.5}


shares = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])
tasks = st.builds(
    Task,
    gpus=st.integers(1, 9),
    share=st.sampled_from([0.25, 0.5, 0.75, 1.0]),
    gpu_model=st.sampled_from(["", "A", "B"]),
    popularity=st.floats(0.01, 10, allow_nan=False),
)


@settings(max_examples=300, deadline=None)
@given(
    free=st.lists(shares, max_size=8),
    model=st.sampled_from(["A", "B"]),
    mix=st.lists(tasks, min_size=1, max_size=6),
)
def test_fgd_is_bounded_by_the_free_share(free: list[float], model: str, mix: list[Task]) -> None:
    total = sum(free)
    for scope in fr.SCOPES:
        value = fr.node_fgd(free, model, mix, scope)
        assert -1e-9 <= value <= total + 1e-9
    # the paper's form also charges the tasks of other models, so it never measures less
    assert fr.node_fgd(free, model, mix, "cluster") >= fr.node_fgd(free, model, mix) - 1e-9


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 8),
    model=st.sampled_from(["A", "B"]),
    mix=st.lists(tasks, min_size=1, max_size=6),
)
def test_entirely_free_or_full_nodes(n: int, model: str, mix: list[Task]) -> None:
    for scope in fr.SCOPES:
        assert fr.node_fgd([0.0] * n, model, mix, scope) == 0.0  # nothing free to strand
    # an entirely free node fits every task for its model (a gang larger than the node takes
    # it whole), so it strands nothing in scope "model" and, in scope "cluster", all n GPUs
    # for the share of tasks that ask for another model
    assert fr.node_fgd([1.0] * n, model, mix) == 0.0
    total = sum(t.popularity for t in mix)
    other = sum(t.popularity for t in mix if t.gpu_model not in ("", model)) / total
    assert fr.node_fgd([1.0] * n, model, mix, "cluster") == pytest.approx(n * other)


# -- the warehouse side ---------------------------------------------------------------------------
def test_fragmentation_at_matches_the_hand_computed_table(cluster: Warehouse) -> None:
    report = fr.fragmentation_at(cluster, "c1", T)
    assert report.cluster_fgd_gpus == pytest.approx(1.45)
    assert report.free_gpus == pytest.approx(7.25)
    assert report.unplaced_held_gpus == 0.0
    nodes = {r["node"]: r for r in report.per_node.iter_rows(named=True)}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]  # n5 is down
    assert {n: round(r["fgd_gpus"], 6) for n, r in nodes.items()} == {
        "n1": 1.2,
        "n2": 0.0,
        "n3": 0.0,
        "n4": 0.25,
    }
    assert {n: r["gpus"] for n, r in nodes.items()} == {"n1": 4, "n2": 4, "n3": 3, "n4": 2}
    assert {n: r["whole_free_gpus"] for n, r in nodes.items()} == {
        "n1": 2,
        "n2": 4,
        "n3": 0,
        "n4": 0,
    }
    assert _rows(report.per_tenant_stranded, "tenant", "gpu_model", "stranded_gpus") == {
        ("ml/vision", H100): 0.8,
        ("ml/nlp", H100): 0.4,
        ("ml/vision", L40S): 0.05,
        ("prod/chat", L40S): 0.2,
    }
    mix = _rows(report.task_mix, "gpu_model", "gpus", "share", "popularity")
    assert mix == {
        (H100, 1, 1.0): 0.25,
        (H100, 1, 0.5): 0.125,
        (H100, 3, 1.0): 0.125,
        (H100, 4, 1.0): 0.125,
        (L40S, 1, 0.25): 0.25,
        (L40S, 1, 0.75): 0.125,
    }
    largest = {r["gpu_model"]: r for r in report.largest_startable.iter_rows(named=True)}
    assert (largest[H100]["one_node_gpus"], largest[H100]["total_gpus"]) == (4, 6)
    assert (largest[L40S]["one_node_gpus"], largest[L40S]["total_gpus"]) == (0, 0)
    assert largest[L40S]["largest_free_share"] == 0.5


def test_cluster_scope_is_the_papers_literal_form(cluster: Warehouse) -> None:
    report = fr.fragmentation_at(cluster, "c1", T, scope="cluster")
    assert report.cluster_fgd_gpus == pytest.approx(3.75)
    by_tenant = _rows(report.per_tenant_stranded, "tenant", "gpu_model", "stranded_gpus")
    assert by_tenant[(fr.UNALLOCATED, H100)] == 1.5  # n2: nobody holds anything there
    assert sum(by_tenant.values()) == pytest.approx(3.75)


def test_a_shorter_window_changes_the_task_mix(cluster: Warehouse) -> None:
    # within 1 day only j0-j3 (H100) and j4-j6 (L40S) started: no 4-GPU task any more, so n1
    # strands 2/4*.5 (1x1.0) + 1/4*0 (1x.5) + 1/4*2.5 (3x1.0) = 0.875
    def n1(window: dt.timedelta) -> float:
        report = fr.fragmentation_at(cluster, "c1", T, window=window)
        return float(report.per_node.filter(report.per_node["node"] == "n1")["fgd_gpus"][0])

    assert n1(D) == pytest.approx(0.875)
    # the window is (T - window, T]: j9, started exactly 3 days before T, is just outside it
    assert n1(3 * D) == pytest.approx(0.875)
    assert n1(3 * D + dt.timedelta(milliseconds=1)) == pytest.approx(1.2)


def test_stranded_gpu_hours_hourly(cluster: Warehouse) -> None:
    got = fr.stranded_gpu_hours(cluster, "c1", T - 2 * H, T + H)
    assert _rows(got, "ts", "gpu_model", "stranded_gpus") == {
        (T - 2 * H, H100): 1.8,
        (T - 2 * H, L40S): 0.0,
        (T - H, H100): 1.2,
        (T - H, L40S): 0.25,
        (T, H100): 1.2,
        (T, L40S): 0.25,
    }
    assert got["stranded_gpu_hours"].sum() == pytest.approx(4.7)
    assert _rows(got, "ts", "gpu_model", "free_gpus")[(T - 2 * H, L40S)] == 2.0
    # the last step is clipped at the window's end
    clipped = fr.stranded_gpu_hours(cluster, "c1", T - 2 * H, T + 30 * 60 * dt.timedelta(seconds=1))
    assert clipped["stranded_gpu_hours"].sum() == pytest.approx(1.8 + 1.45 + 0.725)
    # the series agrees with the instant at each step
    assert got.filter(got["ts"] == T)["stranded_gpus"].sum() == pytest.approx(
        fr.fragmentation_at(cluster, "c1", T).cluster_fgd_gpus
    )
    tenants = fr.stranded_by_tenant(cluster, "c1", T - 2 * H, T + H)
    assert _rows(tenants, "tenant", "gpu_model", "stranded_gpu_hours") == {
        ("ml/vision", H100): 3.0,
        ("ml/nlp", H100): 1.2,
        ("ml/vision", L40S): 0.1,
        ("prod/chat", L40S): 0.4,
    }


def test_unplaced_allocations_are_reported_not_placed(cluster: Warehouse) -> None:
    ing = Ingestor(cluster, 35, now=lambda: T + 2 * H)
    ing.write_job_events(
        [JobEvent(T - H, "c1", "trace-1", "started", tenant="ml/nlp", gpus_requested=2.0)]
    )
    report = fr.fragmentation_at(cluster, "c1", T)
    assert report.unplaced_held_gpus == 2.0
    assert report.free_gpus == pytest.approx(7.25)  # no node's free state changes
    assert ("", 2, 1.0) in _rows(report.task_mix, "gpu_model", "gpus", "share", "attempts")
    assert "2.00 GPUs held by jobs with no known GPU" in report.to_text()


def test_report_renders_as_json_and_text(cluster: Warehouse) -> None:
    report = fr.fragmentation_at(cluster, "c1", T)
    data = json.loads(report.to_json())
    assert data["cluster_fgd_gpus"] == 1.45 and data["at"] == T.isoformat()
    assert data["stranded_ratio"] == round(1.45 / 7.25, 4)
    assert {n["node"] for n in data["nodes"]} == {"n1", "n2", "n3", "n4"}
    text = report.to_text()
    assert "1.45 stranded (FGD), 20%" in text and "ml/vision" in text
    assert "4 GPUs on one node, 6 in total" in text


def test_bad_requests_say_what_is_wrong(wh: Warehouse) -> None:
    with pytest.raises(fr.FragmentationError, match="timezone-aware"):
        fr.fragmentation_at(wh, "c1", T.replace(tzinfo=None))
    with pytest.raises(fr.FragmentationError, match="must be after start"):
        fr.stranded_gpu_hours(wh, "c1", T, T - H)
    with pytest.raises(fr.FragmentationError, match="window"):
        fr.fragmentation_at(wh, "c1", T, window=dt.timedelta(0))
    empty = fr.fragmentation_at(wh, "c1", T)  # a cluster with no data: zeros, no error
    assert empty.cluster_fgd_gpus == 0.0 and empty.per_node.height == 0
    assert "no job started in the window" in empty.to_text()
