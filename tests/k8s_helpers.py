"""Kubernetes objects and a collector runner for ``test_kubernetes.py``.

Pods and nodes as the API server sends them (from ``tests/data/k8s`` or built here), and the
functions that move a pod through its states. Fixture timeline (minutes after 2025-03-03 10:00
UTC): created 0, scheduled 1, running 2, ended 10. ``make`` fixes the collector's clock at NOW,
so an event at NOW means "observed, no time in the object". :class:`Runner` runs
``collector.run`` in a thread and keeps every batch its sink gets.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from collector.kubernetes.collector import KubernetesCollector
from collector.records import Batch, JobEvent, Reject, TenantRule
from collector.tenancy import TenantMapper

DATA = Path(__file__).parent / "data" / "k8s"
T0 = dt.datetime(2025, 3, 3, 10, 0, tzinfo=dt.UTC)
NOW = dt.datetime(2025, 3, 4, 0, 0, tzinfo=dt.UTC)
RULES = [
    TenantRule("namespace", "ml-vision", "ml/vision"),
    TenantRule("label", "team=search", "web/search", rank=10),
]


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def iso(minutes: float) -> str:
    return at(minutes).strftime("%Y-%m-%dT%H:%M:%SZ")


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def pod(
    name: str,
    *,
    resources: dict[str, str] | None = None,
    owner: str = "Job",
    labels: dict[str, str] | None = None,
    ns: str = "ml-vision",
    gated: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pending pod asking for one whole GPU unless ``resources`` says otherwise."""
    res = {"nvidia.com/gpu": "1"} if resources is None else resources
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": f"uid-{name}",
        "creationTimestamp": iso(0),
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": owner,
                "name": "owner",
                "uid": f"owner-{name}",
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": res}}]}
    if gated:
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def scheduled(p: dict[str, Any], node: str = "gpu-node-01") -> dict[str, Any]:
    p = copy.deepcopy(p)
    p["spec"]["nodeName"] = node
    p["spec"].pop("schedulingGates", None)
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(1)}
    ]
    return p


def running(p: dict[str, Any]) -> dict[str, Any]:
    p = scheduled(p)
    p["status"].update(
        phase="Running",
        containerStatuses=[{"name": "main", "state": {"running": {"startedAt": iso(2)}}}],
    )
    return p


def ended(
    p: dict[str, Any], phase: str, exit_reason: str = "Completed", code: int = 0, **status: Any
) -> dict[str, Any]:
    """``p`` after its container ran from minute 2 to 10; ``status`` adds pod-level fields."""
    p = running(p)
    p["status"].update(
        phase=phase,
        containerStatuses=[
            {
                "name": "main",
                "state": {
                    "terminated": {
                        "startedAt": iso(2),
                        "finishedAt": iso(10),
                        "exitCode": code,
                        "reason": exit_reason,
                    }
                },
            }
        ],
        **status,
    )
    return p


def node(name: str = "gpu-node-01", **labels: str) -> dict[str, Any]:
    n = load("node_h100.json")
    n["metadata"]["name"] = name
    n["metadata"]["labels"].update(labels)
    return n


def events_of(batches: list[Batch]) -> list[JobEvent]:
    return [e for b in batches for e in b.job_events]


def steps(events: list[JobEvent], job: str) -> list[tuple[str, str]]:
    return [(e.event, e.reason) for e in events if e.job_id == job]


def make(api: k8s.ApiClient, **kw: Any) -> KubernetesCollector:
    options: dict[str, Any] = {
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.05,
        "request_timeout_s": 5.0,
        "watch_timeout_s": 30,
        "clock": lambda: NOW,
        **kw,
    }
    return KubernetesCollector(api, "c1", TenantMapper(RULES), **options)


