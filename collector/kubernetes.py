"""Kubernetes pods, nodes and Kueue Workloads → job events and node inventory, by list + watch.

The official ``kubernetes`` client does the HTTP; this module decides what the objects mean.
The decisions a reader of the ledger needs to know:

* **One job per pod**: ``job_id`` is the pod UID, ``name`` the pod name, ``attempt`` 0. The pod
  is what holds GPUs on one node, and the GPU ↔ workload mapping (cgroups, NVML, dcgm) names
  GPU users by pod UID, so each pod is one allocation interval. A PyTorchJob with 4 workers is
  4 jobs sharing a name prefix; a pod re-created by a Job retry or a Kueue requeue has a new
  UID, hence is a new job rather than a new attempt.
* **Lifecycle**: ``submitted`` at creation (for the pods a Kueue admission started, the
  Workload's creation, so time queued in Kueue counts as waiting) → ``admitted`` (the
  Workload's Admitted condition, else PodScheduled=True, else a scheduling gate seen and then
  removed) → ``started`` (the Running transition; first container start time) → one terminal
  event: ``finished`` (Succeeded), ``preempted`` (DisruptionTarget whose reason names
  preemption, or the Workload evicted by preemption), ``evicted`` (other disruptions, kubelet
  eviction, other Workload evictions), ``failed`` (pod reason such as DeadlineExceeded, else the
  first failing container's reason, e.g. OOMKilled or "Error (exit code 1)"), ``cancelled``
  (deleted before it ended).
  Each step is derived from the object's current state and emitted once per pod, so a relist
  re-emits nothing yet emits what a gap hid; a pod gone after a gap ends as ``finished`` (if it
  had started) or ``cancelled``, with reason "deleted during watch gap". Times come from the
  object (conditions, container states) where it has them, else from the collector's clock.
* ``gpu_uuids`` stay empty: the API does not say which GPU a pod was given. The NVML/dcgm pod
  mapping fills them later.
* GPU requests (max of the containers' sum and any init container, requests else limits):
  ``nvidia.com/gpu`` whole GPUs; ``nvidia.com/gpu.shared`` time-sliced shares of 1/replicas
  (replicas from the node label ``nvidia.com/gpu.replicas``, else ``shared_gpu_replicas``);
  ``nvidia.com/mig-<profile>`` slices of g/7 of a GPU (g/4 for A30 profiles).
  ``gpus_requested`` is in GPU-equivalents. ``gpu_model`` is the pod's nodeSelector
  ``nvidia.com/gpu.product``, with "-MIG-<profile>" appended for MIG requests (GFD's naming).
* Nodes → ``NodeInventory``: ready; notready (Ready=False, or cordoned); down (Ready=Unknown);
  retired (deleted). Model and count from the GPU feature discovery labels, else capacity.
  ``GpuInventory`` rows only with ``synthesize_gpus`` (placeholder uuids ``k8s:<node>/gpu<i>``)
  for clusters without NVML/dcgm agents: next to real UUIDs they would count capacity twice.
* Malformed objects become ``Reject`` records (field, value, reason, raw JSON), never errors.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from .records import (
    TERMINAL_EVENTS,
    WORKLOAD_TYPES,
    Batch,
    GpuInventory,
    JobEvent,
    NodeInventory,
    Reject,
)
from .tenancy import TenantMapper

__all__ = [
    "KubernetesCollector",
    "KubernetesError",
    "PodView",
    "mig_fraction",
    "parse_pod",
    "parse_quantity",
    "workload_type",
]

log = logging.getLogger(__name__)

SOURCE = "kubernetes"
GAP_REASON = "deleted during watch gap"
POLL_GAP_REASON = "deleted between polls"
KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")  # group, version, plural
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # set by Kueue on admitted pod templates
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on a Workload: the UID of the job that owns it
TYPE_LABEL = "gpuledger.io/workload-type"  # explicit override: training, inference, ...
USER_KEYS = ("gpuledger.io/user",)
POOL_LABELS = (
    "gpuledger.io/pool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
    "karpenter.sh/nodepool",
)
GPU, SHARED, MIG = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-"
PRODUCT, COUNT = "nvidia.com/gpu.product", "nvidia.com/gpu.count"
MEMORY_MIB, REPLICAS = "nvidia.com/gpu.memory", "nvidia.com/gpu.replicas"

_TRAINING_KINDS = frozenset(
    {
        "Job",
        "CronJob",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "TrainJob",
        "RayJob",
        "JobSet",
    }
)
_INFERENCE_KINDS = frozenset(
    {"Deployment", "InferenceService", "RayService", "LeaderWorkerSet", "ServingRuntime"}
)
_COMPONENTS = {
    "training": "training",
    "trainer": "training",
    "train": "training",
    "inference": "inference",
    "predictor": "inference",
    "serving": "inference",
    "server": "inference",
    "model-server": "inference",
    "notebook": "notebook",
    "jupyter": "notebook",
    "jupyterlab": "notebook",
}
_QUANTITY = re.compile(
    r"^([+-]?)(\d+\.?\d*|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_SCALE = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate("kMGTPE")},
    **{s + "i": Decimal(1024) ** (i + 1) for i, s in enumerate("KMGTPE")},
}
_MIG_PROFILE = re.compile(r"^(?:\d+c\.)?(\d+)g\.(\d+)gb(?:\+\w+)?$")
_RECORD_KIND = {"pods": "job_event", "workloads": "job_event", "nodes": "node_inventory"}
# Pods created this soon after their Workload's admission are the ones it started (their wait
# began with the Workload); a later pod, such as a Job's retry, waits from its own creation.
FIRST_PODS_WINDOW = dt.timedelta(minutes=10)


class KubernetesError(Exception):
    """Listing from the API server failed (``poll_once``); the message says what to check."""


class _Bad(Exception):
    """One field of an object that cannot be read; becomes a ``Reject``."""

    def __init__(self, field: str, value: str, reason: str):
        super().__init__(f"{field}={value!r}: {reason}")
        self.field, self.value, self.reason = field, value, reason


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def parse_quantity(text: object) -> Decimal:
    """A Kubernetes quantity ("2", "500m", "16Gi", "1e3") as a Decimal; ValueError otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        return Decimal(text)
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    sign, number, exponent, suffix = match.groups()
    scale = Decimal(10) ** int(exponent[1:]) if exponent else _SCALE[suffix or ""]
    value = Decimal(number) * scale
    return -value if sign == "-" else value


