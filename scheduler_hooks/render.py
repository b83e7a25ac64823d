"""Advice rendered for the scheduler that consumes it: Kueue ClusterQueue and Volcano Queue
JSON merge patches (with the jobs to preempt: Kueue Workloads deactivated, Volcano pods evicted),
or Slurm commands.

Each renderer takes advice as JSON (:meth:`Recommendation.to_json`, plus ``advice_id`` once
proposed) and the scheduler's objects as they are now (read from the API server, or made from
the warehouse's quotas by :func:`cluster_queues_from` when no cluster is at hand), and patches
only what differs: an object whose fields already hold the advised values gets no patch.

Kueue (``kueue.x-k8s.io/v1beta2``; ``v1beta1`` on request): a borrowing or lending limit is the
GPU resource's ``borrowingLimit``/``lendingLimit`` in the tenant's ClusterQueue under the
pool's flavor, a weight is ``spec.fairSharing.weight``, and a reclaim turns on the lender's
``spec.preemption.reclaimWithinCohort``, and a job to preempt has its Workload deactivated
(``spec.active: false``, as ``kubectl kueue stop workload`` does): Kueue evicts it, suspends the
job and frees its quota at once, where evicting a pod would free nothing (the job makes a new
pod on the same admission); found at apply time from the pod's owners, and a pod Kueue does not
manage is evicted instead. A JSON merge patch replaces a list whole, so a change to one
resource carries ``spec.resourceGroups`` whole, as read. Volcano
(``scheduling.volcano.sh/v1beta1`` Queue, capacity and proportion plugins): a borrowing limit
caps ``spec.capability`` at guarantee + limit; a lending limit keeps
``spec.guarantee.resource`` (never lent) at guarantee - limit; ``spec.weight``;
``spec.reclaimable`` for a borrower that cannot be reclaimed from. Slurm: ``sacctmgr modify
account ... set GrpTRES=gres/gpu=N Fairshare=N``, ``scontrol requeue`` for idle jobs and
``scancel`` for interactive ones over their limit; Slurm accounts lend nothing, so a lending
limit renders as a comment.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler_hooks.policy import Names

KUEUE_GROUP = "kueue.x-k8s.io"
#: Kueue's label on a Workload: the UID of the job it stands for.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
VOLCANO_GROUP, VOLCANO_VERSION = "scheduling.volcano.sh", "v1beta1"
_QUANTITY = re.compile(r"^([0-9.]+)(m|k|Ki|M|Mi|G|Gi)?$")
_SUFFIX = {"m": 1e-3, "k": 1e3, "Ki": 1024, "M": 1e6, "Mi": 2**20, "G": 1e9, "Gi": 2**30}
_PREEMPTING = ("reclaim", "idle_limit", "interactive_limit")


def quantity(value: Any) -> float | None:
    """A Kubernetes quantity ("2", 2, "500m") as a number; None for none or a bad one."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    found = _QUANTITY.match(str(value).strip())
    return float(found[1]) * _SUFFIX.get(found[2] or "", 1) if found else None


def as_quantity(value: float) -> int | str:
    """A number as a quantity: a whole number as an integer, else its decimal text."""
    return int(value) if float(value).is_integer() else f"{value:g}"


def _item(advice: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"advice": [advice.get("advice_id") or advice["kind"]], **extra}


