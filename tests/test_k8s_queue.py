"""Kueue Workloads that wait without pods (``collector.kubernetes.queue``), through the real client.

A Job that Kueue holds has a Workload and no pods. The collector reports it as the pods it asks
for (one job per pod, as everywhere else), waiting from the Workload's creation, and its pods
continue those jobs when Kueue admits it. Fixture times are minutes after T0 (see
``k8s_helpers``); the Workloads are created at -20 unless said otherwise.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from conftest import eventually
from k8s_fake import FakeKubeApi
from k8s_helpers import (
    JOB_UID,
    NOW,
    Runner,
    admitted,
    at,
    ended,
    evicted,
    finished,
    job_pod,
    later,
    load,
    make,
    pod,
    running,
    steps,
    workload,
)
from kubernetes import client as k8s

from collector.kubernetes.collector import GAP_REASON
from collector.kubernetes.queue import QUEUED_REASON
from warehouse.analytics import queues as qu
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor


def once_each(events: list[Any]) -> bool:
    return all(n == 1 for n in Counter((e.job_id, e.attempt, e.event) for e in events).values())


def test_a_suspended_job_waits_and_its_pod_continues_it(
    fake: FakeKubeApi, start: Callable[..., Runner]
) -> None:
    wl = workload("search", ns="team-x", labels={"team": "search"})
    wl["spec"]["podSets"][0]["template"]["metadata"]["annotations"] = {"gpuledger.io/user": "bob"}
    fake.put("workloads", wl)
    runner = start()
    (queued,) = runner.wait_events(1)
    assert (queued.job_id, queued.attempt, queued.event, queued.ts) == (
        "job-train",
        0,
        "submitted",
        at(-20),
    )  # the Job's UID: the Workload's creation is when it began to wait
    assert (queued.tenant, queued.user, queued.queue, queued.priority_class) == (
        "web/search",  # tenant rules see the pod template's labels
        "bob",
        "vision-queue",
        "research-high",
    )
    assert (queued.name, queued.namespace, queued.workload_type) == ("search", "team-x", "training")
    assert (queued.gpus_requested, queued.gpu_fraction, queued.node) == (2.0, 1.0, "")

    fake.put("workloads", admitted(wl, -5))
    assert runner.wait_events(2)[-1][:4] == (at(-5), "c1", "job-train", "admitted")
    p = job_pod("search-abcde")
    p["metadata"]["namespace"] = "team-x"
    fake.put("pods", p)
    fake.put("pods", running(p))
    fake.put("pods", ended(p, "Succeeded"))
    events = runner.wait_events(4)
    time.sleep(0.1)
    assert [(e.job_id, e.attempt, e.event, e.ts) for e in runner.events] == [
        ("job-train", 0, "submitted", at(-20)),
        ("job-train", 0, "admitted", at(-5)),
        ("job-train", 0, "started", at(2)),
        ("job-train", 0, "finished", at(10)),
    ]  # the pod went on as the same job: no second job, no second "submitted"
    assert (events[-1].name, events[-1].node, events[-1].tenant) == (
        "search-abcde",
        "gpu-node-01",
        "web/search",
    )
    assert events[-1].started_at == at(2)


def test_each_pod_a_workload_asks_for_is_a_job(
    fake: FakeKubeApi, start: Callable[..., Runner]
) -> None:
    wl = load("workload_pytorchjob.json")  # master 1 x 8 GPUs, worker 3 x 8 GPUs
    wl["status"] = {}
    fake.put("workloads", wl)
    runner = start()
    queued = runner.wait_events(4)
    assert [(e.job_id, e.event, e.gpus_requested) for e in queued] == [
        (f"{JOB_UID}/master-0", "submitted", 8.0),
        *((f"{JOB_UID}/worker-{i}", "submitted", 8.0) for i in range(3)),
    ]
    assert sum(e.gpus_requested for e in queued) == 32  # count x GPUs per pod, over the sets
    assert {e.ts for e in queued} == {at(-20)}

    fake.put("workloads", load("workload_pytorchjob.json"))  # admitted at -5
    runner.wait_events(8)
    worker = load("pod_pytorchjob_worker.json")  # replica type "worker", no owner match needed
    master = job_pod("llama-ft-master-0", JOB_UID, gpus="8")
    master["metadata"]["labels"]["training.kubeflow.org/replica-type"] = "Master"
    fake.put("pods", running(worker))
    fake.put("pods", running(master))
    runner.wait_events(10)
    started = {e.name: e.job_id for e in runner.events if e.event == "started"}
    assert started == {
        "llama-ft-worker-0": f"{JOB_UID}/worker-0",
        "llama-ft-master-0": f"{JOB_UID}/master-0",
    }  # each pod took a slot of its own pod set
    assert once_each(runner.events)


def test_workloads_that_end_without_pods(fake: FakeKubeApi, start: Callable[..., Runner]) -> None:
    for name in ("gone", "failed", "done", "in-gap", "cpu"):
        sets = [("main", 2, "0")] if name == "cpu" else None
        fake.put("workloads", workload(name, job_uid=f"job-{name}", sets=sets))
    runner = start()
    runner.wait_events(4)  # the CPU-only one is not a GPU job
    fake.delete("workloads", "ml-vision/job-gone-1a2b3")
    fake.put("workloads", finished(workload("failed", job_uid="job-failed"), 3, "Failed"))
    fake.put("workloads", finished(workload("done", job_uid="job-done"), 4, "Succeeded"))
    runner.wait_events(7)  # seen before the relist, or a loaded machine reads them as gone
    fake.delete("workloads", "ml-vision/job-in-gap-1a2b3", event=False)
    fake.expire()  # nobody saw that one go: a relist finds it missing
    runner.wait_events(8)
    time.sleep(0.1)
    ends = {e.job_id: (e.event, e.reason, e.ts) for e in runner.events if e.event != "submitted"}
    assert ends == {
        "job-gone": ("cancelled", QUEUED_REASON, NOW),
        "job-failed": ("failed", "kueue:Failed", at(3)),
        "job-done": ("finished", "", at(4)),
        "job-in-gap": ("cancelled", GAP_REASON, NOW),
    }
    assert once_each(runner.events)


def test_a_requeued_workload_waits_again_as_the_next_attempt(
    fake: FakeKubeApi, start: Callable[..., Runner]
) -> None:
    wl = workload()
    fake.put("workloads", wl)
    runner = start()
    runner.wait_events(1)
    fake.put("workloads", admitted(wl, -5))
    runner.wait_events(2)  # the watches run apart: let the admission arrive before the pod
    first = job_pod("train-aaaaa")
    fake.put("pods", running(first))
    runner.wait_events(3)
    fake.put("workloads", evicted(wl, 10))  # preempted: Kueue suspends the Job ...
    eventually(lambda: runner.collector.tracker._workloads["ml-vision/job-train-1a2b3"].eviction)
    fake.put("pods", ended(first, "Failed", "Error", 143))  # ... and its pod dies
    runner.wait_events(5)
    fake.put("workloads", admitted(wl, 40))
    runner.wait_events(6)
    fake.put("pods", later(running(job_pod("train-bbbbb")), 41))
    runner.wait_events(7)
    time.sleep(0.1)
    assert [(e.job_id, e.attempt, e.event, e.ts, e.reason) for e in runner.events] == [
        ("job-train", 0, "submitted", at(-20), ""),
        ("job-train", 0, "admitted", at(-5), "ClusterQueue vision-cq"),
        ("job-train", 0, "started", at(2), ""),
        ("job-train", 0, "preempted", at(10), "kueue:InClusterQueue"),
        ("job-train", 1, "submitted", at(10), ""),  # back in the queue from the eviction
        ("job-train", 1, "admitted", at(40), "ClusterQueue vision-cq"),
        ("job-train", 1, "started", at(43), ""),
    ]
    assert steps(runner.events, "uid-train-bbbbb") == []  # no job of its own


def test_a_workload_with_live_pods_is_not_reported_twice(
    fake: FakeKubeApi, start: Callable[..., Runner]
) -> None:
    fake.put("pods", job_pod("train-aaaaa"))  # listed after the Workload, but there already
    fake.put("workloads", workload())
    runner = start()
    runner.wait_events(1)
    time.sleep(0.1)
    assert [(e.job_id, e.event) for e in runner.events] == [("uid-train-aaaaa", "submitted")]
    assert runner.collector.tracker._queued.slots == {}


# -- queue analytics, through the real embedded warehouse --------------------------------------
def test_queue_analytics_count_a_suspended_job_from_its_workload(
    fake: FakeKubeApi, api: k8s.ApiClient, wh: Warehouse
) -> None:
    """Two suspended Jobs: "train" (2 GPUs, created at -20, admitted at -5, its pod starts at 2)
    and "later" (4 GPUs as 2 pods x 2, created at 5, still waiting at the end, 15).

        t     -30  -20  -10   0   10   (step 10 min)
        train   0    1    1   1    0   waits from -20 (the Workload) until its pod starts, 2
        later   0    0    0   0    2   2 pods, 2 GPUs each
    """
    ingest = Ingestor(wh, 35, now=lambda: NOW)
    collector = make(api)
    fake.put("workloads", workload("train"))
    fake.put("workloads", workload("later", job_uid="job-later", sets=[("w", 2, "2")], created=5))
    ingest.write_job_events(collector.poll_once().job_events)
    waiting = qu.queue_length(wh, "c1", at(-30), at(15), step=dt.timedelta(minutes=10))
    assert waiting["waiting_attempts"].to_list() == [0, 1, 1, 1, 2 + 1]
    assert waiting["waiting_gpus"].to_list() == [0.0, 2.0, 2.0, 2.0, 4.0 + 2.0]

    fake.put("workloads", admitted(workload("train"), -5))
    ingest.write_job_events(collector.poll_once().job_events)
    fake.put("pods", running(job_pod("train-aaaaa")))
    ingest.write_job_events(collector.poll_once().job_events)
    waiting = qu.queue_length(wh, "c1", at(-30), at(15), step=dt.timedelta(minutes=10))
    assert waiting["waiting_attempts"].to_list() == [0, 1, 1, 1, 2]  # train left at 2
    assert waiting["waiting_gpus"].to_list() == [0.0, 2.0, 2.0, 2.0, 4.0]

    waits = qu.wait_times(wh, "c1", at(-30), at(15), by=("queue",))
    assert waits.select("queue", "attempts", "p50_s", "unknown_wait").rows() == [
        ("vision-queue", 1, 22 * 60.0, 0)  # from the Workload's creation (-20) to the start (2)
    ]
    jobs = wh.rows(f"SELECT job_id, events FROM {wh.database}.jobs FINAL ORDER BY job_id")
    assert jobs == [
        ("job-later/w-0", 1),
        ("job-later/w-1", 1),
        ("job-train", 3),  # submitted, admitted, started: one job, not two
    ]


def test_pods_of_a_job_s_children_take_its_slots_by_name(
    fake: FakeKubeApi, start: Callable[..., Runner]
) -> None:
    """A JobSet's pods are owned by its Jobs, not by the JobSet the Workload stands for."""
    wl = workload("js", job_uid="jobset-js", sets=[("workers", 2, "1")])
    wl["metadata"]["ownerReferences"][0].update(kind="JobSet", name="js")
    fake.put("workloads", wl)
    fake.put("workloads", workload("js-other", job_uid="jobset-js-other"))
    runner = start()
    runner.wait_events(3)
    fake.put("workloads", admitted(wl, -5))
    fake.put("workloads", admitted(workload("js-other", job_uid="jobset-js-other"), -5))
    runner.wait_events(6)
    for name in ("js-workers-0-0-abcde", "js-workers-0-1-fghij", "js-other-main-0-0-klmno"):
        child = pod(name, resources={"nvidia.com/gpu": "1"})  # owned by a Job of the JobSet
        fake.put("pods", running(child))
    runner.wait_events(9)
    time.sleep(0.1)
    started = {e.name: (e.job_id, e.attempt) for e in runner.events if e.event == "started"}
    assert started == {
        "js-workers-0-0-abcde": ("jobset-js/workers-0", 0),
        "js-workers-0-1-fghij": ("jobset-js/workers-1", 0),
        "js-other-main-0-0-klmno": ("jobset-js-other", 0),  # the longest job name wins
    }
    assert once_each(runner.events)
    late = pod("js-workers-0-0-retry", resources={"nvidia.com/gpu": "1"})
    fake.put("pods", late)  # no free slot left: a job of its own
    assert runner.wait_events(10)[-1].job_id == "uid-js-workers-0-0-retry"


