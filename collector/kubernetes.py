"""Kubernetes pods, nodes and Kueue Workloads → job events and node inventory, by list + watch.

The official ``kubernetes`` client does the HTTP; :mod:`collector.k8s_objects` decides what the
objects mean (one job per pod, the lifecycle, GPU requests, node states: its docstring lists
the decisions a reader of the ledger needs to know), and :mod:`collector.k8s_queue` how a Kueue
Workload waiting without pods is reported. This module holds what lies between objects and
across time (the lifecycle steps each job has emitted, the Workloads and nodes its events draw
on, the quarantine of bad objects), keeps it across restarts (:mod:`collector.k8s_state`) and
runs the list/watch/relist loop, :class:`KubernetesCollector`. The readers are re-exported here
for existing imports.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from .k8s_objects import (
    POOL_LABELS,
    SOURCE,
    USER_KEYS,
    PodView,
    WorkloadView,
    _Bad,
    _gpu_amount,
    _ident,
    _map,
    _NodeParse,
    _pod_keys,
    _rv,
    _steps,
    _wl_keys,
    mig_fraction,
    parse_node,
    parse_pod,
    parse_quantity,
    parse_workload,
    workload_type,
)
from .k8s_queue import QueuedStep, QueuedWorkloads
from .k8s_state import Snapshot, StateFile, Track, encode
from .records import TERMINAL_EVENTS, Batch, GpuInventory, JobEvent, NodeInventory, Reject
from .tenancy import TenantMapper

__all__ = [
    "KubernetesCollector",
    "KubernetesError",
    "PodView",
    "WorkloadView",
    "mig_fraction",
    "parse_node",
    "parse_pod",
    "parse_quantity",
    "parse_workload",
    "workload_type",
]

log = logging.getLogger(__name__)

GAP_REASON = "deleted during watch gap"
RELIST_AFTER = 3  # watch failures in a row (HTTP errors other than 410 and 429) before a relist
POLL_GAP_REASON = "deleted between polls"
KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")  # group, version, plural
_RECORD_KIND = {"pods": "job_event", "workloads": "job_event", "nodes": "node_inventory"}


class KubernetesError(Exception):
    """Listing from the API server failed (``poll_once``); the message says what to check."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


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
    relists and reconciles, and so do ``RELIST_AFTER`` other HTTP errors in a row (not 429), as
    client-go's reflector would. Kueue is optional: a 404 or 403 on its list means not installed or
    not allowed, and the collector goes on without Workloads, looking again every
    ``kueue_recheck_s``. ``poll_once`` only lists (``--once``, pull-style pipelines; ``collect``
    is the pipeline's ``Source`` spelling of it). Use either ``run`` or polling, not both.

    ``api_client`` (``kubernetes.client.ApiClient``) is built at the edge from a kubeconfig or
    the in-cluster config, and closed by its owner. The sink gets one batch per list and per
    watch event that produced records, in order; it should not raise (an exception is logged,
    counted in ``stats.sink_errors``, and that batch is lost).

    With ``state_dir``, ``run`` keeps what it has reported in a state file there
    (:mod:`collector.k8s_state`): it loads it on start and resumes each watch from the saved
    resourceVersion (a 410 relists and reconciles against the saved state: pods gone meanwhile
    get their terminal event, pods already reported emit nothing again), and saves it every
    ``state_save_interval_s`` while something changed, and on stop. A save holds only events
    already handed to the sink, so a crash loses none and re-emits at most those of the last
    interval. Such a duplicate is stored: the warehouse drops a re-sent batch by its id, not
    single events by content, and each batch here is new. It moves no time (allocations and
    queue analytics take each step's first time per job and attempt); it does count in the
    ``jobs`` table's ``events``. Polling (``poll_once``) keeps no state file.
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
        state_dir: str | os.PathLike[str] | None = None,
        state_save_interval_s: float = 1.0,
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
        self.state = StateFile(state_dir, cluster) if state_dir is not None else None
        self.state_save_interval_s = state_save_interval_s
        self.stats = KubernetesStats()
        self._lock = threading.RLock()  # guards the state below and orders calls to the sink
        self._pods: dict[str, Track] = {}
        self._pod_index: dict[str, set[str]] = {}  # association key -> pod UIDs
        self._workloads: dict[str, WorkloadView] = {}  # "namespace/name" -> workload
        self._wl_index: dict[str, WorkloadView] = {}  # association key -> workload
        self._queued = QueuedWorkloads(tenant_mapper, gpu_pods_only)
        self._pods_listed = False  # Workloads wait for the pods list before they count as podless
        self._dirty = False  # changed since the state file was last saved
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
        """List, then watch every kind until ``stop_event`` is set; hand batches to ``sink``.

        With a state file, a kind saved with a resourceVersion is not listed: its watch resumes.
        """
        self._restore()
        for kind in self._kinds:
            if self._rvs.get(kind.name):
                continue
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
            while not stop_event.wait(self.state_save_interval_s):
                self.save_state()
        finally:
            stop_event.set()
            for thread, kind in zip(threads, self._kinds, strict=True):
                while thread.is_alive():  # unblock a watch stuck reading its socket
                    if (w := self._watches.get(kind.name)) is not None:
                        w.stop()
                    thread.join(0.05)
            self.save_state()

    # -- the state file -------------------------------------------------------------------------
    def _restore(self) -> None:
        """Take up the saved state, if there is a usable one (see ``collector.k8s_state``)."""
        snap = self.state.load() if self.state is not None else None
        if snap is None:
            return
        with self._lock:
            self._nodes, self._workloads = snap.nodes, snap.workloads
            self._pods, self._queued.slots = snap.pods, snap.slots
            for wl in self._workloads.values():
                self._wl_index.update(dict.fromkeys(_wl_keys(wl), wl))
            for track in self._pods.values():
                self._index(track.view, add=True)
            kinds = {k.name for k in self._kinds}
            self._rvs.update({k: rv for k, rv in snap.resource_versions.items() if k in kinds})
            self._pods_listed = "pods" in self._rvs
        log.info(
            "resumed from %s: %d pods, %d Workloads, %d nodes; resourceVersions %s",
            self.state.path if self.state else "",
            len(snap.pods),
            len(snap.workloads),
            len(snap.nodes),
            snap.resource_versions,
        )

    def save_state(self) -> None:
        """Write the state file if anything changed since the last save (no-op without one)."""
        if self.state is None or not self._dirty:
            return
        with self._lock:  # a consistent cut: only events the sink already has
            snap = Snapshot(
                {k: rv for k, rv in self._rvs.items() if rv},
                self._nodes,
                self._workloads,
                self._pods,
                self._queued.slots,
            )
            data = encode(snap, self.cluster, self.clock())
            self._dirty = False
        if not self.state.save(data):
            self._dirty = True

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
            self._rvs[kind.name] = rv  # with the objects, so that a save is one consistent cut
            self._dirty = True

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
                if failures >= RELIST_AFTER and exc.status != 429:
                    self._rvs[kind.name] = None  # e.g. a saved resourceVersion this server refuses
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
                rv = _rv(obj)
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    out = _Out()
                    with self._lock:
                        self._apply(kind.name, etype, obj, out)
                        self._emit(sink, out)
                        if rv:
                            self._rvs[kind.name] = rv
                        self._dirty = True
                    applied += 1
                    self.stats.events += 1
                    continue
                if etype != "BOOKMARK":
                    log.warning("%s: ignoring a watch event of type %r", kind.name, etype)
                if rv:
                    with self._lock:
                        self._rvs[kind.name], self._dirty = rv, True
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
            self._pods_listed = True
            for key, wl in list(self._workloads.items()):
                self._settle(key, wl, out)
        elif kind == "nodes":
            for name in [n for n in self._nodes if n not in seen]:
                self._retire(name, self._nodes[name], gap_reason, out)
        else:
            for key in [k for k in {*self._workloads, *self._queued.slots} if k not in seen]:
                self._set_workload(key, None, out, gap_reason)

    def _apply(self, kind: str, etype: str, obj: Any, out: _Out) -> str:
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

    def _advance(self, t: Track, v: PodView, deleted: bool, out: _Out) -> None:
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
        self, key: str, wl: WorkloadView | None, out: _Out, gap_reason: str = ""
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

    # -- Kueue Workloads waiting without pods (collector.k8s_queue) -----------------------------
    def _settle(self, key: str, wl: WorkloadView, out: _Out) -> None:
        if self._pods_listed:  # before the pods are known, every Workload looks podless
            pods = [self._pods[u] for k in _wl_keys(wl) for u in self._pod_index.get(k, ())]
            self._steps_out(self._queued.settle(key, wl, pods, self.clock()), out)

    def _steps_out(self, steps: list[QueuedStep], out: _Out) -> None:
        out.events.extend(self._job_event(*step) for step in steps)

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