def evictions(advice: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A ``policy/v1`` Eviction of each pod the advice preempts."""
    return [
        {
            "advice": ids,
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "namespace": job["namespace"],
            "name": job["name"],
            "job_id": job_id,
        }
        for job_id, (job, ids) in _preempted(advice).items()
    ]


def _preempted(advice: Iterable[Mapping[str, Any]]) -> dict[str, tuple[dict[str, Any], list[Any]]]:
    """Each named pod the advice preempts, by job id: (the job, the advice naming it). Jobs
    without a pod name, from a source that does not name them, are left out."""
    out: dict[str, tuple[dict[str, Any], list[Any]]] = {}
    for a in advice:
        if a["kind"] not in _PREEMPTING:
            continue
        for job in a["jobs"]:
            if job["name"] and job["namespace"]:  # named by two advice: once, for both
                out.setdefault(job["job_id"], (dict(job), []))[1].extend(_item(a)["advice"])
    return out


# -- Kueue --------------------------------------------------------------------------------------
def deactivations(advice: Iterable[Mapping[str, Any]], names: Names) -> list[dict[str, Any]]:
    """The Workload of each pod the advice preempts, to deactivate (its name is found when it
    is applied, from the pod's owners)."""
    return [
        {
            "advice": ids,
            "apiVersion": f"{KUEUE_GROUP}/{names.kueue_version}",
            "kind": "Workload",
            "namespace": job["namespace"],
            "pod": job["name"],
            "job_id": job_id,
            "patch": {"spec": {"active": False}},
            "note": (
                f"the Workload that admitted pod {job['namespace']}/{job['name']}: Kueue evicts "
                "it and frees its quota (`kubectl kueue resume workload` queues it again); "
                "a pod Kueue does not manage is evicted instead"
            ),
        }
        for job_id, (job, ids) in _preempted(advice).items()
    ]


def cluster_queues_from(standings: Iterable[Mapping[str, Any]], names: Names) -> dict[str, Any]:
    """ClusterQueues as the warehouse's quotas describe them (the GPU resource only), for
    rendering without a cluster to read: each tenant's queue, one flavor per pool and model."""
    out: dict[str, Any] = {}
    for s in standings:
        if not s["has_quota"]:
            continue
        name = names.cluster_queue(s["tenant"])
        cq = out.setdefault(
            name,
            {
                "apiVersion": f"{KUEUE_GROUP}/{names.kueue_version}",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "resourceGroups": [{"coveredResources": [names.gpu_resource], "flavors": []}]
                },
            },
        )
        resource: dict[str, Any] = {
            "name": names.gpu_resource,
            "nominalQuota": as_quantity(s["guaranteed_gpus"]),
        }
        for field, key in (
            ("borrowingLimit", "borrow_limit_gpus"),
            ("lendingLimit", "lend_limit_gpus"),
        ):
            if s[key] is not None:
                resource[field] = as_quantity(s[key])
        cq["spec"]["resourceGroups"][0]["flavors"].append(
            {"name": names.flavor(s["pool"], s["gpu_model"]), "resources": [resource]}
        )
    return out


def kueue_resource(spec: Mapping[str, Any], flavor: str, resource: str) -> dict[str, Any] | None:
    """The entry of ``resource`` under ``flavor`` in a ClusterQueue's spec, if any."""
    for group in spec.get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            if f.get("name") == flavor:
                for r in f.get("resources") or []:
                    if r.get("name") == resource:
                        return r  # type: ignore[no-any-return]
    return None


def _kueue_desired(spec: dict[str, Any], a: Mapping[str, Any], names: Names) -> str | None:
    """Set in ``spec`` what advice ``a`` asks of its ClusterQueue; a note when it cannot."""
    change = a["change"]
    field = change.get("field")
    if field in ("borrow_limit_gpus", "lend_limit_gpus"):
        flavor = names.flavor(a["pool"], a["gpu_model"])
        res = kueue_resource(spec, flavor, names.gpu_resource)
        if res is None:
            return f"no {names.gpu_resource} under flavor {flavor}: nothing to set"
        key = "borrowingLimit" if field == "borrow_limit_gpus" else "lendingLimit"
        res[key] = as_quantity(change["to"])
    elif field == "fair_share_weight":
        spec.setdefault("fairSharing", {})["weight"] = as_quantity(change["to"])
    elif a["kind"] == "reclaim":
        preemption = spec.setdefault("preemption", {})
        if preemption.get("reclaimWithinCohort") != "Any":
            preemption["reclaimWithinCohort"] = "Any"
    return None


def _kueue_target(a: Mapping[str, Any], names: Names) -> str | None:
    """The ClusterQueue advice ``a`` changes (a reclaim: the lender's), if any."""
    if a["change"].get("field") or a["kind"] == "reclaim":
        tenant = a["to_tenant"] if a["kind"] == "reclaim" else a["from_tenant"]
        return names.cluster_queue(tenant)
    return None


def _normal(value: Any) -> Any:
    """``value`` with every quantity-looking leaf as a number, to compare "2" with 2."""
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    number = quantity(value) if isinstance(value, int | float | str) else None
    return value if number is None else number


def _spec_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level spec fields that differ (each whole: lists are replaced by a merge patch)."""
    return {k: new[k] for k in sorted(new) if _normal(old.get(k)) != _normal(new[k])}


def kueue(
    advice: Sequence[Mapping[str, Any]], current: Mapping[str, Any], names: Names
) -> list[dict[str, Any]]:
    """ClusterQueue merge patches (only where a value differs) and Workload deactivations."""
    out: list[dict[str, Any]] = []
    for name in sorted({t for a in advice if (t := _kueue_target(a, names))}):
        obj = current.get(name)
        mine = [a for a in advice if _kueue_target(a, names) == name]
        if obj is None:
            out.append(_item(mine[0], kind="ClusterQueue", name=name, note=(
                f"no ClusterQueue {name}: create it, or name the tenant's queue in "
                "scheduler.kueue_queues"
            )))  # fmt: skip
            continue
        spec = obj.get("spec") or {}
        desired = copy.deepcopy(spec)
        notes = [n for a in mine if (n := _kueue_desired(desired, a, names))]
        patch = _spec_patch(spec, desired)
        item: dict[str, Any] = {
            "advice": [a.get("advice_id") or a["kind"] for a in mine],
            "apiVersion": f"{KUEUE_GROUP}/{names.kueue_version}",
            "kind": "ClusterQueue",
            "name": name,
        }
        if patch:
            item["patch"] = {"spec": patch}
            item["command"] = _kubectl("clusterqueues.kueue.x-k8s.io", name, item["patch"])
        else:
            item["note"] = "already as advised: nothing to patch"
        if notes:
            item["note"] = "; ".join(notes)
        out.append(item)
    return out + deactivations(advice, names)


def _kubectl(resource: str, name: str, patch: Mapping[str, Any]) -> str:
    import json

    body = json.dumps(patch, separators=(",", ":"), sort_keys=True)
    return f"kubectl patch {resource} {name} --type=merge -p {shlex.quote(body)}"


# -- Volcano ------------------------------------------------------------------------------------
def _volcano_change(a: Mapping[str, Any], names: Names) -> dict[str, Any]:
    """The spec fields advice ``a`` sets in its Volcano Queue (a merge patch: maps merge)."""
    change, gpu = a["change"], names.gpu_resource
    guaranteed = float(a["numbers"].get("guaranteed_gpus", 0.0))
    field = change.get("field")
    if field == "borrow_limit_gpus":
        return {"capability": {gpu: str(as_quantity(guaranteed + change["to"]))}}
    if field == "lend_limit_gpus":
        kept = max(0.0, guaranteed - change["to"])
        return {"guarantee": {"resource": {gpu: str(as_quantity(kept))}}}
    if field == "fair_share_weight":
        return {"weight": names.shares(change["to"])}
    if a["kind"] == "reclaim":
        return {"reclaimable": True}
    return {}


def _merge(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, Mapping) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


def _differs(spec: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``patch`` that changes ``spec`` (a missing reclaimable means true)."""
    out: dict[str, Any] = {}
    for k, v in patch.items():
        if isinstance(v, Mapping):
            inner = _differs(spec.get(k) or {}, v)
            if inner:
                out[k] = inner
        elif _normal(spec.get(k, True if k == "reclaimable" else None)) != _normal(v):
            out[k] = v
    return out


def volcano(
    advice: Sequence[Mapping[str, Any]], current: Mapping[str, Any] | None, names: Names
) -> list[dict[str, Any]]:
    """Queue merge patches and Pod evictions; with ``current`` (the Queues read from the
    cluster), only what differs, and a note for a Queue that does not exist."""
    out: list[dict[str, Any]] = []
    wanted: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for a in advice:
        change = _volcano_change(a, names)
        if change:
            ids, patch = wanted.setdefault(names.volcano_queue(a["from_tenant"]), ([], {}))
            ids.append(a.get("advice_id") or a["kind"])
            _merge(patch, change)
    for name, (ids, patch) in sorted(wanted.items()):
        item: dict[str, Any] = {
            "advice": ids,
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
            "kind": "Queue",
            "name": name,
        }
        if current is not None and name not in current:
            item["note"] = f"no Queue {name}: create it, or name it in scheduler.volcano_queues"
        else:
            spec = (current or {}).get(name, {}).get("spec", {}) if current is not None else {}
            needed = _differs(spec, patch) if current is not None else patch
            if needed:
                item["patch"] = {"spec": needed}
                item["command"] = _kubectl("queues.scheduling.volcano.sh", name, item["patch"])
            else:
                item["note"] = "already as advised: nothing to patch"
        out.append(item)
    return out + evictions(advice)


# -- Slurm --------------------------------------------------------------------------------------
def slurm(advice: Sequence[Mapping[str, Any]], names: Names) -> list[dict[str, Any]]:
    """Commands (argv lists) and the advice each serves; a comment where Slurm has no knob."""
    out: list[dict[str, Any]] = []
    sets: dict[str, tuple[list[str], dict[str, str]]] = {}
    for a in advice:
        change, field = a["change"], a["change"].get("field")
        account = names.slurm_account(a["from_tenant"])
        ident = a.get("advice_id") or a["kind"]
        if field == "borrow_limit_gpus":
            cap = float(a["numbers"].get("guaranteed_gpus", 0.0)) + change["to"]
            ids, values = sets.setdefault(account, ([], {}))
            ids.append(ident)
            values["GrpTRES"] = f"gres/gpu={int(cap)}"
        elif field == "fair_share_weight":
            ids, values = sets.setdefault(account, ([], {}))
            ids.append(ident)
            values["Fairshare"] = str(names.shares(change["to"]))
        elif field == "lend_limit_gpus":
            out.append({"advice": [ident], "comment": (
                f"account {account}: Slurm accounts have no guarantee to lend (GrpTRES caps, "
                "it does not reserve); nothing to change"
            )})  # fmt: skip
        for job in a["jobs"] if a["kind"] in _PREEMPTING else ():
            argv = ["scancel", job["job_id"]] if a["kind"] == "interactive_limit" else [
                "scontrol", "requeue", job["job_id"]
            ]  # fmt: skip
            same = next((i for i in out if i.get("argv") == argv), None)
            if same is not None:  # named by two advice: one command serves both
                same["advice"].append(ident)
            else:
                out.append({"advice": [ident], "argv": argv})
    for account, (ids, values) in sorted(sets.items()):
        argv = ["sacctmgr", "-i", "modify", "account", "where", f"name={account}", "set"]
        out.insert(0, {"advice": ids, "argv": argv + [f"{k}={v}" for k, v in values.items()]})
    for item in out:
        if "argv" in item:
            item["command"] = shlex.join(item["argv"])
    return out
