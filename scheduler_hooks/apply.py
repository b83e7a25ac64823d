"""Applying approved advice: patch the ClusterQueue or Queue and preempt the jobs it names
(through the Kubernetes API: a Kueue job's Workload is deactivated, any other pod evicted), or
run the Slurm commands; then mark the advice applied, with the scheduler's state before and
after in the audit log. A failure is audited too (outcome ``failed``, with what was done
before it) and leaves the advice approved, to be applied again.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuledger_errors import GpuledgerError
from scheduler_hooks import proposals, render
from scheduler_hooks.kube import Cluster
from scheduler_hooks.policy import Names
from scheduler_hooks.proposals import AdviceError, Stored
from warehouse.client import Warehouse

TARGETS = ("kueue", "volcano", "slurm")
#: What a Slurm command may take before it is given up on.
SLURM_TIMEOUT_S = 60.0

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class ApplyError(GpuledgerError):
    """The scheduler refused a change, or a command failed."""


def apply_advice(
    wh: Warehouse,
    advice_id: str,
    *,
    target: str,
    actor: str,
    names: Names,
    cluster: Cluster | None = None,
    slurm_bin_dir: str = "",
    run: Runner = subprocess.run,
) -> Stored:
    """Apply approved advice ``advice_id`` to ``target`` (kueue, volcano or slurm)."""
    stored = proposals.check_approved(wh, advice_id)
    done: list[dict[str, Any]] = []
    try:
        if target == "slurm":
            before, after = _slurm(stored.advice, names, slurm_bin_dir, run, done)
        elif cluster is None:
            raise AdviceError(
                f"applying advice to {target} needs the cluster: give --kubeconfig FILE"
            )
        else:
            before, after = _kube(stored.advice, target, names, cluster, done)
    except GpuledgerError as exc:
        wh.audit(
            actor,
            "advice.apply",
            advice_id,
            json.dumps({"target": target, "error": str(exc), "done": done}, default=str),
            outcome="failed",
        )
        raise
    return proposals.applied(
        wh, advice_id, actor=actor, before=before, after=after | {"target": target}
    )


def _kube(
    advice: Mapping[str, Any], target: str, names: Names, cluster: Cluster, done: list[Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    current = cluster.cluster_queues() if target == "kueue" else cluster.volcano_queues()
    fn = render.kueue if target == "kueue" else render.volcano
    items = fn([advice], current, names)
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for item in items:
        if item["kind"] == "Workload":
            ns, pod = item["namespace"], item["pod"]
            workload = cluster.workload_of(ns, pod)
            if workload is None:  # not Kueue's: evicting the pod is preemption there
                cluster.evict(ns, pod)
                before[f"pod {ns}/{pod}"], after[f"pod {ns}/{pod}"] = "running", "evicted"
            else:
                name = workload["metadata"]["name"]
                was = (workload.get("spec") or {}).get("active", True)
                now = (cluster.deactivate(ns, name).get("spec") or {}).get("active", True)
                where = f"Workload {ns}/{name} (pod {pod})"
                before[where], after[where] = {"active": was}, {"active": now}
        elif item["kind"] == "Eviction":
            cluster.evict(item["namespace"], item["name"])
            where = f"pod {item['namespace']}/{item['name']}"
            before[where], after[where] = "running", "evicted"
        elif "patch" in item:
            spec = (current[item["name"]].get("spec") or {}) if item["name"] in current else {}
            patched = cluster.patch(item["kind"], item["name"], item["patch"])
            where = f"{item['kind']} {item['name']}"
            keys = item["patch"]["spec"]
            before[where] = {k: spec.get(k) for k in keys}
            after[where] = {k: (patched.get("spec") or {}).get(k) for k in keys}
        elif item.get("note", "").startswith("no "):
            raise ApplyError(f"advice {advice['advice_id']}: {item['note']}")
        done.append(item)
    return before, after


def _slurm(
    advice: Mapping[str, Any], names: Names, bin_dir: str, run: Runner, done: list[Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    before = {"change": advice.get("change")}
    outputs = []
    for item in render.slurm([advice], names):
        if "argv" not in item:
            continue
        argv = _resolved(item["argv"], bin_dir)
        try:
            got = run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ApplyError(f"`{item['command']}` could not run: {exc}") from None
        if got.returncode:
            raise ApplyError(
                f"`{item['command']}` failed (exit {got.returncode}): "
                f"{(got.stderr or got.stdout).strip()[:300]}"
            )
        done.append(item)
        outputs.append({"command": item["command"], "output": got.stdout.strip()[:1000]})
    return before, {"commands": outputs}


def _resolved(argv: Sequence[str], bin_dir: str) -> list[str]:
    """``argv`` with its command taken from ``bin_dir`` when one is set."""
    return [str(Path(bin_dir) / argv[0]) if bin_dir else argv[0], *argv[1:]]
