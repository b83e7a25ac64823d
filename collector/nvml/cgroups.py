"""Who owns a process: its Kubernetes pod (UID and container) or Slurm job, from its cgroup.

NVML names the processes on a GPU by PID only. The owner is in the process's cgroup path
(``/proc/<pid>/cgroup``), which the kubelet and slurmd lay out in a few well-known ways:

* Kubernetes, cgroupfs driver (v1 or v2)::

      /kubepods/burstable/pod8dbc5577-d0e2-4706-8787-57d52c03ddf2/0a3bb1...(64 hex)
      /kubepods/pod<uid>/<container id>                      (Guaranteed QoS: no QoS level)

* Kubernetes, systemd driver (v1 or v2): the UID's dashes become underscores::

      /kubepods.slice/kubepods-burstable.slice/
          kubepods-burstable-pod8dbc5577_d0e2_4706_8787_57d52c03ddf2.slice/
          cri-containerd-0a3bb1....scope                    (or docker-, crio-)

* Slurm (``proctrack/cgroup``, ``task/cgroup``): v1 ``/slurm/uid_1000/job_123/step_0/task_0``
  (or ``/slurm_<node>/...`` with several slurmd per host); v2
  ``/system.slice/slurmstepd.scope/job_123/step_0/user/task_0``.

The pod's name and namespace are not in the cgroup, only its UID: a later enrichment step
joins UIDs to pods. Like prometheus client_python's ``ProcessCollector(proc=...)``, the proc
root is a parameter, so tests point it at hand-written files under ``tests/data/cgroup/``,
and an agent running in a container can read the host's ``/proc`` mounted elsewhere.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

__all__ = ["CgroupOwner", "owner_of_pid", "parse_cgroup"]

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# A pod segment: "pod<uid>" (cgroupfs) or "kubepods[-qos]-pod<uid_with_underscores>.slice"
# (systemd). Static (mirror) pods have a 32-hex config hash as their UID.
_POD = re.compile(rf"^(?:[\w.-]*-)?pod({_UID}|[0-9a-f]{{32}})(?:\.slice)?$")
# A container segment: the bare 64-hex id (cgroupfs), or "<runtime>-<id>.scope" (systemd).
_CONTAINER = re.compile(
    r"^(?:(?:cri-containerd|containerd|docker|crio|cri-o)-)?([0-9a-f]{64})"
    r"(?:\.scope)?$"
)
_SLURM_JOB = re.compile(r"^job_(\d+)$")


class CgroupOwner(NamedTuple):
    """The owner of one process, as far as its cgroup tells; empty strings when unknown."""

    pod_uid: str = ""  # with dashes, as the Kubernetes API spells it
    container_id: str = ""  # the runtime's 64-hex id, without a "containerd://" prefix
    slurm_job_id: str = ""
    cgroup_path: str = ""  # the path the owner was read from ("" if none matched)


def _paths(text: str) -> list[str]:
    """The cgroup paths of a ``/proc/<pid>/cgroup`` file, the unified (v2) one first.

    Each line is ``hierarchy-id:controllers:path``; the path itself may contain colons.
    """
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[2]:
            continue
        (unified if parts[0] == "0" and parts[1] == "" else legacy).append(parts[2])
    return unified + legacy


def _kubernetes(path: str) -> CgroupOwner | None:
    if "kubepods" not in path:
        return None
    segments = [s for s in path.split("/") if s]
    for i, segment in enumerate(segments):
        pod = _POD.match(segment)
        if pod is None:
            continue
        container = ""
        if i + 1 < len(segments) and (match := _CONTAINER.match(segments[i + 1])):
            container = match.group(1)
        return CgroupOwner(
            pod_uid=pod.group(1).replace("_", "-"), container_id=container, cgroup_path=path
        )
    return None


def _slurm(path: str) -> CgroupOwner | None:
    if "slurm" not in path:
        return None
    for segment in path.split("/"):
        if match := _SLURM_JOB.match(segment):
            return CgroupOwner(slurm_job_id=match.group(1), cgroup_path=path)
    return None


def parse_cgroup(text: str) -> CgroupOwner:
    """The owner named by the content of a ``/proc/<pid>/cgroup`` file.

    The unified (v2) hierarchy is read first, then the v1 controllers in file order; the
    first path that names a pod or a Slurm job wins. A host process (``/user.slice/...``),
    or a process in its own cgroup namespace (path ``/``), gives an empty owner.
    """
    for path in _paths(text):
        owner = _kubernetes(path) or _slurm(path)
        if owner is not None:
            return owner
    return CgroupOwner()


def owner_of_pid(pid: int, proc: str | os.PathLike[str] = "/proc") -> CgroupOwner:
    """The owner of process ``pid``, read from ``<proc>/<pid>/cgroup``.

    A process that has exited, or whose cgroup file cannot be read (another PID namespace,
    no permission), has an unknown owner: an empty :class:`CgroupOwner`, never an error,
    because processes come and go between NVML listing them and this read.
    """
    try:
        with open(
            os.path.join(os.fspath(proc), str(int(pid)), "cgroup"),
            encoding="utf-8",
            errors="replace",
        ) as f:
            text = f.read()
    except OSError:
        return CgroupOwner()
    return parse_cgroup(text)
