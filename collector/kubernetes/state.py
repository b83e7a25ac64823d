"""What the Kubernetes collector remembers, and the file that keeps it across restarts.

:class:`Track` is one pod's (or one waiting Workload slot's, see :mod:`collector.kubernetes.queue`)
lifecycle as reported so far: the job id and attempt its events carry, and the steps already
emitted. :class:`StateFile` keeps a :class:`Snapshot` of every track, the Workload slots, the
node and Workload caches the events draw on, and the resourceVersion of each kind, in one JSON
file per cluster (``kubernetes-<cluster>.json``), so that a restarted collector resumes its
watches where they were and re-emits nothing it had already handed to its sink.

Writes are atomic (a temporary file in the same directory, fsync, rename, fsync of the
directory): a crash leaves the old file or the new one, never half of one. A collector holds
``<name>.lock`` (flock) while it runs; a second one on the same file runs without a state. A
file that cannot be read (corrupt, from another version or another cluster) is logged as a
warning, kept aside as ``<name>.unreadable`` and ignored: the collector starts afresh, as it
would without one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from collector.kubernetes.objects import PodSetView, PodView, WorkloadView, _NodeParse, _Shape
from collector.records import NodeInventory

log = logging.getLogger(__name__)

FORMAT, VERSION = "gpuledger-kubernetes-state", 1


@dataclasses.dataclass
class Track:
    """One job's lifecycle as reported: a pod's, or a Workload slot's while it has no pod."""

    view: PodView
    tenant: str
    done: set[str]  # lifecycle steps emitted: submitted, admitted, started, end
    gated_seen: bool
    started_at: dt.datetime | None = None
    job_id: str = ""  # the pod UID, or the Workload slot the pod took
    attempt: int = 0


@dataclasses.dataclass
class Slot:
    """One pod a waiting Workload asks for, reported as a job until a pod takes it."""

    job_id: str
    attempt: int
    podset: str
    track: Track | None  # its own events while it has no pod; None once a pod took it
    pod: str = ""  # the UID of the pod that took it

    @property
    def free(self) -> bool:
        return self.track is not None and "end" not in self.track.done


@dataclasses.dataclass
class Snapshot:
    """Everything the collector needs to go on where it stopped."""

    resource_versions: dict[str, str]
    nodes: dict[str, _NodeParse]
    workloads: dict[str, WorkloadView]
    pods: dict[str, Track]
    slots: dict[str, list[Slot]]


