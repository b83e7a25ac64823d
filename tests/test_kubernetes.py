"""The Kubernetes collector, through the real ``kubernetes`` client, against a fake API server.

Every test runs the official client (urllib3 underneath) against ``k8s_fake.FakeKubeApi`` on
127.0.0.1: lists, chunked watch streams, 410 Gone (as an ERROR event and as HTTP 410), dropped
connections and bookmarks are the real protocol, not patched functions.

Fixture timeline (minutes after 2025-03-03 10:00 UTC): created 0, scheduled 1, running 2,
ended 10. The collector's clock is fixed at NOW, so an event at NOW means "observed, no time in
the object".

The objects, their timeline and the runner are in ``k8s_helpers.py``; the pure readers
(quantities, MIG shares, workload types) are tested in ``test_k8s_objects.py``.
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from collections.abc import Callable

import pytest
from k8s_fake import FakeKubeApi
from k8s_helpers import (
    NOW,
    Runner,
    at,
    ended,
    iso,
    load,
    make,
    node,
    pod,
    running,
    scheduled,
    steps,
)
from kubernetes import client as k8s

from collector.kubernetes.collector import GAP_REASON


# -- what a pod's events say --------------------------------------------------------------------
def test_gpu_requests_whole_shared_and_mig(fake: FakeKubeApi, api: k8s.ApiClient) -> None:
    fake.put("nodes", node("sliced", **{"nvidia.com/gpu.replicas": "4"}))
    whole = load("pod_pytorchjob_worker.json")
    whole["spec"]["initContainers"] = [
        {"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    ]  # less than the containers' 8: they win
    fake.put("pods", whole)
    fake.put("pods", scheduled(pod("shared", resources={"nvidia.com/gpu.shared": "2"}), "sliced"))
    fake.put("pods", pod("shared-unplaced", resources={"nvidia.com/gpu.shared": "1"}))
    mig = pod("mig", resources={"nvidia.com/mig-1g.10gb": "2"})
    mig["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    fake.put("pods", mig)
    fake.put(
        "pods",
        pod("init-heavy", resources={})
        | {
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            }
        },
    )
    fake.put("pods", pod("cpu-only", resources={"cpu": "4"}))

    batch = make(api, shared_gpu_replicas=2).poll_once()
    first = {e.name: e for e in batch.job_events if e.event == "submitted"}
    assert set(first) == {"llama-ft-worker-0", "shared", "shared-unplaced", "mig", "init-heavy"}
    assert (
        first["llama-ft-worker-0"].gpus_requested,
        first["llama-ft-worker-0"].gpu_fraction,
        first["llama-ft-worker-0"].gpu_model,
    ) == (8.0, 1.0, "NVIDIA-H100-80GB-HBM3")
    assert (first["shared"].gpus_requested, first["shared"].gpu_fraction) == (0.5, 0.25)
    assert (first["shared-unplaced"].gpus_requested, first["shared-unplaced"].gpu_fraction) == (
        0.5,
        0.5,
    )  # node unknown: shared_gpu_replicas
    assert first["mig"].gpus_requested == pytest.approx(2 / 7, abs=1e-6)
    assert first["mig"].gpu_fraction == pytest.approx(1 / 7)
    assert first["mig"].gpu_model == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert first["init-heavy"].gpus_requested == 4.0
    assert not batch.rejects

    everyone = make(api, gpu_pods_only=False).poll_once()
    cpu = [e for e in everyone.job_events if e.name == "cpu-only"]
    assert [(e.event, e.gpus_requested) for e in cpu] == [("submitted", 0.0)]


def test_attributes_tenant_user_queue_priority(fake: FakeKubeApi, api: k8s.ApiClient) -> None:
    fake.put("nodes", node())
    fake.put("pods", scheduled(load("pod_pytorchjob_worker.json")))
    fake.put(
        "pods",
        pod(
            "search-nb",
            ns="team-x",
            owner="StatefulSet",
            labels={"team": "search", "notebook-name": "nb"},
            annotations={"gpuledger.io/user": "bob"},
        ),
    )
    fake.put("pods", pod("stray", ns="default"))
    events = {(e.name, e.event): e for e in make(api, kueue=False).poll_once().job_events}

    worker = events["llama-ft-worker-0", "admitted"]
    assert worker.job_id == "5f2c1c8e-6a0e-4a53-9d3b-0c6b8f0a1e01"
    assert (worker.tenant, worker.org, worker.project) == ("ml/vision", "ml", "vision")
    assert (worker.user, worker.queue, worker.priority, worker.priority_class) == (
        "alice",
        "vision-queue",
        1000,
        "research-high",
    )
    assert (worker.workload_type, worker.node, worker.pool) == (
        "training",
        "gpu-node-01",
        "h100-pool",
    )
    assert (worker.ts, worker.gpu_uuids, worker.source) == (at(1), (), "kubernetes")
    nb = events["search-nb", "submitted"]
    assert (nb.tenant, nb.org, nb.project, nb.user, nb.workload_type) == (
        "web/search",
        "web",
        "search",
        "bob",
        "notebook",
    )
    assert events["stray", "submitted"].tenant == "__unmapped__"


# -- lifecycle through list + watch -------------------------------------------------------------
def test_full_lifecycle_in_order(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    runner = start(kueue=False)
    p = pod("train-0")
    for state in (p, scheduled(p), running(p), running(p), ended(p, "Succeeded")):
        fake.put("pods", state)
    events = runner.wait_events(4)
    assert [(e.event, e.ts) for e in events] == [
        ("submitted", at(0)),
        ("admitted", at(1)),
        ("started", at(2)),
        ("finished", at(10)),
    ]
    assert events[-1].started_at == at(2) and events[0].started_at is None
    assert {e.job_id for e in events} == {"uid-train-0"}
    fake.delete("pods", "ml-vision/train-0")  # a finished pod going away says nothing new
    fake.put("pods", pod("marker"))
    runner.wait_events(5)
    assert [e.name for e in runner.events].count("train-0") == 4


def test_endings_and_their_reasons(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    runner = start(kueue=False)
    preempted = running(pod("preempted"))
    preempted["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "lastTransitionTime": iso(9),
        }
    )
    drained = running(pod("drained"))
    drained["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    )
    for final in (
        ended(pod("oom"), "Failed", "OOMKilled", 137),
        ended(pod("crash"), "Failed", "Error", 1),
        ended(pod("late"), "Failed", "Error", 137, reason="DeadlineExceeded"),
        ended(
            pod("pressure"),
            "Failed",
            "Error",
            137,
            reason="Evicted",
            message="The node was low on resource: memory.",
        ),
    ):
        fake.put("pods", final)
    for name, doomed in (
        ("pending", pod("pending")),
        ("busy", running(pod("busy"))),
        ("preempted", preempted),
        ("drained", drained),
    ):
        fake.put("pods", doomed)
        fake.delete("pods", f"ml-vision/{name}")
    gated = pod("gated", gated=True)
    fake.put("pods", gated)
    gate_off = copy.deepcopy(gated)
    del gate_off["spec"]["schedulingGates"]
    fake.put("pods", gate_off)
    runner.wait(
        lambda r: (
            len({e.job_id for e in r.events if e.event not in ("submitted", "admitted", "started")})
            == 8
            and any(e.name == "gated" and e.event == "admitted" for e in r.events)
        )
    )
    last = {e.name: (e.event, e.reason) for e in runner.events}
    assert last == {
        "oom": ("failed", "OOMKilled"),
        "crash": ("failed", "Error (exit code 1)"),
        "late": ("failed", "DeadlineExceeded"),
        "pressure": ("evicted", "Evicted"),
        "pending": ("cancelled", "deleted while pending"),
        "busy": ("cancelled", "deleted while running"),
        "preempted": ("preempted", "PreemptionByScheduler"),
        "drained": ("evicted", "EvictionByEvictionAPI"),
        "gated": ("admitted", ""),
    }
    assert steps(runner.events, "uid-pending") == [
        ("submitted", ""),
        ("cancelled", "deleted while pending"),
    ]
    oom = [e for e in runner.events if e.name == "oom"]
    assert [e.event for e in oom] == ["submitted", "admitted", "started", "failed"]
    assert (oom[-1].ts, oom[-1].started_at) == (at(10), at(2))
    gated_events = [(e.event, e.ts) for e in runner.events if e.name == "gated"]
    assert gated_events == [("submitted", at(0)), ("admitted", NOW)]  # gate lifted, seen now
    assert Counter((e.job_id, e.event) for e in runner.events).most_common(1)[0][1] == 1


def test_resume_after_dropped_connection(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    fake.drop_after(3, "pods")  # the first pods watch is cut mid-stream after 3 events
    runner = start(kueue=False)
    first_rv = fake.resource_version
    for i in range(5):
        fake.put("pods", pod(f"w{i}"))
        fake.put("pods", running(pod(f"w{i}")))
    runner.wait_events(15)
    time.sleep(0.2)  # anything duplicated would arrive now
    assert Counter((e.job_id, e.event) for e in runner.events) == {
        (f"uid-w{i}", step): 1 for i in range(5) for step in ("submitted", "admitted", "started")
    }
    watches = [q["resourceVersion"] for q in fake.watch_requests("pods")]
    assert watches == [str(first_rv), str(first_rv + 3)]  # resumed right after event 3
    fake.drop_watches()  # and a connection reset while idle
    deadline = time.monotonic() + 5
    while len(fake.watch_requests("pods")) < 3:
        assert time.monotonic() < deadline, "no reconnection"
        time.sleep(0.01)
    fake.put("pods", ended(pod("w0"), "Succeeded"))
    runner.wait_events(16)
    assert fake.watch_requests("pods")[-1]["resourceVersion"] == str(first_rv + 10)
    assert len(fake.list_requests("pods")) == 1  # resumed each time, never relisted
    assert runner.collector.stats.reconnects >= 2


@pytest.mark.parametrize("mode", ["event", "http"])
def test_relist_after_410_emits_what_was_missed_once(
    fake: FakeKubeApi, start: Callable[..., Runner], mode: str
) -> None:
    for name in ("done-in-gap", "gone-pending", "gone-running", "untouched"):
        fake.put("pods", running(pod(name)) if name != "gone-pending" else pod(name))
    runner = start(kueue=False)
    before = runner.wait_events(10)  # 3 running pods x 3 steps + 1 pending
    fake.put("pods", ended(pod("done-in-gap"), "Succeeded"), event=False)
    fake.delete("pods", "ml-vision/gone-pending", event=False)
    fake.delete("pods", "ml-vision/gone-running", event=False)
    fake.put("pods", running(pod("born-in-gap")), event=False)
    fake.expire(mode)
    runner.wait_events(len(before) + 6)
    time.sleep(0.2)
    after = runner.events[len(before) :]
    assert sorted((e.name, e.event, e.reason) for e in after) == [
        ("born-in-gap", "admitted", ""),
        ("born-in-gap", "started", ""),
        ("born-in-gap", "submitted", ""),
        ("done-in-gap", "finished", ""),
        ("gone-pending", "cancelled", GAP_REASON),
        ("gone-running", "finished", GAP_REASON),
    ]
    assert next(e for e in after if e.name == "done-in-gap").ts == at(10)  # from the object
    assert len(fake.list_requests("pods")) == 2
    assert runner.collector.stats.relists_410 >= 1
    fake.put("pods", ended(pod("untouched"), "Succeeded"))  # watching again, from the relist
    runner.wait(lambda r: any(e.name == "untouched" and e.event == "finished" for e in r.events))


def test_bookmark_moves_the_resume_point(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    runner = start(kueue=False)
    fake.put("pods", pod("a"))
    runner.wait_events(1)
    mark = fake.bookmark("pods")
    deadline = time.monotonic() + 5
    while runner.collector._rvs.get("pods") != str(mark):
        assert time.monotonic() < deadline, "the bookmark was not taken"
        time.sleep(0.01)
    fake.drop_watches()
    while len(fake.watch_requests("pods")) < 2:
        assert time.monotonic() < deadline, "no reconnection"
        time.sleep(0.01)
    assert fake.watch_requests("pods")[-1]["resourceVersion"] == str(mark)
    fake.put("pods", running(pod("a")))
    runner.wait_events(3)
    assert fake.watch_requests("pods")[0]["allowWatchBookmarks"] == "true"


def test_server_errors_back_off_and_recover(fake: FakeKubeApi, api: k8s.ApiClient) -> None:
    collector = make(api, kueue=False, backoff_initial_s=0.02, backoff_max_s=0.1)
    assert collector._backoff(0) == 0.0
    assert all(collector._backoff(n) <= 0.1 for n in range(1, 60))
    assert 0.01 <= collector._backoff(1) <= 0.02
    fake.put("pods", pod("a"))
    fake.fail_next(500, 500, 503, 500, 500)  # the first lists (and retries) all fail
    runner = Runner(collector)
    try:
        runner.thread.start()
        runner.wait_events(1)
        assert steps(runner.events, "uid-a") == [("submitted", "")]
    finally:
        runner.stop.set()
        runner.thread.join(5)


# -- Kueue ----------------------------------------------------------------------------------------
def test_kueue_admission_and_preemption(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    fake.put("nodes", node())
    workload = load("workload_pytorchjob.json")
    fake.put("workloads", workload)
    worker = load("pod_pytorchjob_worker.json")
    fake.put("pods", worker)
    other = copy.deepcopy(worker)  # no workload annotation: found through its owner's UID
    other["metadata"].update(name="llama-ft-worker-1", uid="uid-worker-1", annotations={})
    fake.put("pods", other)
    retry = copy.deepcopy(other)  # a replacement pod an hour into the run waited for nothing
    retry["metadata"].update(
        name="llama-ft-worker-1-retry", uid="uid-retry", creationTimestamp=iso(60)
    )
    fake.put("pods", retry)
    runner = start()
    runner.wait_events(6)
    assert [(e.event, e.ts) for e in runner.events if e.job_id == "uid-worker-1"] == [
        ("submitted", at(-20)),
        ("admitted", at(-5)),
    ]
    assert [(e.event, e.ts) for e in runner.events if e.job_id == "uid-retry"] == [
        ("submitted", at(60)),
        ("admitted", at(60)),
    ]
    submitted, admitted = [e for e in runner.events if e.name == "llama-ft-worker-0"]
    # queued since the Workload was created (09:40), admitted by Kueue at 09:55
    assert (submitted.event, submitted.ts) == ("submitted", at(-20))
    assert (admitted.event, admitted.ts, admitted.reason) == (
        "admitted",
        at(-5),
        "ClusterQueue vision-cq",
    )
    assert admitted.queue == "vision-queue" and admitted.priority == 1000
    fake.put("pods", running(worker))
    runner.wait_events(7)
    workload["status"]["conditions"] += [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": iso(5)},
        {
            "type": "Preempted",
            "status": "True",
            "reason": "InClusterQueue",
            "lastTransitionTime": iso(5),
        },
    ]
    fake.put("workloads", workload)
    time.sleep(0.1)
    assert len(runner.events) == 7  # evicting the Workload does not end a pod by itself
    fake.put("pods", ended(worker, "Failed", "Error", 143))  # the pod then dies...
    events = runner.wait_events(8)
    assert (events[-1].event, events[-1].reason) == ("preempted", "kueue:InClusterQueue")


def test_kueue_workload_arriving_after_a_gated_pod(
    fake: FakeKubeApi, start: Callable[..., Runner]
) -> None:
    plain = pod("plain", owner="", gated=True, labels={"kueue.x-k8s.io/queue-name": "q"})
    fake.put("pods", plain)
    runner = start()
    runner.wait_events(1)
    workload = load("workload_pytorchjob.json")  # Kueue's pod integration: the pod owns it
    workload["metadata"].update(
        name="pod-plain-1",
        namespace="ml-vision",
        labels={},
        ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "plain", "uid": "uid-plain"}],
    )
    admitted = workload["status"]["conditions"]
    workload["status"]["conditions"] = []
    fake.put("workloads", workload)
    time.sleep(0.1)
    assert len(runner.events) == 1  # queued, not admitted
    workload["status"]["conditions"] = admitted
    fake.put("workloads", workload)
    events = runner.wait_events(2)
    assert (events[1].event, events[1].ts, events[1].queue) == ("admitted", at(-5), "q")
    assert events[0].ts == at(0)  # the Workload came too late to move "submitted"


def test_runs_without_kueue() -> None:
    with FakeKubeApi(kueue=False) as fake:
        client = k8s.ApiClient(k8s.Configuration(host=fake.url))
        runner = Runner(make(client, kueue_recheck_s=0.05))
        try:
            fake.put("pods", pod("a"))
            runner.thread.start()
            runner.wait_events(1)
            fake.put("pods", running(pod("a")))
            runner.wait_events(3)
            deadline = time.monotonic() + 5
            while len(fake.list_requests("workloads")) < 3:  # it keeps looking for the CRD
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert not runner.rejects
            assert [e.event for e in make(client).poll_once().job_events] == [
                "submitted",
                "admitted",
                "started",
            ]  # polling shrugs off the 404 too
        finally:
            runner.stop.set()
            runner.thread.join(5)
            client.close()
        assert not runner.thread.is_alive()


# -- nodes ----------------------------------------------------------------------------------------
def test_node_inventory(fake: FakeKubeApi, api: k8s.ApiClient) -> None:
    fake.put("nodes", node())
    cordoned = node("cordoned")
    cordoned["spec"]["unschedulable"] = True
    sick = node("sick")
    sick["status"]["conditions"][-1].update(status="False", reason="KubeletNotReady")
    lost = node("lost")
    lost["status"]["conditions"][-1].update(status="Unknown", reason="NodeStatusUnknown")
    plain = node("plain")  # no GPU feature discovery: capacity, divided by time-slicing
    for key in ("nvidia.com/gpu.count", "nvidia.com/gpu.product", "karpenter.sh/nodepool"):
        del plain["metadata"]["labels"][key]
    plain["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "4"
    plain["status"]["capacity"].update({"nvidia.com/gpu": "16", "cpu": "abc"})
    for n in (cordoned, sick, lost, plain):
        fake.put("nodes", n)
    collector = make(api, synthesize_gpus=True)
    batch = collector.poll_once()
    nodes = {n.node: n for n in batch.nodes}
    h100 = nodes["gpu-node-01"]
    assert (h100.pool, h100.gpu_model, h100.gpu_count, h100.state) == (
        "h100-pool",
        "NVIDIA-H100-80GB-HBM3",
        8,
        "ready",
    )
    assert (h100.cpu_milli, h100.memory_bytes, h100.ts) == (192_000, 2097152000 * 1024, NOW)
    assert {k: (n.state, n.state_reason) for k, n in nodes.items() if k != "gpu-node-01"} == {
        "cordoned": ("notready", "cordoned"),
        "sick": ("notready", "KubeletNotReady"),
        "lost": ("down", "NodeStatusUnknown"),
        "plain": ("ready", ""),
    }
    plain_node = nodes["plain"]
    assert (plain_node.gpu_count, plain_node.cpu_milli, plain_node.pool) == (4, None, "")
    assert [(r.field, r.value) for r in batch.rejects] == [("status.capacity[cpu]", "abc")]
    gpus = [g for g in batch.gpus if g.node == "gpu-node-01"]
    assert [g.gpu_uuid for g in gpus] == [f"k8s:gpu-node-01/gpu{i}" for i in range(8)]
    assert {(g.memory_total_bytes, g.health) for g in gpus} == {(81559 * 2**20, "healthy")}
    assert {g.health for g in batch.gpus if g.node == "lost"} == {"down"}

    fake.put("nodes", node())  # a heartbeat: nothing changed, nothing to say
    fake.delete("nodes", "sick")
    again = collector.poll_once()
    assert [(n.node, n.state, n.state_reason) for n in again.nodes] == [
        ("sick", "retired", "deleted between polls")
    ]
    assert {g.health for g in again.gpus} == {"retired"} and not again.rejects
    assert make(api).poll_once().gpus == ()  # no placeholders unless asked


def test_node_deleted_while_watched(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    fake.put("nodes", node())
    runner = start(kueue=False)
    runner.wait(lambda r: any(b.nodes for b in r.batches))
    fake.delete("nodes", "gpu-node-01")
    runner.wait(lambda r: any(n.state == "retired" for b in r.batches for n in b.nodes))
    retired = [n for b in runner.batches for n in b.nodes if n.state == "retired"]
    assert [(n.node, n.state_reason, n.gpu_count) for n in retired] == [
        ("gpu-node-01", "node deleted", 8)
    ]


# -- bad input ------------------------------------------------------------------------------------
def test_malformed_objects_become_rejects(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    cases = load("malformed_pods.json")
    runner = start(kueue=False)
    for i, case in enumerate(cases):
        fake.put("pods", case["object"], key=f"bad/{i}")
    fake.put("pods", pod("good"))  # the stream goes on after all of them
    runner.wait(lambda r: len(r.rejects) == len(cases) and len(r.events) == 1)
    assert [(r.field, r.kind, r.source) for r in runner.rejects] == [
        (c["field"], "job_event", "kubernetes:c1/pods") for c in cases
    ]
    bad_qty = runner.rejects[2]
    assert (bad_qty.value, json.loads(bad_qty.payload)["metadata"]["name"]) == ("abc", "bad-qty")
    assert [r.value for r in runner.rejects[3:5]] == ["-2", "500m"]
    assert steps(runner.events, "uid-good") == [("submitted", "")]


def test_a_relist_does_not_quarantine_the_same_version_twice(
    fake: FakeKubeApi, api: k8s.ApiClient
) -> None:
    bad = load("malformed_pods.json")[2]["object"]
    fake.put("pods", bad)
    collector = make(api, kueue=False)
    assert [r.field for r in collector.poll_once().rejects] == [
        "spec.containers[0].resources[nvidia.com/gpu]"
    ]
    assert collector.poll_once().rejects == ()
    bad["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "-1"
    fake.put("pods", bad)  # a new version is new input
    assert [r.value for r in collector.poll_once().rejects] == ["-1"]


# -- polling --------------------------------------------------------------------------------------
def test_poll_once_pages_and_reports_only_new_transitions(
    fake: FakeKubeApi, api: k8s.ApiClient
) -> None:
    for i in range(5):
        fake.put("pods", pod(f"p{i}"))
    collector = make(api, page_size=2)
    first = collector.poll_once()
    assert sorted(e.name for e in first.job_events) == [f"p{i}" for i in range(5)]
    assert [q.get("continue", "") != "" for q in fake.list_requests("pods")] == [False, True, True]
    fake.put("pods", running(pod("p0")))
    fake.delete("pods", "ml-vision/p1")
    second = collector.poll_once()
    assert sorted((e.name, e.event, e.reason) for e in second.job_events) == [
        ("p0", "admitted", ""),
        ("p0", "started", ""),
        ("p1", "cancelled", "deleted between polls"),
    ]
    assert collector.poll_once().job_events == ()
