"""What Kubernetes pods, nodes and Kueue Workloads mean: pure readers from API objects to views.

:class:`~collector.kubernetes.collector.KubernetesCollector` lists and watches the objects (through
the official ``kubernetes`` client); this module decides what they mean, with no I/O and no state.
The decisions a reader of the ledger needs to know:

* **One job per pod**: ``job_id`` is the pod UID, ``name`` the pod name, ``attempt`` 0. The pod
  is what holds GPUs on one node, and the GPU ↔ workload mapping (cgroups, NVML, dcgm) names
  GPU users by pod UID, so each pod is one allocation interval. A PyTorchJob with 4 workers is
  4 jobs sharing a name prefix; a pod re-created by a Job retry or a Kueue requeue has a new
  UID, hence is a new job rather than a new attempt. The exception: a Kueue Workload the
  collector saw waiting without pods is reported as the pods it asks for, and its pods continue
  those jobs and attempts (``collector.kubernetes.queue``).
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

import datetime as dt
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from collector.records import WORKLOAD_TYPES, NodeInventory

__all__ = [
    "POOL_LABELS",
    "USER_KEYS",
    "PodSetView",
    "PodView",
    "WorkloadView",
    "mig_fraction",
    "parse_node",
    "parse_pod",
    "parse_quantity",
    "parse_workload",
    "workload_type",
]

SOURCE = "kubernetes"
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
# Pods created this soon after their Workload's admission are the ones it started (their wait
# began with the Workload); a later pod, such as a Job's retry, waits from its own creation.
FIRST_PODS_WINDOW = dt.timedelta(minutes=10)


class _Bad(Exception):
    """One field of an object that cannot be read; becomes a ``Reject``."""

    def __init__(self, field: str, value: str, reason: str):
        super().__init__(f"{field}={value!r}: {reason}")
        self.field, self.value, self.reason = field, value, reason


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


def _pod_gpus(spec: dict[str, Any], path: str = "spec") -> dict[str, int]:
    """Effective GPU requests: the containers' sum, or an init container's if larger."""
    total: dict[str, int] = {}
    for i, c in enumerate(_items(spec.get("containers"))):
        for name, n in _container_gpus(c, f"{path}.containers[{i}]").items():
            total[name] = total.get(name, 0) + n
    for i, c in enumerate(_items(spec.get("initContainers"))):
        for name, n in _container_gpus(c, f"{path}.initContainers[{i}]").items():
            total[name] = max(total.get(name, 0), n)
    return total


class _Shape(NamedTuple):
    whole_gpus: int
    shared_gpus: int
    mig: tuple[tuple[str, int], ...]
    gpu_model: str


def _shape(spec: dict[str, Any], path: str = "spec") -> _Shape:
    """What a pod spec asks for: whole, shared and MIG GPUs, and the model (GFD's naming)."""
    gpus = _pod_gpus(spec, path)
    mig = tuple(sorted((k[len(MIG) :], n) for k, n in gpus.items() if k.startswith(MIG) and n))
    product = str(_map(spec.get("nodeSelector"), f"{path}.nodeSelector").get(PRODUCT, ""))
    if mig and not gpus.get(GPU):
        product = f"{product}-MIG-{mig[0][0]}" if product else f"MIG-{mig[0][0]}"
    return _Shape(gpus.get(GPU, 0), gpus.get(SHARED, 0), mig, product)


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
    shape = _shape(spec)
    priority = spec.get("priority") or 0
    if not isinstance(priority, int):
        raise _Bad("spec.priority", str(priority), "priority must be an integer")
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
        gpu_model=shape.gpu_model,
        whole_gpus=shape.whole_gpus,
        shared_gpus=shape.shared_gpus,
        mig=shape.mig,
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


class PodSetView(NamedTuple):
    """One podSet of a Workload: ``pods`` pods (its count) made from one template."""

    name: str
    pods: int
    labels: dict[str, str]  # the template's: tenant rules see what the pods will carry
    user: str
    workload_type: str
    shape: _Shape  # per pod


class WorkloadView(NamedTuple):
    """What a Kueue Workload adds to its pods: queueing, admission and eviction.

    While it waits without pods (see ``collector.kubernetes.queue``) it is the job itself: its pod
    sets say what the pods will ask for.
    """

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
    uid: str
    owner_kind: str  # the job kind that owns it (Job, PyTorchJob, Pod, ...)
    owner_name: str
    pod_sets: tuple[PodSetView, ...]
    finished: str  # the Finished condition's reason (Succeeded, Failed, ...); "" until then
    finished_at: dt.datetime | None


def _pod_set(ps: dict[str, Any], i: int, owner_kind: str, user_keys: Sequence[str]) -> PodSetView:
    path = f"spec.podSets[{i}]"
    count = ps.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise _Bad(f"{path}.count", str(count), "a pod count must be a non-negative integer")
    template = _map(ps.get("template"), f"{path}.template")
    meta = _map(template.get("metadata"), f"{path}.template.metadata")
    labels, annotations = _labels(meta), _labels(meta, "annotations")
    return PodSetView(
        name=str(ps.get("name") or f"podset{i}"),
        pods=count,
        labels=labels,
        user=next((m[k] for k in user_keys for m in (labels, annotations) if m.get(k)), ""),
        workload_type=workload_type(labels, owner_kind),
        shape=_shape(_map(template.get("spec"), f"{path}.template.spec"), f"{path}.template.spec"),
    )


def parse_workload(obj: Any, user_keys: Sequence[str] = USER_KEYS) -> WorkloadView:
    """Read a kueue.x-k8s.io Workload (v1beta2, or v1beta1 from an older Kueue); raises
    ``_Bad`` on malformed input."""
    meta = _meta(obj, "workload")
    spec, status = _map(obj.get("spec"), "spec"), _map(obj.get("status"), "status")
    conditions = _items(status.get("conditions"))
    owners = _items(meta.get("ownerReferences"))
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    uids = [_labels(meta).get(JOB_UID_LABEL, "")]
    uids += [str(o.get("uid", "")) for o in owners]
    admitted = _true(conditions, "Admitted")
    evicted, preempted = _true(conditions, "Evicted"), _true(conditions, "Preempted")
    finished = _true(conditions, "Finished")
    eviction = None
    if evicted or preempted:
        cond = preempted or evicted or {}
        kind = "preempted" if preempted or cond.get("reason") == "Preempted" else "evicted"
        since = _time((evicted or cond).get("lastTransitionTime"), "status.conditions")
        eviction = (kind, f"kueue:{cond.get('reason') or 'Evicted'}", since)
    priority = spec.get("priority")
    owner_kind = str(owner.get("kind") or "")
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
        # v1beta2 names the class in priorityClassRef; v1beta1 in priorityClassName
        priority_class=str(
            _map(spec.get("priorityClassRef"), "spec.priorityClassRef").get("name")
            or spec.get("priorityClassName")
            or ""
        ),
        admitted=admitted is not None,
        admitted_at=_time((admitted or {}).get("lastTransitionTime"), "status.conditions"),
        eviction=eviction,
        uid=str(meta.get("uid") or ""),
        owner_kind=owner_kind,
        owner_name=str(owner.get("name") or ""),
        pod_sets=tuple(
            _pod_set(ps, i, owner_kind, user_keys)
            for i, ps in enumerate(_items(spec.get("podSets")))
        ),
        finished=str((finished or {}).get("reason") or ("Finished" if finished else "")),
        finished_at=_time((finished or {}).get("lastTransitionTime"), "status.conditions"),
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
