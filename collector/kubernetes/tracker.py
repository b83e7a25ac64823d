"""What the Kubernetes collector knows of one cluster between events, and what each change means.

:class:`ClusterTracker` holds the lifecycle steps each job has emitted (pods, and the slots of
Workloads waiting without pods, :mod:`collector.kubernetes.queue`), the Workloads and nodes those
events draw on, and the quarantine of bad objects; it turns each listed or watched object into
the records it implies. No I/O: :class:`~collector.kubernetes.collector.KubernetesCollector` lists
and watches, holds the lock around every call, and keeps a
:class:`~collector.kubernetes.state.Snapshot` of this state across restarts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from collector.kubernetes.objects import (
    SOURCE,
    PodView,
    WorkloadView,
    _Bad,
    _gpu_amount,
    _ident,
    _NodeParse,
    _pod_keys,
    _steps,
    _wl_keys,
    parse_node,
    parse_pod,
    parse_workload,
)
from collector.kubernetes.queue import QueuedStep, QueuedWorkloads
from collector.kubernetes.state import Snapshot, Track
from collector.records import TERMINAL_EVENTS, Batch, GpuInventory, JobEvent, NodeInventory, Reject
from collector.tenancy import TenantMapper

log = logging.getLogger(__name__)

_RECORD_KIND = {"pods": "job_event", "workloads": "job_event", "nodes": "node_inventory"}


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
class Out:
    """The records one list or one watch event produced: one batch for the sink."""

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


class ClusterTracker:
    """The state between objects and across time; see the module docstring.

    The arguments are :class:`~collector.kubernetes.collector.KubernetesCollector`'s, which
    documents them. Not thread-safe: the caller serialises calls.
    """

    def __init__(
        self,
        cluster: str,
        tenants: TenantMapper,
        stats: KubernetesStats,
        *,
        user_keys: Sequence[str],
        pool_labels: Sequence[str],
        gpu_pods_only: bool,
        synthesize_gpus: bool,
        shared_gpu_replicas: int,
        clock: Callable[[], dt.datetime],
    ):
        self.cluster, self.tenants, self.stats, self.clock = cluster, tenants, stats, clock
        self.user_keys, self.pool_labels = tuple(user_keys), tuple(pool_labels)
        self.gpu_pods_only, self.synthesize_gpus = gpu_pods_only, synthesize_gpus
        self.shared_gpu_replicas = shared_gpu_replicas
        self._pods: dict[str, Track] = {}
        self._pod_index: dict[str, set[str]] = {}  # association key -> pod UIDs
        self._workloads: dict[str, WorkloadView] = {}  # "namespace/name" -> workload
        self._wl_index: dict[str, WorkloadView] = {}  # association key -> workload
        self._queued = QueuedWorkloads(tenants, gpu_pods_only)
        self._pods_listed = False  # Workloads wait for the pods list before they count as podless
        self._nodes: dict[str, _NodeParse] = {}
        self._rejected: dict[tuple[str, str, str], str] = {}  # (kind, object, field) -> value

    # -- the state file -------------------------------------------------------------------------
    def snapshot(self, resource_versions: dict[str, str]) -> Snapshot:
        """The state as it is (shared, not copied: encode it before the next call)."""
        return Snapshot(
            resource_versions, self._nodes, self._workloads, self._pods, self._queued.slots
        )

    def restore(self, snap: Snapshot) -> None:
        """Take up a saved state (on start, before any object is applied)."""
        self._nodes, self._workloads = snap.nodes, snap.workloads
        self._pods, self._queued.slots = snap.pods, snap.slots
        for wl in self._workloads.values():
            self._wl_index.update(dict.fromkeys(_wl_keys(wl), wl))
        for track in self._pods.values():
            self._index(track.view, add=True)
        self._pods_listed = "pods" in snap.resource_versions

    # -- objects --------------------------------------------------------------------------------
    def sync(self, kind: str, items: list[Any], gap_reason: str, out: Out) -> None:
        """Apply a full list; what was known but is not listed any more was deleted meanwhile."""
        seen = {self.apply(kind, "ADDED", obj, out) for obj in items}
        if kind == "pods":
            for uid in [u for u in self._pods if u not in seen]:
                self._vanish(uid, gap_reason, out)
            self._pods_listed = True
            for key, wl in list(self._workloads.items()):
                self._settle(key, wl, out)
        elif kind == "nodes":
            for name in [n for n in self._nodes if n not in seen]:
                self._retire(name, self._nodes[name], gap_reason, out)
        else:
            for key in [k for k in {*self._workloads, *self._queued.slots} if k not in seen]:
                self._set_workload(key, None, out, gap_reason)

    def apply(self, kind: str, etype: str, obj: Any, out: Out) -> str:
        """Apply one object; its identity (pod UID, node name, ns/name; "" if unreadable)."""
        deleted = etype == "DELETED"
        try:
            if kind == "pods":
                self._on_pod(obj, deleted, out)
            elif kind == "nodes":
                self._on_node(obj, deleted, out)
            else:
                wl = parse_workload(obj, self.user_keys)
                self._set_workload(f"{wl.namespace}/{wl.name}", None if deleted else wl, out)
        except _Bad as bad:
            self._reject(kind, obj, bad, out)
        except Exception as exc:  # a reader bug quarantines the object, never stops the watch
            log.exception("could not read a %s object", kind)
            self._reject(kind, obj, _Bad("", "", f"unreadable: {exc!r}"), out)
        return _ident(kind, obj)

    def _reject(self, kind: str, obj: Any, bad: _Bad, out: Out) -> None:
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

    def _on_pod(self, obj: Any, deleted: bool, out: Out) -> None:
        v = parse_pod(obj, self.user_keys)
        track = self._pods.get(v.uid)
        if track is None:
            if self.gpu_pods_only and not (v.whole_gpus or v.shared_gpus or v.mig):
                return
            wl = self._workload_for(v)
            key = f"{wl.namespace}/{wl.name}" if wl else self._queued.claimant(v, self._workloads)
            adopted = self._queued.adopt(key, v) if key else None
            track = self._pods[v.uid] = adopted or Track(
                v,
                self.tenants.resolve(namespace=v.namespace, labels=v.labels),
                set(),
                v.gated,
                job_id=v.uid,
            )
        self._index(track.view, add=False)
        self._index(v, add=True)
        self._advance(track, v, deleted, out)
        if "end" in track.done and (wl := self._workload_for(v)) is not None:
            self._settle(f"{wl.namespace}/{wl.name}", wl, out)  # requeued, its pods all gone?
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

    def _advance(self, t: Track, v: PodView, deleted: bool, out: Out) -> None:
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

    def _vanish(self, uid: str, reason: str, out: Out) -> None:
        t = self._pods[uid]
        if "end" not in t.done:
            t.done.add("end")
            event = "finished" if "started" in t.done else "cancelled"
            out.events.append(
                self._job_event(t, self._workload_for(t.view), event, self.clock(), reason)
            )
        self._forget(uid)

    def _job_event(
        self, t: Track, wl: WorkloadView | None, event: str, ts: dt.datetime, reason: str
    ) -> JobEvent:
        v, node = t.view, self._nodes.get(t.view.node)
        gpus, fraction = _gpu_amount(
            v, (node.replicas if node and node.replicas else self.shared_gpu_replicas)
        )
        org, project = TenantMapper.split(t.tenant)
        return JobEvent(
            ts=ts,
            cluster=self.cluster,
            job_id=t.job_id or v.uid,
            event=event,
            attempt=t.attempt,
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

    def _set_workload(
        self, key: str, wl: WorkloadView | None, out: Out, gap_reason: str = ""
    ) -> None:
        """Store (or drop) a Workload and re-derive the events of its pods and slots.

        ``gap_reason``: it was not listed any more (deleted while nobody watched).
        """
        old = self._workloads.pop(key, None)
        for k in _wl_keys(old) if old else ():
            self._wl_index.pop(k, None)
        if wl is not None:
            self._workloads[key] = wl
            self._wl_index.update(dict.fromkeys(_wl_keys(wl), wl))
        keys = {k for w in (old, wl) if w is not None for k in _wl_keys(w)}
        for uid in sorted({u for k in keys for u in self._pod_index.get(k, ())}):
            self._advance(self._pods[uid], self._pods[uid].view, False, out)
        if wl is not None:
            self._steps_out(self._queued.update(key, wl, self.clock()), out)
            self._settle(key, wl, out)
        else:
            self._steps_out(self._queued.drop(key, old, gap_reason, self.clock()), out)

    # -- Kueue Workloads waiting without pods (collector.kubernetes.queue)
    # -----------------------------
    def _settle(self, key: str, wl: WorkloadView, out: Out) -> None:
        if self._pods_listed:  # before the pods are known, every Workload looks podless
            pods = [self._pods[u] for k in _wl_keys(wl) for u in self._pod_index.get(k, ())]
            self._steps_out(self._queued.settle(key, wl, pods, self.clock()), out)

    def _steps_out(self, steps: list[QueuedStep], out: Out) -> None:
        out.events.extend(self._job_event(*step) for step in steps)

    def _on_node(self, obj: Any, deleted: bool, out: Out) -> None:
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

    def _retire(self, name: str, last: _NodeParse, reason: str, out: Out) -> None:
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