@pytest.mark.parametrize("served", ["v1beta2", "v1beta1"])
def test_workloads_are_read_at_the_version_kueue_serves(served: str) -> None:
    """Kueue serves v1beta2 alone from v0.20 (its priority class in ``priorityClassRef``), and
    v1beta1 alone before v0.15: either way the waiting Workload is seen."""
    wl = workload("search", ns="team-x")
    if served == "v1beta2":
        wl["apiVersion"] = "kueue.x-k8s.io/v1beta2"
        spec = wl["spec"]
        spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                    "name": spec.pop("priorityClassName")}  # fmt: skip
        spec.pop("priorityClassSource", None)
    with FakeKubeApi(kueue_versions=(served,)) as fake:
        fake.put("workloads", wl)
        api = k8s.ApiClient(k8s.Configuration(host=fake.url))
        try:
            collector = make(api)
            (queued,) = collector.poll_once().job_events
            assert (queued.job_id, queued.event, queued.priority_class) == (
                "job-train", "submitted", "research-high",
            )  # fmt: skip
            again = collector.poll_once()  # the version that answered is asked first
            assert not again.job_events
            asked = [p.split("/")[3] for p, _ in fake.requests if p.endswith("/workloads")]
            wanted = ["v1beta2"] * 2 if served == "v1beta2" else ["v1beta2", "v1beta1", "v1beta1"]
            assert asked == wanted
        finally:
            api.close()