def mig_fraction(profile: str) -> float:
    """The share of a physical GPU one MIG slice of ``profile`` ("1g.10gb", "1c.3g.40gb") is.

    Compute slices out of 7 (A100, H100, H200, B200), except the A30's 6 GB-per-slice profiles
    (1g.6gb, 2g.12gb, 4g.24gb), which are out of 4.
    """
    match = _MIG_PROFILE.match(profile)
    if match is None:
        raise ValueError(f"unknown MIG profile {profile!r}")
    slices, memory_gb = int(match.group(1)), int(match.group(2))
    total = 4 if memory_gb == 6 * slices and slices in (1, 2, 4) else 7
    if not 0 < slices <= total:
        raise ValueError(f"MIG profile {profile!r} has {slices} of {total} slices")
    return slices / total


def workload_type(labels: dict[str, str], owner_kind: str) -> str:
    """training, inference, notebook or other: an explicit label, well-known labels, the owner.

    A ReplicaSet with a ``pod-template-hash`` label belongs to a Deployment (inference); a
    StatefulSet is a Kubeflow notebook when the pod has the ``notebook-name`` label.
    """
    if labels.get(TYPE_LABEL) in WORKLOAD_TYPES:
        return labels[TYPE_LABEL]
    component = labels.get("app.kubernetes.io/component", "").lower()
    if component in _COMPONENTS:
        return _COMPONENTS[component]
    if "notebook-name" in labels or owner_kind == "Notebook":
        return "notebook"
    ray = labels.get("ray.io/originated-from-crd", "")
    if ray in ("RayJob", "RayService"):
        return "training" if ray == "RayJob" else "inference"
    if (
        "serving.kserve.io/inferenceservice" in labels
        or "leaderworkerset.sigs.k8s.io/name" in labels
        or owner_kind in _INFERENCE_KINDS
    ):
        return "inference"
    if owner_kind in _TRAINING_KINDS or "training.kubeflow.org/job-name" in labels:
        return "training"
    if owner_kind == "ReplicaSet" and "pod-template-hash" in labels:
        return "inference"
    return "other"


