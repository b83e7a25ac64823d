"""Kubernetes pods, nodes and Kueue Workloads → job events and node inventory, by list + watch.

The official ``kubernetes`` client does the HTTP; :mod:`collector.kubernetes.objects` decides what
the objects mean (one job per pod, the lifecycle, GPU requests, node states: its docstring lists
the decisions a reader of the ledger needs to know), and :mod:`collector.kubernetes.queue` how a
Kueue Workload waiting without pods is reported. :mod:`collector.kubernetes.tracker` holds what lies
between objects and across time (the lifecycle steps each job has emitted, the Workloads and nodes
its events draw on, the quarantine of bad objects), and :mod:`collector.kubernetes.state` keeps it
across restarts. This module runs the list/watch/relist loop, :class:`KubernetesCollector`. The
readers are re-exported here for existing imports.
"""

from __future__ import annotations

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

from collector.kubernetes.objects import (
    POOL_LABELS,
    USER_KEYS,
    PodView,
    WorkloadView,
    _map,
    _rv,
    mig_fraction,
    parse_node,
    parse_pod,
    parse_quantity,
    parse_workload,
    workload_type,
)
from collector.kubernetes.state import StateFile, encode
from collector.kubernetes.tracker import ClusterTracker, KubernetesStats, Out
from collector.records import Batch
from collector.tenancy import TenantMapper
from gpuledger_errors import SourceError

__all__ = [
    "KubernetesCollector",
    "KubernetesError",
    "KubernetesStats",
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
KUEUE_GROUP = "kueue.x-k8s.io"
#: The Workload versions asked for, in order: v1beta2 is served from Kueue v0.15 and alone from
#: v0.20; v1beta1 for an older Kueue.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")


class KubernetesError(SourceError):
    """Listing from the API server failed (``poll_once``); the message says what to check."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _workloads(custom: Any) -> Callable[..., Any]:
    """Lists (and, through Watch, watches) Kueue Workloads at the first version of
    :data:`KUEUE_VERSIONS` the API server serves (404: not served), the one that answered
    last tried first; the last 404 when none is (Kueue is not installed)."""
    order = list(KUEUE_VERSIONS)

    def call(**kwargs: Any) -> Any:
        for i, version in enumerate(order):
            try:
                got = custom.list_cluster_custom_object(KUEUE_GROUP, version, "workloads", **kwargs)
            except ApiException as exc:
                if exc.status != 404 or i == len(order) - 1:
                    raise
                continue
            if i:
                log.info("Kueue serves Workloads at %s/%s: read there", KUEUE_GROUP, version)
                order.insert(0, order.pop(i))
            return got
        raise AssertionError("unreachable: the last version raises")

    return call


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
    (:mod:`collector.kubernetes.state`): it loads it on start and resumes each watch from the saved
    resourceVersion (a 410 relists and reconciles against the saved state: pods gone meanwhile
    get their terminal event, pods already reported emit nothing again), and saves it every
    ``state_save_interval_s`` while something changed (less often if a save takes more than a
    tenth of that: a large cluster's state is large), and on stop. A save holds only events
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
            self._kinds.append(_Kind("workloads", _workloads(custom)))
        self._kinds.append(_Kind("pods", _raw(core.list_pod_for_all_namespaces)))
        self.cluster, self.clock, self.page_size = cluster, clock, page_size
        self.watch_timeout_s, self.request_timeout_s = watch_timeout_s, request_timeout_s
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self.kueue_recheck_s = kueue_recheck_s
        self.state = StateFile(state_dir, cluster) if state_dir is not None else None
        self.state_save_interval_s = state_save_interval_s
        self.stats = KubernetesStats()
        self.tracker = ClusterTracker(
            cluster,
            tenant_mapper,
            self.stats,
            user_keys=user_keys,
            pool_labels=pool_labels,
            gpu_pods_only=gpu_pods_only,
            synthesize_gpus=synthesize_gpus,
            shared_gpu_replicas=shared_gpu_replicas,
            clock=clock,
        )
        self._lock = threading.RLock()  # guards the tracker and _rvs, orders calls to the sink
        self._dirty = False  # changed since the state file was last saved
        self._save_s = 0.0  # how long the last save took
        self._rvs: dict[str, str | None] = {}  # kind -> resourceVersion to watch from
        self._watches: dict[str, watch.Watch] = {}

    # -- entry points ---------------------------------------------------------------------------
    def poll_once(self) -> Batch:
        """List nodes, Workloads and pods once; the transitions since the last poll."""
        out = Out()
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
                self.tracker.sync(kind.name, items, POLL_GAP_REASON, out)
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
            while not stop_event.wait(max(self.state_save_interval_s, 10 * self._save_s)):
                self.save_state()  # at most a tenth of the time, however large the state
        finally:
            stop_event.set()
            for thread, kind in zip(threads, self._kinds, strict=True):
                while thread.is_alive():  # unblock a watch stuck reading its socket
                    if (w := self._watches.get(kind.name)) is not None:
                        w.stop()
                    thread.join(0.05)
            self.save_state()
            if self.state is not None:
                self.state.release()

    # -- the state file -------------------------------------------------------------------------
    def _restore(self) -> None:
        """Take up the saved state, if there is a usable one (see
        ``collector.kubernetes.state``)."""
        if self.state is not None and not self.state.acquire():
            self.state = None
        snap = self.state.load() if self.state is not None else None
        if snap is None:
            return
        kinds = {k.name for k in self._kinds}
        snap.resource_versions = {k: v for k, v in snap.resource_versions.items() if k in kinds}
        with self._lock:
            self.tracker.restore(snap)
            self._rvs.update(snap.resource_versions)
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
        began = time.monotonic()
        with self._lock:  # a consistent cut: only events the sink already has
            snap = self.tracker.snapshot({k: rv for k, rv in self._rvs.items() if rv})
            data = encode(snap, self.cluster, self.clock())
            self._dirty = False
        if not self.state.save(data):
            self._dirty = True
        self._save_s = time.monotonic() - began

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
        out = Out()
        with self._lock:
            self.tracker.sync(kind.name, items, gap_reason, out)
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
                    out = Out()
                    with self._lock:
                        self.tracker.apply(kind.name, etype, obj, out)
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

    def _emit(self, sink: Callable[[Batch], None], out: Out) -> None:
        if not out:
            return
        try:
            sink(out.batch())
        except Exception:
            self.stats.sink_errors += 1
            log.exception("the sink failed; a batch of %d records is lost", len(out.batch()))
