"""Kubernetes admission review (``admission.k8s.io/v1``) for GPU workloads: allow, warn, deny
or lower the Kueue priority of a tenant's next GPU job while GPUs it already holds sit idle.

The decision reads an in-memory :class:`~scheduler_hooks.snapshot.Snapshot` only (never the
warehouse), so the API server gets its answer in milliseconds; without a fresh snapshot the
review fails open (allowed, with a warning), as a webhook with ``failurePolicy: Ignore``
would. The request and response shapes are those of the Kubernetes documentation: the
request's ``uid`` is echoed, a patch is base64 JSONPatch with ``patchType: JSONPatch``,
``warnings`` are plain strings, a denial carries ``status.code`` and ``status.message``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gpuledger_errors import InputError

if TYPE_CHECKING:  # the snapshot's module reads the warehouse: settings checks need none of it
    from scheduler_hooks.snapshot import Snapshot, TenantState

#: What a tenant's policy may be.
POLICIES = ("allow", "warn", "deny", "deprioritise")
#: The label Kueue reads a Job's or Workload's priority class from.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
_KINDS = {("", "Pod"): "Pod", ("batch", "Job"): "Job", ("kueue.x-k8s.io", "Workload"): "Workload"}
_QUANTITY = re.compile(r"^\d+$")
_WARNING_MAX = 240  # the API server shows warnings to kubectl users: keep each one short


class ReviewError(InputError):
    """A request that is not an AdmissionReview this webhook can answer (answered 400)."""


@dataclasses.dataclass(frozen=True)
class AdmissionRules:
    """The policies, from settings: a default, per-tenant overrides (an org covers its
    projects; the most specific wins), tenants exempt from any check, the Kueue priority
    class a deprioritised job gets when the priority feedback names none, the GPU resource
    names counted, and how old a snapshot may be before the webhook fails open."""

    default: str = "warn"
    tenants: Mapping[str, str] = dataclasses.field(default_factory=dict)
    exempt: frozenset[str] = frozenset()
    low_priority_class: str = "low"
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    max_age_s: float = 300.0

    def policy_of(self, tenant: str) -> str:
        """The policy for ``tenant`` ("org/project"): its own, its org's, or the default."""
        if tenant in self.exempt or tenant.split("/")[0] in self.exempt:
            return "allow"
        return self.tenants.get(tenant) or self.tenants.get(tenant.split("/")[0]) or self.default


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the webhook answered and why, for the response and for the audit log."""

    uid: str
    allowed: bool
    action: str  # allow | warn | deny | deprioritise | fail_open | not_gpu | no_tenant
    tenant: str
    subject: str  # "Job team-a/train-7"
    actor: str  # who submitted it (request.userInfo.username)
    warnings: tuple[str, ...] = ()
    message: str = ""
    patch: tuple[dict[str, Any], ...] = ()

    def response(self) -> dict[str, Any]:
        """The AdmissionReview to send back."""
        answer: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if self.warnings:
            answer["warnings"] = list(self.warnings)
        if not self.allowed:
            answer["status"] = {"code": 403, "reason": "Forbidden", "message": self.message}
        if self.patch:
            answer["patchType"] = "JSONPatch"
            answer["patch"] = base64.b64encode(json.dumps(list(self.patch)).encode()).decode()
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}


def parse_review(body: bytes) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview, checked for what the decision reads."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ReviewError(f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview":
        raise ReviewError("the body is not an AdmissionReview (kind must be AdmissionReview)")
    if doc.get("apiVersion") != "admission.k8s.io/v1":
        raise ReviewError(
            f"apiVersion {doc.get('apiVersion')!r} is not admission.k8s.io/v1: set "
            "admissionReviewVersions: [v1] in the webhook configuration"
        )
    request = doc.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ReviewError("request.uid is missing: the API server always sends one")
    for field in ("kind", "object"):
        if request.get(field) is not None and not isinstance(request.get(field), dict):
            raise ReviewError(f"request.{field} must be an object")
    return request


def review(
    request: Mapping[str, Any],
    snapshot: Snapshot | None,
    rules: AdmissionRules,
    *,
    now_s: float,
) -> Decision:
    """Decide on one admission ``request`` (see :func:`parse_review`) at ``now_s`` (epoch
    seconds) from ``snapshot``."""
    kind = _obj(request, "kind")
    found = _KINDS.get((str(kind.get("group", "")), str(kind.get("kind", ""))))
    obj = _obj(request, "object")
    meta = _obj(obj, "metadata")
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    name = str(meta.get("name") or meta.get("generateName") or request.get("name") or "")
    subject = f"{found or kind.get('kind', '?')} {namespace}/{name}"
    actor = str(_obj(request, "userInfo").get("username") or "")
    base = {"uid": request["uid"], "subject": subject, "actor": actor}
    if found is None or request.get("operation", "CREATE") != "CREATE":
        return Decision(allowed=True, action="not_gpu", tenant="", **base)
    if not gpus_requested(found, obj, rules.gpu_resources):
        return Decision(allowed=True, action="not_gpu", tenant="", **base)
    if snapshot is None or now_s - snapshot.built_at_s > rules.max_age_s:
        age = "none yet" if snapshot is None else f"{now_s - snapshot.built_at_s:.0f} s old"
        return Decision(
            allowed=True,
            action="fail_open",
            tenant="",
            warnings=(f"gpuledger: allowed without a check: its view of idle GPUs is {age}",),
            **base,
        )
    labels = _obj(meta, "labels")
    tenant = snapshot.tenant_of(namespace, {str(k): str(v) for k, v in labels.items()})
    if not tenant:
        return Decision(allowed=True, action="no_tenant", tenant="", **base)
    state = snapshot.tenants.get(tenant)
    policy = rules.policy_of(tenant)
    if policy == "allow" or state is None or not state.idle:
        return Decision(allowed=True, action="allow", tenant=tenant, **base)
    said = _idle_words(tenant, state)
    if policy == "deny":
        return Decision(
            allowed=False,
            action="deny",
            tenant=tenant,
            message=f"{said}. Free them first (end or scale down those jobs), then submit again.",
            **base,
        )
    if policy == "deprioritise" and found != "Pod":
        target = state.priority_class or rules.low_priority_class
        return Decision(
            allowed=True,
            action="deprioritise",
            tenant=tenant,
            warnings=(_short(f"{said}: this job's Kueue priority class is set to {target}"),),
            patch=(_label_patch(meta, target),),
            **base,
        )
    # warn, and a bare Pod under deprioritise: its priorityClassName is already resolved by the
    # built-in Priority admission plugin, so changing it here would do nothing good
    return Decision(allowed=True, action="warn", tenant=tenant, warnings=(_short(said),), **base)


def gpus_requested(kind: str, obj: Mapping[str, Any], resources: Iterable[str]) -> float:
    """How many GPUs ``obj`` asks for (per pod times pods, for a Workload's pod sets)."""
    names = tuple(resources)
    spec = _obj(obj, "spec")
    if kind == "Pod":
        return _pod_gpus(spec, names)
    if kind == "Job":
        template = _obj(spec, "template")
        pods = spec.get("parallelism", 1)
        per_pod = _pod_gpus(_obj(template, "spec"), names)
        return per_pod * (pods if isinstance(pods, int) and pods > 0 else 1)
    total = 0.0
    for pod_set in spec.get("podSets") or []:
        if isinstance(pod_set, dict):
            template = _obj(pod_set, "template")
            count = pod_set.get("count", 1)
            per_pod = _pod_gpus(_obj(template, "spec"), names)
            total += per_pod * (count if isinstance(count, int) and count > 0 else 1)
    return total


def _pod_gpus(pod_spec: Any, names: tuple[str, ...]) -> float:
    if not isinstance(pod_spec, dict):
        return 0.0
    total = 0.0
    for group in ("containers", "initContainers"):
        for c in pod_spec.get(group) or []:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            for part in ("limits", "requests"):
                asked = _obj(res, part)
                got = sum((_count(v) for k, v in asked.items() if _is_gpu(str(k), names)), 0.0)
                if got:
                    total += got
                    break  # limits and requests name the same GPUs: count them once
    return total


def _obj(parent: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` when it is an object, else an empty one (a review is untrusted JSON)."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _is_gpu(resource: str, names: tuple[str, ...]) -> bool:
    return any(resource == n or (n.endswith("*") and resource.startswith(n[:-1])) for n in names)


def _count(value: Any) -> float:
    text = str(value).strip()
    return float(text) if _QUANTITY.match(text) else 0.0


def _idle_words(tenant: str, state: TenantState) -> str:
    gpus = ", ".join(
        f"{i.gpu_uuid} on {i.node} (job {i.job_id}, idle {i.idle_minutes:.0f} min)"
        for i in state.idle[:3]
    )
    more = f" and {len(state.idle) - 3} more" if len(state.idle) > 3 else ""
    return f"tenant {tenant} holds {len(state.idle)} idle GPU(s): {gpus}{more}"


def _short(text: str) -> str:
    return text if len(text) <= _WARNING_MAX else text[: _WARNING_MAX - 1] + "…"


def _label_patch(meta: Mapping[str, Any], value: str) -> dict[str, Any]:
    """The JSONPatch operation that sets the Kueue priority label (adding the labels map when
    the object has none; "~1" is how JSON Pointer writes the "/" in the label's name)."""
    if not isinstance(meta.get("labels"), dict):
        return {"op": "add", "path": "/metadata/labels", "value": {PRIORITY_LABEL: value}}
    return {
        "op": "add",
        "path": "/metadata/labels/" + PRIORITY_LABEL.replace("/", "~1"),
        "value": value,
    }