def _map(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(field, str(value)[:200], "expected an object")
    return value


def _items(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _time(value: Any, field: str) -> dt.datetime | None:
    if value in (None, ""):
        return None
    try:
        ts = dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise _Bad(field, str(value), "not an RFC 3339 time") from None
    return ts.astimezone(dt.UTC) if ts.tzinfo else ts.replace(tzinfo=dt.UTC)


def _meta(obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise _Bad("metadata", "", f"the {what} has no metadata")
    meta: dict[str, Any] = obj["metadata"]
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        raise _Bad("metadata.name", str(meta.get("name", "")), f"the {what} has no name")
    return meta


def _labels(meta: dict[str, Any], key: str = "labels") -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(meta.get(key), f"metadata.{key}").items()}


def _true(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next(
        (c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None
    )


class PodView(NamedTuple):
    """What one pod object says, in the terms of a job (see the module docstring)."""

    uid: str
    name: str
    namespace: str
    created: dt.datetime
    labels: dict[str, str]
    owner_uid: str
    workload_name: str  # Kueue's workload annotation, "" without one
    node: str
    priority: int
    priority_class: str
    queue: str
    user: str
    workload_type: str
    gpu_model: str
    whole_gpus: int
    shared_gpus: int
    mig: tuple[tuple[str, int], ...]  # (profile, slices)
    phase: str
    status_reason: str
    gated: bool
    scheduled: bool
    scheduled_at: dt.datetime | None
    running: bool
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    failure: str
    disruption: str  # the DisruptionTarget reason, "" when none


def _container_gpus(container: dict[str, Any], path: str) -> dict[str, int]:
    resources = _map(container.get("resources"), f"{path}.resources")
    requests = _map(resources.get("requests"), f"{path}.resources.requests")
    limits = _map(resources.get("limits"), f"{path}.resources.limits")
    out: dict[str, int] = {}
    for name in {*requests, *limits}:
        if name not in (GPU, SHARED) and not name.startswith(MIG):
            continue
        raw, field = requests.get(name, limits.get(name)), f"{path}.resources[{name}]"
        try:
            value = parse_quantity(raw)
        except ValueError:
            raise _Bad(field, str(raw), "not a Kubernetes quantity") from None
        if value < 0 or value != value.to_integral_value():
            raise _Bad(field, str(raw), "a GPU request must be a non-negative whole number")
        if name.startswith(MIG):
            try:
                mig_fraction(name[len(MIG) :])
            except ValueError as exc:
                raise _Bad(field, name, str(exc)) from None
        out[name] = int(value)
    return out


def _pod_gpus(spec: dict[str, Any]) -> dict[str, int]:
    """Effective GPU requests: the containers' sum, or an init container's if larger."""
    total: dict[str, int] = {}
    for i, c in enumerate(_items(spec.get("containers"))):
        for name, n in _container_gpus(c, f"spec.containers[{i}]").items():
            total[name] = total.get(name, 0) + n
    for i, c in enumerate(_items(spec.get("initContainers"))):
        for name, n in _container_gpus(c, f"spec.initContainers[{i}]").items():
            total[name] = max(total.get(name, 0), n)
    return total


def _exit_reason(term: dict[str, Any]) -> str:
    reason = str(term.get("reason") or "Error")
    return f"Error (exit code {term.get('exitCode')})" if reason == "Error" else reason


def parse_pod(obj: Any, user_keys: Sequence[str] = USER_KEYS) -> PodView:
    """Read a pod object (a dict, as the API sends it); raises ``_Bad`` on malformed input."""
    meta = _meta(obj, "pod")
    uid, namespace = meta.get("uid"), meta.get("namespace")
    if not isinstance(uid, str) or not uid:
        raise _Bad("metadata.uid", str(uid or ""), "the pod has no uid")
    if not isinstance(namespace, str) or not namespace:
        raise _Bad("metadata.namespace", str(namespace or ""), "the pod has no namespace")
    created = _time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    if created is None:
        raise _Bad("metadata.creationTimestamp", "", "the pod has no creation time")
    labels, annotations = _labels(meta), _labels(meta, "annotations")
    owners = _items(meta.get("ownerReferences"))
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    spec, status = _map(obj.get("spec"), "spec"), _map(obj.get("status"), "status")
    gpus = _pod_gpus(spec)
    priority = spec.get("priority") or 0
    if not isinstance(priority, int):
        raise _Bad("spec.priority", str(priority), "priority must be an integer")
    mig = tuple(sorted((k[len(MIG) :], n) for k, n in gpus.items() if k.startswith(MIG) and n))
    product = str(_map(spec.get("nodeSelector"), "spec.nodeSelector").get(PRODUCT, ""))
    if mig and not gpus.get(GPU):
        product = f"{product}-MIG-{mig[0][0]}" if product else f"MIG-{mig[0][0]}"
    conditions = _items(status.get("conditions"))
    scheduled, disruption = _true(conditions, "PodScheduled"), _true(conditions, "DisruptionTarget")
    starts: list[dt.datetime] = []
    ends: list[dt.datetime] = []
    failure, running = "", status.get("phase") == "Running"
    statuses = [("containerStatuses", c) for c in _items(status.get("containerStatuses"))]
    statuses += [("initContainerStatuses", c) for c in _items(status.get("initContainerStatuses"))]
    for i, (group, cs) in enumerate(statuses):
        path = f"status.{group}[{cs.get('name', i)}]"
        state = _map(cs.get("state"), f"{path}.state")
        run = _map(state.get("running"), f"{path}.state.running")
        term = _map(state.get("terminated"), f"{path}.state.terminated")
        before = _map(
            _map(cs.get("lastState"), f"{path}.lastState").get("terminated"),
            f"{path}.lastState.terminated",
        )  # a restarted container's first run
        if group == "containerStatuses":
            for field, part in (
                ("state.running", run),
                ("state.terminated", term),
                ("lastState.terminated", before),
            ):
                if ts := _time(part.get("startedAt"), f"{path}.{field}.startedAt"):
                    starts.append(ts)
        if ts := _time(term.get("finishedAt"), f"{path}.state.terminated.finishedAt"):
            ends.append(ts)
        if term and term.get("exitCode") not in (0, None) and not failure:
            failure = _exit_reason(term)
    user = next((m[k] for k in user_keys for m in (labels, annotations) if m.get(k)), "")
    return PodView(
        uid=uid,
        name=meta["name"],
        namespace=namespace,
        created=created,
        labels=labels,
        owner_uid=str(owner.get("uid", "")),
        workload_name=annotations.get(WORKLOAD_ANNOTATION, ""),
        node=str(spec.get("nodeName") or ""),
        priority=priority,
        priority_class=str(spec.get("priorityClassName") or ""),
        queue=labels.get(QUEUE_LABEL, ""),
        user=user,
        workload_type=workload_type(labels, str(owner.get("kind", ""))),
        gpu_model=product,
        whole_gpus=gpus.get(GPU, 0),
        shared_gpus=gpus.get(SHARED, 0),
        mig=mig,
        phase=str(status.get("phase") or ""),
        status_reason=str(status.get("reason") or ""),
        gated=bool(spec.get("schedulingGates")),
        scheduled=scheduled is not None,
        scheduled_at=_time((scheduled or {}).get("lastTransitionTime"), "status.conditions"),
        running=running,
        started_at=min(starts, default=None),
        ended_at=max(ends, default=None),
        failure=str(status.get("reason") or "") or failure,
        disruption=str(
            (disruption or {}).get("reason") or ("DisruptionTarget" if disruption else "")
        ),
    )


class WorkloadView(NamedTuple):
    """What a Kueue Workload adds to its pods: queueing, admission and eviction."""

    namespace: str
    name: str
    created: dt.datetime | None
    job_uids: tuple[str, ...]  # the kueue.x-k8s.io/job-uid label and the owners' UIDs
    queue: str
    cluster_queue: str
    priority: int | None
    priority_class: str
    admitted: bool
    admitted_at: dt.datetime | None
    eviction: tuple[str, str, dt.datetime | None] | None  # (event, reason, since)


def parse_workload(obj: Any) -> WorkloadView:
    """Read a kueue.x-k8s.io/v1beta1 Workload; raises ``_Bad`` on malformed input."""
    meta = _meta(obj, "workload")
    spec, status = _map(obj.get("spec"), "spec"), _map(obj.get("status"), "status")
    conditions = _items(status.get("conditions"))
    uids = [_labels(meta).get(JOB_UID_LABEL, "")]
    uids += [str(o.get("uid", "")) for o in _items(meta.get("ownerReferences"))]
    admitted = _true(conditions, "Admitted")
    evicted, preempted = _true(conditions, "Evicted"), _true(conditions, "Preempted")
    eviction = None
    if evicted or preempted:
        cond = preempted or evicted or {}
        kind = "preempted" if preempted or cond.get("reason") == "Preempted" else "evicted"
        since = _time((evicted or cond).get("lastTransitionTime"), "status.conditions")
        eviction = (kind, f"kueue:{cond.get('reason') or 'Evicted'}", since)
    priority = spec.get("priority")
    return WorkloadView(
        namespace=str(meta.get("namespace") or ""),
        name=meta["name"],
        created=_time(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        job_uids=tuple(u for u in uids if u),
        queue=str(spec.get("queueName") or ""),
        cluster_queue=str(
            _map(status.get("admission"), "status.admission").get("clusterQueue") or ""
        ),
        priority=priority if isinstance(priority, int) else None,
        priority_class=str(spec.get("priorityClassName") or ""),
        admitted=admitted is not None,
        admitted_at=_time((admitted or {}).get("lastTransitionTime"), "status.conditions"),
        eviction=eviction,
    )


class _NodeParse(NamedTuple):
    record: NodeInventory
    replicas: int | None  # time-slicing replicas per GPU (GFD label)
    memory_mib: int | None  # per GPU (GFD label)
    problems: list[_Bad]


def _int_label(labels: dict[str, str], key: str, problems: list[_Bad]) -> int | None:
    raw = labels.get(key)
    if raw is None:
        return None
    if raw.isdigit():
        return int(raw)
    problems.append(_Bad(f"metadata.labels[{key}]", raw, "expected a whole number"))
    return None


def parse_node(
    obj: Any, cluster: str, ts: dt.datetime, pool_labels: Sequence[str] = POOL_LABELS
) -> _NodeParse:
    """A node object as inventory; unreadable quantities become ``problems`` (and None)."""
    meta = _meta(obj, "node")
    labels = _labels(meta)
    spec, status = _map(obj.get("spec"), "spec"), _map(obj.get("status"), "status")
    capacity = _map(status.get("capacity"), "status.capacity")
    problems: list[_Bad] = []

    def amount(key: str, scale: int) -> int | None:
        raw = capacity.get(key)
        if raw is None:
            return None
        try:
            value = parse_quantity(raw)
            if value >= 0:
                return int(value * scale)
        except ValueError:
            pass
        problems.append(_Bad(f"status.capacity[{key}]", str(raw), "not a non-negative quantity"))
        return None

    replicas = _int_label(labels, REPLICAS, problems)
    count = _int_label(labels, COUNT, problems)
    if count is None:  # capacity counts each time-slicing replica as a GPU
        count = (amount(GPU, 1) or 0) // max(replicas or 1, 1)
    ready = next((c for c in _items(status.get("conditions")) if c.get("type") == "Ready"), None)
    if ready is None:
        state, reason = "notready", "no Ready condition"
    elif ready.get("status") == "True":
        state, reason = ("notready", "cordoned") if spec.get("unschedulable") else ("ready", "")
    elif ready.get("status") == "Unknown":
        state, reason = "down", str(ready.get("reason") or "NodeStatusUnknown")
    else:
        state, reason = "notready", str(ready.get("reason") or "NotReady")
    record = NodeInventory(
        ts,
        cluster,
        next((labels[k] for k in pool_labels if labels.get(k)), ""),
        meta["name"],
        labels.get(PRODUCT, ""),
        count,
        state=state,
        state_reason=reason,
        cpu_milli=amount("cpu", 1000),
        memory_bytes=amount("memory", 1),
        source=SOURCE,
    )
    return _NodeParse(record, replicas, _int_label(labels, MEMORY_MIB, problems), problems)


def _steps(
    v: PodView, wl: WorkloadView | None, gate_lifted: bool, deleted: bool, now: dt.datetime
) -> list[tuple[str, str, dt.datetime, str]]:
    """(step, event, ts, reason) of every lifecycle step the pod's state implies, in order."""
    started = v.running or v.started_at is not None
    submitted = v.created
    if (
        wl
        and wl.created
        and (wl.admitted_at is None or v.created - wl.admitted_at <= FIRST_PODS_WINDOW)
    ):
        submitted = min(submitted, wl.created)
    steps = [("submitted", "submitted", submitted, "")]
    if wl and wl.admitted:
        why = f"ClusterQueue {wl.cluster_queue}" if wl.cluster_queue else ""
        steps.append(("admitted", "admitted", max(wl.admitted_at or now, submitted), why))
    elif v.scheduled or gate_lifted or started:
        steps.append(("admitted", "admitted", v.scheduled_at or v.started_at or now, ""))
    if started:
        steps.append(("started", "started", v.started_at or now, ""))
    end = _ending(v, wl, started, deleted, now)
    return [*steps, ("end", *end)] if end else steps


def _ending(
    v: PodView, wl: WorkloadView | None, started: bool, deleted: bool, now: dt.datetime
) -> tuple[str, dt.datetime, str] | None:
    """The terminal event, time and reason, or None while the pod is still alive."""
    if v.phase == "Succeeded":
        return "finished", v.ended_at or now, ""
    if v.phase != "Failed" and not deleted:
        return None
    ts = v.ended_at or now
    if v.disruption:
        return ("preempted" if "preempt" in v.disruption.lower() else "evicted"), ts, v.disruption
    if wl and wl.eviction and (wl.eviction[2] is None or wl.eviction[2] >= v.created):
        return wl.eviction[0], ts, wl.eviction[1]
    if v.status_reason == "Evicted":
        return "evicted", ts, "Evicted"
    if v.phase == "Failed":
        return "failed", ts, v.failure or "Failed"
    return "cancelled", now, "deleted while running" if started else "deleted while pending"


def _gpu_amount(v: PodView, replicas: int) -> tuple[float, float]:
    """(gpus_requested in GPU-equivalents, share of one GPU each unit holds)."""
    parts = [
        (v.whole_gpus, 1.0),
        *((n, mig_fraction(p)) for p, n in v.mig),
        (v.shared_gpus, 1.0 / max(replicas, 1)),
    ]
    return round(sum(n * f for n, f in parts), 6), next((f for n, f in parts if n), 1.0)


def _pod_keys(v: PodView) -> list[str]:
    keys = [f"n:{v.namespace}/{v.workload_name}"] if v.workload_name else []
    return keys + ([f"u:{v.owner_uid}"] if v.owner_uid else []) + [f"u:{v.uid}"]


def _wl_keys(wl: WorkloadView) -> list[str]:
    return [f"n:{wl.namespace}/{wl.name}", *(f"u:{u}" for u in wl.job_uids)]


def _ident(kind: str, obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return ""
    if kind == "pods":
        return str(meta.get("uid") or "")
    return (
        str(meta.get("name") or "")
        if kind == "nodes"
        else (f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    )


def _rv(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


@dataclasses.dataclass
class KubernetesStats:
    """Counters for tests, benchmarks and the agent's metrics (updated without a lock)."""

    events: int = 0  # watch events applied
    lists: int = 0  # complete lists (the first, relists, polls)
    relists_410: int = 0  # relists forced by 410 Gone
    reconnects: int = 0  # watches resumed after an error or a dropped connection
    rejects: int = 0
    sink_errors: int = 0


@dataclasses.dataclass
class _Track:
    view: PodView
    tenant: str
    done: set[str]  # lifecycle steps emitted: submitted, admitted, started, end
    gated_seen: bool
    started_at: dt.datetime | None = None


@dataclasses.dataclass
class _Out:
    nodes: list[NodeInventory] = dataclasses.field(default_factory=list)
    gpus: list[GpuInventory] = dataclasses.field(default_factory=list)
    events: list[JobEvent] = dataclasses.field(default_factory=list)
    rejects: list[Reject] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.gpus or self.events or self.rejects)

    def batch(self) -> Batch:
        return Batch(
            gpus=tuple(self.gpus),
            nodes=tuple(self.nodes),
            job_events=tuple(self.events),
            rejects=tuple(self.rejects),
        )


class _Kind(NamedTuple):
    name: str  # nodes, workloads, pods
    call: Callable[..., Any]  # lists (and, through Watch, watches) this kind


def _raw(list_fn: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """``list_fn`` bound to ``args``, for ``Watch.stream`` to hand back plain dicts.

    ``Watch`` finds the model to decode events into from the function's return annotation or
    docstring; a function with neither gets each event's object as the dict the server sent.
    That is faster than the client's models and lets a malformed object reach the reader (and
    become a Reject) instead of failing the stream.
    """

    def call(**kwargs: Any) -> Any:
        return list_fn(*args, **kwargs)

    return call


class KubernetesCollector:
    """Pods, nodes and Kueue Workloads of one cluster → batches of job events and inventory.

    ``run`` lists each kind (nodes, Workloads, pods: in that order, so that pods find their node
    and Workload), then watches each from its list's resourceVersion in a thread of its own,
    remembering the resourceVersion of every event and bookmark. A dropped connection (urllib3
    ProtocolError, reset, read timeout) or an ended stream resumes from there, after a bounded
    exponential backoff with jitter while it keeps failing; 410 Gone (HTTP, or an ERROR event)
    relists and reconciles. Kueue is optional: a 404 or 403 on its list means not installed or
    not allowed, and the collector goes on without Workloads, looking again every
    ``kueue_recheck_s``. ``poll_once`` only lists (``--once``, pull-style pipelines; ``collect``
    is the pipeline's ``Source`` spelling of it). Use either ``run`` or polling, not both.

    ``api_client`` (``kubernetes.client.ApiClient``) is built at the edge from a kubeconfig or
    the in-cluster config, and closed by its owner. The sink gets one batch per list and per
    watch event that produced records, in order; it should not raise (an exception is logged,
    counted in ``stats.sink_errors``, and that batch is lost).
    """

    name = "kubernetes"

    def __init__(
        self,
        api_client: client.ApiClient,
        cluster: str,
        tenant_mapper: TenantMapper,
        *,
        user_keys: Sequence[str] = USER_KEYS,
        pool_labels: Sequence[str] = POOL_LABELS,
        gpu_pods_only: bool = True,
        kueue: bool = True,
        synthesize_gpus: bool = False,
        shared_gpu_replicas: int = 1,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        request_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        kueue_recheck_s: float = 300.0,
        clock: Callable[[], dt.datetime] = _utcnow,
    ):
        core = client.CoreV1Api(api_client)
        self._kinds = [_Kind("nodes", _raw(core.list_node))]
        if kueue:
            custom = client.CustomObjectsApi(api_client)
            self._kinds.append(_Kind("workloads", _raw(custom.list_cluster_custom_object, *KUEUE)))
        self._kinds.append(_Kind("pods", _raw(core.list_pod_for_all_namespaces)))
        self.cluster, self.tenants, self.clock = cluster, tenant_mapper, clock
        self.user_keys, self.pool_labels = tuple(user_keys), tuple(pool_labels)
        self.gpu_pods_only, self.synthesize_gpus = gpu_pods_only, synthesize_gpus
        self.shared_gpu_replicas, self.page_size = shared_gpu_replicas, page_size
        self.watch_timeout_s, self.request_timeout_s = watch_timeout_s, request_timeout_s
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self.kueue_recheck_s = kueue_recheck_s
        self.stats = KubernetesStats()
        self._lock = threading.RLock()  # guards the state below and orders calls to the sink
        self._pods: dict[str, _Track] = {}
        self._pod_index: dict[str, set[str]] = {}  # association key -> pod UIDs
        self._workloads: dict[str, WorkloadView] = {}  # "namespace/name" -> workload
        self._wl_index: dict[str, WorkloadView] = {}  # association key -> workload
        self._nodes: dict[str, _NodeParse] = {}
        self._rejected: dict[tuple[str, str, str], str] = {}  # (kind, object, field) -> value
        self._rvs: dict[str, str | None] = {}  # kind -> resourceVersion to watch from
        self._watches: dict[str, watch.Watch] = {}

    # -- entry points ---------------------------------------------------------------------------
    def poll_once(self) -> Batch:
        """List nodes, Workloads and pods once; the transitions since the last poll."""
        out = _Out()
        with self._lock:
            for kind in self._kinds:
                try:
                    items, _ = self._list(kind)
                except ApiException as exc:
                    if self._optional_missing(kind, exc):
                        continue
                    raise KubernetesError(
                        f"listing {kind.name} failed: HTTP {exc.status} {exc.reason}; check the "
                        "API server address and that the service account may list pods, nodes "
                        "and kueue.x-k8s.io workloads"
                    ) from exc
                except Exception as exc:
                    raise KubernetesError(
                        f"listing {kind.name} failed: {exc}; is the API server reachable?"
                    ) from exc
                self._sync(kind.name, items, POLL_GAP_REASON, out)
        return out.batch()

    def collect(self, now: dt.datetime) -> Batch:
        """``poll_once`` for the pipeline's ``Source`` protocol (``now`` is not needed)."""
        return self.poll_once()

    def run(self, stop_event: threading.Event, sink: Callable[[Batch], None]) -> None:
        """List, then watch every kind until ``stop_event`` is set; hand batches to ``sink``."""
        for kind in self._kinds:
            try:
                self._relist(kind, sink, GAP_REASON)
            except ApiException as exc:
                if not self._optional_missing(kind, exc):
                    log.warning("listing %s failed (HTTP %s); will retry", kind.name, exc.status)
            except Exception as exc:
                log.warning("listing %s failed (%s); will retry", kind.name, exc)
        threads = [
            threading.Thread(
                target=self._reflect,
                args=(kind, stop_event, sink),
                name=f"gpuledger-k8s-{kind.name}",
                daemon=True,
            )
            for kind in self._kinds
        ]
        for thread in threads:
            thread.start()
        try:
            stop_event.wait()
        finally:
            stop_event.set()
            for thread, kind in zip(threads, self._kinds, strict=True):
                while thread.is_alive():  # unblock a watch stuck reading its socket
                    if (w := self._watches.get(kind.name)) is not None:
                        w.stop()
                    thread.join(0.05)

    # -- list and watch -------------------------------------------------------------------------
    def _optional_missing(self, kind: _Kind, exc: ApiException) -> bool:
        if kind.name != "workloads" or exc.status not in (403, 404):
            return False
        log.info("Kueue Workloads not listable (HTTP %s): going on without them", exc.status)
        self._rvs[kind.name] = None
        return True

    def _list(self, kind: _Kind) -> tuple[list[Any], str]:
        """All objects of a kind (page by page) and the list's resourceVersion."""
        items: list[Any] = []
        token = ""
        while True:
            kwargs: dict[str, Any] = {
                "limit": self.page_size,
                "_preload_content": False,
                "_request_timeout": self.request_timeout_s,
            }
            if token:
                kwargs["_continue"] = token
            resp = kind.call(**kwargs)
            try:
                body = json.loads(resp.data)
            finally:
                resp.release_conn()
            if not isinstance(body, dict) or not isinstance(body.get("items"), list):
                raise KubernetesError(f"listing {kind.name}: the reply has no items")
            meta = _map(body.get("metadata"), "metadata")
            items.extend(body["items"])
            token = str(meta.get("continue") or "")
            if not token:
                self.stats.lists += 1
                return items, str(meta.get("resourceVersion") or "")

    def _relist(self, kind: _Kind, sink: Callable[[Batch], None], gap_reason: str) -> None:
        items, rv = self._list(kind)
        out = _Out()
        with self._lock:
            self._sync(kind.name, items, gap_reason, out)
            self._emit(sink, out)
        self._rvs[kind.name] = rv

    def _reflect(self, kind: _Kind, stop: threading.Event, sink: Callable[[Batch], None]) -> None:
        """One kind's loop: (re)list when needed, watch, resume or back off; never raises."""
        failures = 0
        if kind.name == "workloads" and kind.name in self._rvs and self._rvs[kind.name] is None:
            stop.wait(self.kueue_recheck_s)  # run() just found Kueue missing: look again later
        while not stop.is_set():
            began = time.monotonic()
            try:
                if self._rvs.get(kind.name) is None:
                    self._relist(kind, sink, GAP_REASON)
                if self._watch(kind, stop, sink) or time.monotonic() - began > 1.0:
                    failures = 0
                    continue
                failures += 1  # a stream that ends at once, empty: do not spin
            except ApiException as exc:
                if exc.status == 410:  # relist now; back off only if it keeps happening
                    log.info(
                        "%s: resourceVersion %s is gone (410); relisting",
                        kind.name,
                        self._rvs.get(kind.name),
                    )
                    self.stats.relists_410 += 1
                    self._rvs[kind.name] = None
                    stop.wait(self._backoff(failures))
                    failures += 1
                    continue
                if self._optional_missing(kind, exc):
                    stop.wait(self.kueue_recheck_s)
                    continue
                failures += 1
                log.warning("%s: HTTP %s %s", kind.name, exc.status, exc.reason)
            except Exception as exc:  # dropped connection, read timeout, unreadable reply
                if stop.is_set():
                    break
                failures += 1
                self.stats.reconnects += 1
                log.info(
                    "%s: watch interrupted (%s); resuming from %s",
                    kind.name,
                    type(exc).__name__,
                    self._rvs.get(kind.name),
                )
            stop.wait(self._backoff(failures))

    def _backoff(self, failures: int) -> float:
        """Exponential from ``backoff_initial_s``, capped at ``backoff_max_s``, with jitter."""
        if failures <= 0:
            return 0.0
        ceiling = min(self.backoff_max_s, self.backoff_initial_s * 2 ** min(failures - 1, 30))
        return ceiling * random.uniform(0.5, 1.0)

    def _watch(self, kind: _Kind, stop: threading.Event, sink: Callable[[Batch], None]) -> int:
        """Watch from the remembered resourceVersion until the stream ends; events applied."""
        w = self._watches[kind.name] = watch.Watch()
        stream = w.stream(
            kind.call,
            resource_version=self._rvs.get(kind.name) or None,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            _request_timeout=(
                self.request_timeout_s,
                self.watch_timeout_s + self.request_timeout_s,
            ),
        )
        applied = 0
        try:
            for event in stream:
                if stop.is_set():
                    break
                etype = event.get("type") if isinstance(event, dict) else None
                obj = event.get("object") if isinstance(event, dict) else None
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    out = _Out()
                    with self._lock:
                        self._apply(kind.name, etype, obj, out)
                        self._emit(sink, out)
                    applied += 1
                    self.stats.events += 1
                elif etype != "BOOKMARK":
                    log.warning("%s: ignoring a watch event of type %r", kind.name, etype)
                if rv := _rv(obj):
                    self._rvs[kind.name] = rv
        finally:
            stream.close()
        return applied

    def _emit(self, sink: Callable[[Batch], None], out: _Out) -> None:
        if not out:
            return
        try:
            sink(out.batch())
        except Exception:
            self.stats.sink_errors += 1
            log.exception("the sink failed; a batch of %d records is lost", len(out.batch()))

    # -- state ----------------------------------------------------------------------------------
    def _sync(self, kind: str, items: list[Any], gap_reason: str, out: _Out) -> None:
        """Apply a full list; what was known but is not listed any more was deleted meanwhile."""
        seen = {self._apply(kind, "ADDED", obj, out) for obj in items}
        if kind == "pods":
            for uid in [u for u in self._pods if u not in seen]:
                self._vanish(uid, gap_reason, out)
        elif kind == "nodes":
            for name in [n for n in self._nodes if n not in seen]:
                self._retire(name, self._nodes[name], gap_reason, out)
        else:
            for key in [k for k in self._workloads if k not in seen]:
                self._set_workload(key, None, out)

    def _apply(self, kind: str, etype: str, obj: Any, out: _Out) -> str:
        """Apply one object; its identity (pod UID, node name, ns/name; "" if unreadable)."""
        deleted = etype == "DELETED"
        try:
            if kind == "pods":
                self._on_pod(obj, deleted, out)
            elif kind == "nodes":
                self._on_node(obj, deleted, out)
            else:
                wl = parse_workload(obj)
                self._set_workload(f"{wl.namespace}/{wl.name}", None if deleted else wl, out)
        except _Bad as bad:
            self._reject(kind, obj, bad, out)
        except Exception as exc:  # a reader bug quarantines the object, never stops the watch
            log.exception("could not read a %s object", kind)
            self._reject(kind, obj, _Bad("", "", f"unreadable: {exc!r}"), out)
        return _ident(kind, obj)

    def _reject(self, kind: str, obj: Any, bad: _Bad, out: _Out) -> None:
        """Quarantine a bad value once per object and field (relists and heartbeats repeat it)."""
        key = (kind, _ident(kind, obj), bad.field)
        if key[1] and self._rejected.get(key) == bad.value:
            return
        if len(self._rejected) > 100_000:
            self._rejected.clear()
        self._rejected[key] = bad.value
        self.stats.rejects += 1
        payload = json.dumps(obj, default=str, separators=(",", ":"))[:65536]
        out.rejects.append(
            Reject(
                f"{SOURCE}:{self.cluster}/{kind}",
                _RECORD_KIND[kind],
                bad.field,
                bad.value[:500],
                bad.reason,
                payload,
            )
        )

    def _on_pod(self, obj: Any, deleted: bool, out: _Out) -> None:
        v = parse_pod(obj, self.user_keys)
        track = self._pods.get(v.uid)
        if track is None:
            if self.gpu_pods_only and not (v.whole_gpus or v.shared_gpus or v.mig):
                return
            tenant = self.tenants.resolve(namespace=v.namespace, labels=v.labels)
            track = self._pods[v.uid] = _Track(v, tenant, set(), v.gated)
        self._index(track.view, add=False)
        self._index(v, add=True)
        self._advance(track, v, deleted, out)
        if deleted:
            self._forget(v.uid)

    def _index(self, v: PodView, add: bool) -> None:
        for key in _pod_keys(v):
            uids = self._pod_index.setdefault(key, set())
            if add:
                uids.add(v.uid)
            else:
                uids.discard(v.uid)
                if not uids:
                    del self._pod_index[key]

    def _forget(self, uid: str) -> None:
        self._index(self._pods.pop(uid).view, add=False)

    def _workload_for(self, v: PodView) -> WorkloadView | None:
        return next((wl for key in _pod_keys(v) if (wl := self._wl_index.get(key))), None)

    def _advance(self, t: _Track, v: PodView, deleted: bool, out: _Out) -> None:
        """Emit the lifecycle steps ``v`` implies that this pod has not emitted yet."""
        gate_lifted = t.gated_seen and not v.gated
        t.view, t.gated_seen = v, t.gated_seen or v.gated
        if "end" in t.done:
            return
        wl = self._workload_for(v)
        for step, event, ts, reason in _steps(v, wl, gate_lifted, deleted, self.clock()):
            if step not in t.done:
                t.done.add(step)
                if step == "started":
                    t.started_at = ts
                out.events.append(self._job_event(t, wl, event, ts, reason))

    def _vanish(self, uid: str, reason: str, out: _Out) -> None:
        t = self._pods[uid]
        if "end" not in t.done:
            t.done.add("end")
            event = "finished" if "started" in t.done else "cancelled"
            out.events.append(
                self._job_event(t, self._workload_for(t.view), event, self.clock(), reason)
            )
        self._forget(uid)

    def _job_event(
        self, t: _Track, wl: WorkloadView | None, event: str, ts: dt.datetime, reason: str
    ) -> JobEvent:
        v, node = t.view, self._nodes.get(t.view.node)
        gpus, fraction = _gpu_amount(
            v, (node.replicas if node and node.replicas else self.shared_gpu_replicas)
        )
        org, project = TenantMapper.split(t.tenant)
        return JobEvent(
            ts=ts,
            cluster=self.cluster,
            job_id=v.uid,
            event=event,
            name=v.name,
            tenant=t.tenant,
            org=org,
            project=project,
            user=v.user,
            namespace=v.namespace,
            pool=node.record.pool if node else "",
            queue=v.queue or (wl.queue if wl else ""),
            priority=v.priority or (wl.priority or 0 if wl else 0),
            priority_class=v.priority_class or (wl.priority_class if wl else ""),
            workload_type=v.workload_type,
            gpu_model=v.gpu_model,
            gpus_requested=gpus,
            gpu_fraction=fraction,
            node=v.node,
            started_at=t.started_at if event in TERMINAL_EVENTS else None,
            reason=reason,
            source=SOURCE,
        )

    def _set_workload(self, key: str, wl: WorkloadView | None, out: _Out) -> None:
        """Store (or drop) a Workload and re-derive the events of the pods it belongs to."""
        old = self._workloads.pop(key, None)
        for k in _wl_keys(old) if old else ():
            self._wl_index.pop(k, None)
        if wl is not None:
            self._workloads[key] = wl
            self._wl_index.update(dict.fromkeys(_wl_keys(wl), wl))
        keys = {k for w in (old, wl) if w is not None for k in _wl_keys(w)}
        for uid in sorted({u for k in keys for u in self._pod_index.get(k, ())}):
            self._advance(self._pods[uid], self._pods[uid].view, False, out)

    def _on_node(self, obj: Any, deleted: bool, out: _Out) -> None:
        now = self.clock()
        parsed = parse_node(obj, self.cluster, now, self.pool_labels)
        for bad in parsed.problems:
            self._reject("nodes", obj, bad, out)
        name, old = parsed.record.node, self._nodes.get(parsed.record.node)
        if deleted:
            self._retire(name, old or parsed, "node deleted", out)
            return
        self._nodes[name] = parsed
        if (
            old is None
            or old.record._replace(ts=now) != parsed.record
            or (old.memory_mib != parsed.memory_mib)
        ):
            out.nodes.append(parsed.record)
            out.gpus.extend(self._gpus(parsed))

    def _retire(self, name: str, last: _NodeParse, reason: str, out: _Out) -> None:
        self._nodes.pop(name, None)
        record = last.record._replace(ts=self.clock(), state="retired", state_reason=reason)
        out.nodes.append(record)
        out.gpus.extend(self._gpus(last._replace(record=record)))

    def _gpus(self, p: _NodeParse) -> list[GpuInventory]:
        """Placeholder GPU rows (``synthesize_gpus``): the API knows counts, not UUIDs."""
        if not self.synthesize_gpus:
            return []
        r = p.record
        health = {"ready": "healthy", "down": "down", "retired": "retired"}.get(
            r.state, "healthy" if r.state_reason == "cordoned" else "unhealthy"
        )
        memory = p.memory_mib * 2**20 if p.memory_mib else None
        return [
            GpuInventory(
                r.ts,
                r.cluster,
                r.pool,
                r.node,
                f"k8s:{r.node}/gpu{i}",
                i,
                r.gpu_model,
                memory_total_bytes=memory,
                health=health,
                health_reason=r.state_reason,
                source=SOURCE,
            )
            for i in range(r.gpu_count)
        ]
