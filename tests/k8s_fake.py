"""A fake Kubernetes API server for tests: list and watch pods, nodes and Kueue Workloads.

It speaks the part of the real protocol the official client uses, so tests run the real
``kubernetes`` client (urllib3 underneath) against it:

* ``GET /api/v1/pods`` (``/api/v1/nodes``, ``/apis/kueue.x-k8s.io/v1beta2/workloads`` and the
  ``v1beta1`` ones where ``kueue_versions`` says so, Kueue's ``v1beta2`` ClusterQueues and
  Volcano's ``v1beta1`` Queues) returns
  a List whose ``metadata.resourceVersion`` is the current one, in pages with ``limit`` and
  ``continue``. Without Kueue "installed", the Workload path answers 404, as for a missing CRD.
* ``?watch=true&resourceVersion=N`` answers with chunked transfer-encoding, one JSON event per
  line (``{"type": "ADDED|MODIFIED|DELETED|BOOKMARK|ERROR", "object": {...}}``, one chunk each):
  every change after N, then new ones as they come, until ``timeoutSeconds``.

Test controls: :meth:`FakeKubeApi.put` / :meth:`~FakeKubeApi.delete` change objects with or
without a watch event (without: as if it happened while nobody watched), :meth:`bookmark`,
:meth:`expire` (410 Gone as an ERROR event or as HTTP 410), :meth:`drop_watches` and
:meth:`drop_after` (close watch connections mid-stream, without the final chunk), and
:meth:`fail_next` (answer the next requests, or the next of one kind, with an HTTP error).
``requests`` logs every request. Use it as a context manager: closing it ends every stream
and joins every handler thread.

Writes, for the scheduler advice: ``GET`` and ``PATCH`` of one ClusterQueue or Queue by name,
or of one pod, batch Job or Kueue Workload in a namespace (and the list of a namespace's);
patches are ``application/merge-patch+json`` only, applied as RFC 7386 says (415 for another
patch type); ``POST /api/v1/namespaces/NS/pods/NAME/eviction`` deletes the pod. ``writes`` logs
each as (method, path, content type, body).
"""

from __future__ import annotations

import bisect
import copy
import json
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = {
    "/api/v1/pods": "pods",
    "/api/v1/nodes": "nodes",
    "/apis/kueue.x-k8s.io/v1beta2/workloads": "workloads",
    "/apis/kueue.x-k8s.io/v1beta1/workloads": "workloads",
    "/apis/kueue.x-k8s.io/v1beta2/clusterqueues": "clusterqueues",
    "/apis/scheduling.volcano.sh/v1beta1/queues": "queues",
    "/apis/batch/v1/jobs": "jobs",
}
_LIST = {
    "pods": ("v1", "PodList"),
    "nodes": ("v1", "NodeList"),
    "workloads": ("kueue.x-k8s.io/v1beta2", "WorkloadList"),
    "clusterqueues": ("kueue.x-k8s.io/v1beta2", "ClusterQueueList"),
    "queues": ("scheduling.volcano.sh/v1beta1", "QueueList"),
    "jobs": ("batch/v1", "JobList"),
}
#: The kinds without a namespace: named by "name" alone.
CLUSTER_SCOPED = {"nodes", "clusterqueues", "queues"}
_EVICTION = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$")
_NAMESPACED = re.compile(
    r"^/(?:api/v1|apis/batch/v1|apis/kueue\.x-k8s\.io/v1beta[12])/namespaces/([^/]+)/"
    r"(pods|jobs|workloads)(?:/([^/]+))?$"
)


def key_of(kind: str, obj: dict[str, Any]) -> str:
    """How the fake names an object: "name" for nodes and other cluster-scoped kinds,
    "namespace/name" otherwise."""
    meta = obj["metadata"]
    return meta["name"] if kind in CLUSTER_SCOPED else f"{meta.get('namespace', '')}/{meta['name']}"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null removes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _item_path(path: str) -> tuple[str, str] | None:
    """(kind, name) of a path naming one cluster-scoped object, e.g. a ClusterQueue."""
    collection, _, name = path.rpartition("/")
    kind = PATHS.get(collection)
    return (kind, name) if kind in CLUSTER_SCOPED and name else None