# -- JSON codec: explicit per type, so that a file from another version fails loudly --------
def _t(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    ts = dt.datetime.fromisoformat(value)
    if ts.tzinfo is None:
        raise ValueError(f"time {value!r} has no zone")
    return ts


def _pod_view(v: PodView) -> list[Any]:
    """A row in ``PodView._fields`` order (the file names them once), without the labels: they
    count only when a pod is first seen (tenant, slot) and are much of a pod's size."""
    d = v._asdict() | {"labels": {}}
    for key in ("created", "scheduled_at", "started_at", "ended_at"):
        d[key] = _t(d[key])
    return list(d.values())


def _read_pod_view(row: list[Any]) -> PodView:
    if len(row) != len(PodView._fields):
        raise ValueError(f"a pod row of {len(row)} fields, expected {len(PodView._fields)}")
    d = dict(zip(PodView._fields, row, strict=True))
    for key in ("created", "scheduled_at", "started_at", "ended_at"):
        d[key] = _dt(d[key])
    d["mig"] = tuple((str(p), int(n)) for p, n in d["mig"])
    if d["created"] is None:
        raise ValueError("a pod without a creation time")
    return PodView(**d)


def _workload(w: WorkloadView) -> dict[str, Any]:
    d = w._asdict()
    for key in ("created", "admitted_at", "finished_at"):
        d[key] = _t(d[key])
    if w.eviction is not None:
        d["eviction"] = [w.eviction[0], w.eviction[1], _t(w.eviction[2])]
    d["pod_sets"] = [ps._asdict() | {"shape": ps.shape._asdict()} for ps in w.pod_sets]
    return d


def _read_workload(d: dict[str, Any]) -> WorkloadView:
    d = dict(d)
    for key in ("created", "admitted_at", "finished_at"):
        d[key] = _dt(d[key])
    d["job_uids"] = tuple(str(u) for u in d["job_uids"])
    if d["eviction"] is not None:
        event, reason, since = d["eviction"]
        d["eviction"] = (str(event), str(reason), _dt(since))
    sets = []
    for ps in d["pod_sets"]:
        shape = dict(ps["shape"])
        shape["mig"] = tuple((str(p), int(n)) for p, n in shape["mig"])
        sets.append(PodSetView(**(ps | {"shape": _Shape(**shape)})))
    d["pod_sets"] = tuple(sets)
    return WorkloadView(**d)


def _node(n: _NodeParse) -> dict[str, Any]:
    record = n.record._asdict() | {"ts": _t(n.record.ts)}
    return {"record": record, "replicas": n.replicas, "memory_mib": n.memory_mib}


def _read_node(d: dict[str, Any]) -> _NodeParse:
    record = NodeInventory(**(d["record"] | {"ts": _dt(d["record"]["ts"])}))
    return _NodeParse(record, d["replicas"], d["memory_mib"], [])


def _track(t: Track) -> dict[str, Any]:
    return {
        "view": _pod_view(t.view),
        "tenant": t.tenant,
        "done": sorted(t.done),
        "gated_seen": t.gated_seen,
        "started_at": _t(t.started_at),
        "job_id": t.job_id,
        "attempt": t.attempt,
    }


def _read_track(d: dict[str, Any]) -> Track:
    done = {str(s) for s in d["done"]}
    if not done <= {"submitted", "admitted", "started", "end"}:
        raise ValueError(f"unknown lifecycle steps {sorted(done)}")
    return Track(
        _read_pod_view(d["view"]),
        str(d["tenant"]),
        done,
        bool(d["gated_seen"]),
        _dt(d["started_at"]),
        str(d["job_id"]),
        int(d["attempt"]),
    )


def _slot(s: Slot) -> dict[str, Any]:
    track = _track(s.track) if s.track is not None else None
    return {
        "job_id": s.job_id,
        "attempt": s.attempt,
        "podset": s.podset,
        "track": track,
        "pod": s.pod,
    }


def _read_slot(d: dict[str, Any]) -> Slot:
    track = _read_track(d["track"]) if d["track"] is not None else None
    return Slot(str(d["job_id"]), int(d["attempt"]), str(d["podset"]), track, str(d["pod"]))


def encode(snapshot: Snapshot, cluster: str, now: dt.datetime) -> bytes:
    """The snapshot as the file holds it (JSON, UTF-8)."""
    body = {
        "format": FORMAT,
        "version": VERSION,
        "cluster": cluster,
        "saved_at": _t(now),
        "pod_fields": PodView._fields,
        "resource_versions": snapshot.resource_versions,
        "nodes": {k: _node(v) for k, v in snapshot.nodes.items()},
        "workloads": {k: _workload(v) for k, v in snapshot.workloads.items()},
        "pods": {k: _track(v) for k, v in snapshot.pods.items()},
        "slots": {k: [_slot(s) for s in v] for k, v in snapshot.slots.items()},
    }
    return json.dumps(body, separators=(",", ":")).encode()


def decode(data: bytes, cluster: str) -> Snapshot:
    """Read a file's content; ValueError (or KeyError, TypeError) says why it cannot be used."""
    body = json.loads(data)
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ValueError("not a gpuledger Kubernetes collector state file")
    if body.get("version") != VERSION:
        raise ValueError(f"state format version {body.get('version')!r}, expected {VERSION}")
    if body.get("cluster") != cluster:
        raise ValueError(f"the state of cluster {body.get('cluster')!r}, not {cluster!r}")
    if tuple(body.get("pod_fields") or ()) != PodView._fields:
        raise ValueError("pods saved with other fields (by another gpuledger version)")
    return Snapshot(
        resource_versions={str(k): str(v) for k, v in body["resource_versions"].items() if v},
        nodes={str(k): _read_node(v) for k, v in body["nodes"].items()},
        workloads={str(k): _read_workload(v) for k, v in body["workloads"].items()},
        pods={str(k): _read_track(v) for k, v in body["pods"].items()},
        slots={str(k): [_read_slot(s) for s in v] for k, v in body["slots"].items()},
    )


class StateFile:
    """``<directory>/kubernetes-<cluster>.json``: load once at start, save atomically after."""

    def __init__(self, directory: str | os.PathLike[str], cluster: str):
        name = re.sub(r"[^A-Za-z0-9._-]", "_", cluster) or "default"
        self.cluster = cluster
        self.path = Path(directory) / f"kubernetes-{name}.json"
        self._save_failed = False
        self._lock_fd: int | None = None

    def acquire(self) -> bool:
        """Hold ``<file>.lock`` while running: one collector per state file. False (logged) if
        another process holds it, or the directory cannot be written: run without a state then.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            log.warning("cannot use %s for the Kubernetes collector state (%s)", self.path, exc)
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            log.warning(
                "another collector holds %s (its .lock): this one keeps no state; give each "
                "collector of cluster %r its own kubernetes.state_dir",
                self.path,
                self.cluster,
            )
            return False
        self._lock_fd = fd
        return True

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the lock
            self._lock_fd = None

    def load(self) -> Snapshot | None:
        """The saved snapshot; None (with a warning if a file was there) to start afresh."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning(
                "cannot read the Kubernetes collector state %s (%s); starting afresh: pods "
                "already reported will be reported again",
                self.path,
                exc,
            )
            return None
        try:
            return decode(data, self.cluster)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            aside = self.path.with_name(self.path.name + ".unreadable")
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = self.path
            log.warning(
                "the Kubernetes collector state %s is unreadable (%s: %s); kept as %s and "
                "starting afresh: pods already reported will be reported again",
                self.path,
                type(exc).__name__,
                exc,
                aside,
            )
            return None

    def save(self, data: bytes) -> bool:
        """Replace the file with ``data`` atomically; False (logged once) if that failed."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            _fsync_dir(self.path.parent)
        except OSError as exc:
            if not self._save_failed:
                log.warning(
                    "cannot save the Kubernetes collector state to %s (%s); will retry, and a "
                    "restart before it succeeds reports recent transitions again",
                    self.path,
                    exc,
                )
            self._save_failed = True
            return False
        if self._save_failed:
            log.info("saved the Kubernetes collector state to %s again", self.path)
        self._save_failed = False
        return True


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (where the platform allows opening a directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