class Runner:
    """``collector.run`` in a thread; the sink keeps every batch."""

    def __init__(self, collector: KubernetesCollector):
        self.collector, self.batches = collector, []
        self.stop, self._cond = threading.Event(), threading.Condition()
        self.thread = threading.Thread(target=collector.run, args=(self.stop, self._sink))

    def _sink(self, batch: Batch) -> None:
        with self._cond:
            self.batches.append(batch)
            self._cond.notify_all()

    @property
    def events(self) -> list[JobEvent]:
        with self._cond:
            return events_of(self.batches)

    @property
    def rejects(self) -> list[Reject]:
        with self._cond:
            return [r for b in self.batches for r in b.rejects]

    def wait(self, predicate: Callable[[Runner], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; events: {events_of(self.batches)}")
                self._cond.wait(left)

    def wait_events(self, count: int, timeout: float = 5.0) -> list[JobEvent]:
        self.wait(lambda r: len(events_of(r.batches)) >= count, timeout)
        return self.events


# -- Kueue Workloads ------------------------------------------------------------------------------
JOB_UID = "0d6a6b0e-1111-4c2b-9a55-7e0f3b4a9c10"  # the job the fixture Workload stands for


def workload(
    name: str = "train",
    *,
    job_uid: str = "job-train",
    ns: str = "ml-vision",
    sets: list[tuple[str, int, str]] | None = None,
    labels: dict[str, str] | None = None,
    created: float = -20,
) -> dict[str, Any]:
    """A Workload Kueue has not admitted (its Job suspended, no pods): ``sets`` are
    (pod set, count, GPUs per pod), one pod of 2 GPUs unless said otherwise."""
    wl = load("workload_pytorchjob.json")
    wl["metadata"].update(
        name=f"job-{name}-1a2b3",
        namespace=ns,
        uid=f"wl-{name}",
        creationTimestamp=iso(created),
        labels={"kueue.x-k8s.io/job-uid": job_uid},
        ownerReferences=[
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": name,
                "uid": job_uid,
                "controller": True,
            }
        ],
    )
    wl["spec"]["podSets"] = [
        {
            "name": set_name,
            "count": count,
            "template": {
                "metadata": {"labels": labels or {}},
                "spec": {
                    "containers": [
                        {"name": "main", "resources": {"requests": {"nvidia.com/gpu": gpus}}}
                    ]
                },
            },
        }
        for set_name, count, gpus in sets or [("main", 1, "2")]
    ]
    wl["status"] = {}
    return wl


def admitted(wl: dict[str, Any], minutes: float) -> dict[str, Any]:
    """``wl`` with quota reserved in vision-cq and admitted at ``minutes``."""
    wl = copy.deepcopy(wl)
    wl["status"] = {
        "conditions": [
            {"type": kind, "status": "True", "reason": kind, "lastTransitionTime": iso(minutes)}
            for kind in ("QuotaReserved", "Admitted")
        ],
        "admission": {"clusterQueue": "vision-cq", "podSetAssignments": []},
    }
    return wl


def evicted(wl: dict[str, Any], minutes: float) -> dict[str, Any]:
    """``wl`` preempted at ``minutes`` and back in its queue (no longer admitted)."""
    wl = copy.deepcopy(wl)
    wl["status"] = {
        "conditions": [
            {"type": "Admitted", "status": "False", "reason": "NoReservation"},
            {"type": "Evicted", "status": "True", "reason": "Preempted",
             "lastTransitionTime": iso(minutes)},
            {"type": "Preempted", "status": "True", "reason": "InClusterQueue",
             "lastTransitionTime": iso(minutes)},
        ]
    }  # fmt: skip
    return wl


def finished(wl: dict[str, Any], minutes: float, reason: str) -> dict[str, Any]:
    wl = copy.deepcopy(wl)
    wl.setdefault("status", {}).setdefault("conditions", []).append(
        {"type": "Finished", "status": "True", "reason": reason, "lastTransitionTime": iso(minutes)}
    )
    return wl


def job_pod(
    name: str, job_uid: str = "job-train", *, gpus: str = "2", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pending pod of the Job ``job_uid`` (how a Workload finds its pods: the owner's UID)."""
    p = pod(name, resources={"nvidia.com/gpu": gpus}, labels=labels)
    p["metadata"]["ownerReferences"][0]["uid"] = job_uid
    return p


def later(obj: dict[str, Any], minutes: float) -> dict[str, Any]:
    """``obj`` with every fixture time in it moved ``minutes`` later (a pod of a later run)."""
    text = json.dumps(obj)
    for m in range(-60, 61):
        text = text.replace(f'"{iso(m)}"', f'"@{m}@"')
    for m in range(-60, 61):
        text = text.replace(f'"@{m}@"', f'"{iso(m + minutes)}"')
    return json.loads(text)