def _namespaced(path: str) -> tuple[str, str, str] | None:
    """(kind, namespace, name or "") of a path in one namespace: a pod, a Job or a Workload, or
    their list there."""
    found = _NAMESPACED.match(path)
    return (found[2], found[1], found[3] or "") if found else None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class _Stream:
    """One open watch connection, and what the controls asked of it."""

    def __init__(self, kind: str, rv: int, drop_after: int | None):
        self.kind, self.rv, self.drop_after = kind, rv, drop_after
        self.sent = 0
        self.drop = self.gone = False


class FakeKubeApi:
    """The fake server; ``url`` is what ``kubernetes.client.Configuration(host=...)`` takes."""

    def __init__(self, *, kueue: bool = True, kueue_versions: tuple[str, ...] = ("v1beta2",)):
        self.kueue = kueue
        self.kueue_versions = kueue_versions  # the Workload versions served (from v0.20: v1beta2)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.writes: list[tuple[str, str, str, Any]] = []
        self._cond = threading.Condition()
        self._rv = 1000
        self._objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in _LIST}
        self._history: dict[str, list[bytes]] = {k: [] for k in _LIST}
        self._history_rvs: dict[str, list[int]] = {k: [] for k in _LIST}
        self._compacted = 0  # a watch from an older resourceVersion gets 410 Gone
        self._gone_mode = "event"
        self._streams: set[_Stream] = set()
        self._drop_after: dict[str, int] = {}
        self._failures: list[tuple[str, int]] = []  # (kind, or "" for any request; status)
        self._closing = False
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-kube-api", kwargs={"poll_interval": 0.05}
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def resource_version(self) -> int:
        return self._rv

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()  # joins the handler threads
        self._thread.join()

    def __enter__(self) -> FakeKubeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- controls -------------------------------------------------------------------------------
    def put(
        self, kind: str, obj: dict[str, Any], *, event: bool = True, key: str | None = None
    ) -> dict[str, Any]:
        """Create or replace an object (ADDED/MODIFIED); ``event=False`` changes it silently.

        ``key`` names an object whose metadata is missing or malformed.
        """
        with self._cond:
            obj = copy.deepcopy(obj)
            self._rv += 1
            if isinstance(obj.get("metadata"), dict):
                obj["metadata"]["resourceVersion"] = str(self._rv)
            key = key or key_of(kind, obj)
            etype = "MODIFIED" if key in self._objects[kind] else "ADDED"
            self._objects[kind][key] = obj
            if event:
                self._record(kind, etype, obj)
            return copy.deepcopy(obj)

    def put_many(self, kind: str, objs: list[dict[str, Any]]) -> None:
        """``put`` each object in turn (one event each), holding the lock once: for benchmarks."""
        with self._cond:
            for obj in objs:
                self.put(kind, obj)

    def delete(self, kind: str, key: str, *, event: bool = True) -> None:
        """Delete an object (a DELETED event with its last state, unless ``event=False``)."""
        with self._cond:
            obj = copy.deepcopy(self._objects[kind].pop(key))
            self._rv += 1
            if isinstance(obj.get("metadata"), dict):
                obj["metadata"]["resourceVersion"] = str(self._rv)
            if event:
                self._record(kind, "DELETED", obj)

    def get(self, kind: str, key: str) -> dict[str, Any]:
        with self._cond:
            return copy.deepcopy(self._objects[kind][key])

    def bookmark(self, kind: str) -> int:
        """Send a BOOKMARK at a new resourceVersion (which changes nothing); returns it."""
        with self._cond:
            self._rv += 1
            self._record(
                kind,
                "BOOKMARK",
                {
                    "kind": _LIST[kind][1][:-4],
                    "apiVersion": _LIST[kind][0],
                    "metadata": {"resourceVersion": str(self._rv)},
                },
            )
            return self._rv

    def expire(self, mode: str = "event") -> None:
        """Compact history: resourceVersions before now are gone (410).

        ``mode="event"``: open watches that are behind get an ERROR event with code 410, as do
        new watches from an old version. ``mode="http"``: open watches end normally, and the
        next watch from an old version gets HTTP 410.
        """
        with self._cond:
            self._compacted, self._gone_mode = self._rv, mode
            for stream in self._streams:
                stream.gone = True
            self._cond.notify_all()

    def drop_watches(self) -> None:
        """Close every open watch connection now, mid-stream (no terminating chunk)."""
        with self._cond:
            for stream in self._streams:
                stream.drop = True
            self._cond.notify_all()

    def drop_after(self, events: int, kind: str = "pods") -> None:
        """The next watch of ``kind`` that opens is cut off right after ``events`` events."""
        with self._cond:
            self._drop_after[kind] = events

    def fail_next(self, *statuses: int, kind: str = "") -> None:
        """Answer the next requests (of ``kind`` only, if given) with these HTTP statuses."""
        with self._cond:
            self._failures.extend((kind, status) for status in statuses)

    def watchers(self, kind: str) -> int:
        with self._cond:
            return sum(1 for s in self._streams if s.kind == kind)

    def wait_for_watchers(self, kind: str, count: int = 1, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.watchers(kind) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no watch on {kind} after {timeout} s")
            time.sleep(0.005)

    def watch_requests(self, kind: str) -> list[dict[str, str]]:
        with self._cond:
            return [q for p, q in self.requests if PATHS.get(p) == kind and q.get("watch")]

    def list_requests(self, kind: str) -> list[dict[str, str]]:
        with self._cond:
            return [q for p, q in self.requests if PATHS.get(p) == kind and not q.get("watch")]

    def serves_workloads(self, path: str) -> bool:
        """Whether Kueue is "installed" and serves Workloads at the version in ``path``."""
        return self.kueue and path.split("/")[3] in self.kueue_versions

    # -- server side ----------------------------------------------------------------------------
    def _record(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        line = json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n"
        self._history[kind].append(line)
        self._history_rvs[kind].append(self._rv)
        self._cond.notify_all()

    def _list(self, kind: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            snapshot, offset = self._rv, 0
            if query.get("continue"):
                snapshot, offset = (int(x) for x in query["continue"].split(":"))
                if snapshot < self._compacted:
                    return 410, _status(410, "Expired", "the continue token is too old")
            items = [copy.deepcopy(self._objects[kind][k]) for k in sorted(self._objects[kind])]
        limit = int(query.get("limit") or 0)
        end = offset + limit if limit else len(items)
        meta: dict[str, Any] = {"resourceVersion": str(snapshot)}
        if end < len(items):
            meta["continue"] = f"{snapshot}:{end}"
        api_version, list_kind = _LIST[kind]
        return 200, {
            "apiVersion": api_version,
            "kind": list_kind,
            "metadata": meta,
            "items": items[offset:end],
        }

    def _in_namespace(self, kind: str, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        """One object of ``namespace`` (404 when it is not there), or the list of them all."""
        with self._cond:
            if name:
                found = self._objects[kind].get(f"{namespace}/{name}")
                if found is None:
                    return 404, _status(404, "NotFound", f"{kind} {namespace}/{name} not found")
                return 200, copy.deepcopy(found)
            keys = sorted(k for k in self._objects[kind] if k.startswith(f"{namespace}/"))
            items = [copy.deepcopy(self._objects[kind][k]) for k in keys]
        api_version, list_kind = _LIST[kind]
        meta = {"resourceVersion": str(self._rv)}
        return 200, {"apiVersion": api_version, "kind": list_kind, "metadata": meta, "items": items}

    def _gone_line(self, rv: int) -> bytes:
        status = _status(410, "Expired", f"too old resource version: {rv} ({self._compacted})")
        return json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so that server_close() joins every handler thread
    block_on_close = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-stream is expected here; stay quiet."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10
    api: FakeKubeApi

    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        api = self.api
        with api._cond:
            api.requests.append((url.path, query))
            kind = PATHS.get(url.path)
            i = next((i for i, f in enumerate(api._failures) if f[0] in ("", kind)), None)
            failure = api._failures.pop(i)[1] if i is not None else 0
        item = _item_path(url.path)
        spaced = _namespaced(url.path)
        if failure:
            self._json(failure, _status(failure, "InternalError", "injected failure"))
        elif spaced is not None:
            self._json(*api._in_namespace(*spaced))
        elif item is not None:
            with api._cond:
                found = api._objects[item[0]].get(item[1])
            if found is None:
                self._json(404, _status(404, "NotFound", f"{item[0]} {item[1]} not found"))
            else:
                self._json(200, copy.deepcopy(found))
        elif kind is None or (kind == "workloads" and not api.serves_workloads(url.path)):
            self._json(404, _status(404, "NotFound", "the server could not find the resource"))
        elif query.get("watch", "").lower() in ("true", "1"):
            try:
                self._watch(kind, query)
            except OSError:  # the client hung up (a stopped watch): nothing more to say
                self.close_connection = True
        else:
            self._json(*api._list(kind, query))

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def do_PATCH(self) -> None:
        api, path = self.api, urllib.parse.urlsplit(self.path).path
        spaced = _namespaced(path)
        kind_name, ctype, body = (
            (spaced[0], f"{spaced[1]}/{spaced[2]}") if spaced and spaced[2] else _item_path(path),
            self.headers.get("Content-Type", ""),
            self._body(),
        )
        with api._cond:
            api.writes.append(("PATCH", path, ctype, body))
            found = kind_name and api._objects[kind_name[0]].get(kind_name[1])
        if not found or kind_name is None:
            self._json(404, _status(404, "NotFound", f"{path} not found"))
        elif ctype.split(";")[0].strip() != "application/merge-patch+json":
            self._json(415, _status(415, "UnsupportedMediaType", f"patch type {ctype}"))
        else:
            self._json(200, api.put(kind_name[0], merge_patch(found, body)))

    def do_POST(self) -> None:
        api, path = self.api, urllib.parse.urlsplit(self.path).path
        body, found = self._body(), _EVICTION.match(path)
        with api._cond:
            api.writes.append(("POST", path, self.headers.get("Content-Type", ""), body))
            key = f"{found[1]}/{found[2]}" if found else ""
            exists = key in api._objects["pods"]
        if not found:
            self._json(404, _status(404, "NotFound", f"{path} not found"))
        elif not exists:
            self._json(404, _status(404, "NotFound", f"pods {key} not found"))
        else:
            api.delete("pods", key)
            self._json(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def _json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _watch(self, kind: str, query: dict[str, str]) -> None:
        api = self.api
        with api._cond:
            start = int(query["resourceVersion"]) if query.get("resourceVersion") else api._rv
            too_old = start < api._compacted
            if too_old and api._gone_mode == "http":
                code, body = 410, _status(410, "Expired", f"too old resource version: {start}")
            else:
                code, body = 0, {}
                stream = _Stream(kind, start, api._drop_after.pop(kind, None))
                api._streams.add(stream)
                pos = bisect.bisect_right(api._history_rvs[kind], start)
        if code:
            self._json(code, body)
            return
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()  # keep-alive, as the API server: Watch.stop() needs the socket
            if too_old:
                self._chunk(api._gone_line(start))
            else:
                self._stream(stream, pos, float(query.get("timeoutSeconds") or 30))
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True  # the client finds out when it next uses it
        except _Dropped:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        finally:
            with api._cond:
                api._streams.discard(stream)

    def _stream(self, stream: _Stream, pos: int, timeout_s: float) -> None:
        """Send events until the timeout, the server closes, or a control says otherwise."""
        api, deadline = self.api, time.monotonic() + timeout_s
        history, rvs = api._history[stream.kind], api._history_rvs[stream.kind]
        while True:
            with api._cond:
                while (
                    pos >= len(history)
                    and not (stream.drop or stream.gone or api._closing)
                    and time.monotonic() < deadline
                ):
                    api._cond.wait(min(0.25, max(0.0, deadline - time.monotonic())))
                lines, line_rvs, pos = history[pos:], rvs[pos:], len(history)
                gone, stream.gone = stream.gone, False
            for line, rv in zip(lines, line_rvs, strict=True):
                self._chunk(line)
                stream.rv, stream.sent = rv, stream.sent + 1
                if stream.drop_after is not None and stream.sent >= stream.drop_after:
                    raise _Dropped
            if stream.drop:
                raise _Dropped
            if gone and stream.rv < api._compacted:
                if api._gone_mode == "event":
                    self._chunk(api._gone_line(stream.rv))
                return
            if api._closing or time.monotonic() >= deadline:
                return


class _Dropped(Exception):
    """Cut the connection now, as a crashed API server or a broken network would."""
