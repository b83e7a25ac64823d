"""``POST /admission``: the Kubernetes admission webhook, on the serve process's WSGI app.

It answers from the in-memory snapshot (:mod:`scheduler_hooks.snapshot`), never from the
warehouse; every decision goes to the audit log through a queue that a thread of its own
writes in batches, so the request path does no I/O. A body that is not an AdmissionReview,
or is too long, gets 400 with the reason as JSON; any fault of the webhook's own fails open
(allowed, with a warning, audited), never a 500 the API server would have to interpret.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import flask

from scheduler_hooks.admission import AdmissionRules, Decision, ReviewError, parse_review, review
from scheduler_hooks.snapshot import Snapshot
from warehouse.client import Warehouse, WarehouseError

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)

#: The default of admission.max_body_bytes: the API server itself sends at most ~3 MiB.
MAX_BODY_BYTES = 3 << 20


class AuditQueue:
    """Decisions on their way to the audit log, written every ``interval_s`` in one insert.
    A failed write is logged and its entries kept for the next (best effort: a queue of
    ``max_pending`` entries at most, the oldest dropped past it, and counted)."""

    def __init__(self, wh: Warehouse, *, interval_s: float = 1.0, max_pending: int = 100_000):
        self._wh = wh
        self._interval_s = interval_s
        self._queue: queue.Queue[tuple[dt.datetime, str, str, str, str, str]] = queue.Queue(
            max_pending
        )
        self._stop = threading.Event()
        self.dropped = 0
        self._thread = threading.Thread(target=self._loop, name="admission-audit", daemon=True)
        self._thread.start()

    def put(self, decision: Decision) -> None:
        detail = json.dumps(
            {
                "uid": decision.uid,
                "tenant": decision.tenant,
                "warnings": list(decision.warnings),
                "message": decision.message,
                "patch": list(decision.patch),
            },
            sort_keys=True,
        )
        entry = (
            dt.datetime.now(dt.UTC),
            decision.actor,
            f"admission.{decision.action}",
            decision.subject,
            "allowed" if decision.allowed else "denied",
            detail,
        )
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.dropped += 1

    def flush(self) -> None:
        batch = []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return
        try:
            self._wh.audit_many(batch)
        except WarehouseError as exc:
            log.warning("admission decisions could not be audited yet: %s", exc)
            for entry in batch:  # kept for the next write
                try:
                    self._queue.put_nowait(entry)
                except queue.Full:
                    self.dropped += 1

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.flush()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.flush()


def register(
    server: flask.Flask,
    current: Callable[[], Snapshot | None],
    rules: AdmissionRules,
    audit: AuditQueue,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> None:
    """Answer ``POST /admission`` on ``server``, deciding from ``current()``'s snapshot.

    It is answered in front of Flask (a WSGI layer around ``server.wsgi_app``): the API
    server waits on every Pod's creation, and Flask's request context, session and login
    hooks would cost more than the decision itself."""
    hook = _Hook(current, rules, audit, max_body_bytes)
    inner = server.wsgi_app

    def front(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return inner(environ, start_response)
        return hook(environ, start_response)

    server.wsgi_app = front  # type: ignore[method-assign]


#: Where the API server sends its AdmissionReviews.
PATH = "/admission"


class _Hook:
    def __init__(
        self,
        current: Callable[[], Snapshot | None],
        rules: AdmissionRules,
        audit: AuditQueue,
        max_body_bytes: int,
    ):
        self.current = current
        self.rules = rules
        self.audit = audit
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, "405 Method Not Allowed",
                           {"error": f"{PATH} takes POST (an AdmissionReview)"},
                           [("Allow", "POST")])  # fmt: skip
        got = self.body(environ)
        if isinstance(got, str):
            return _answer(start_response, "400 Bad Request", {"error": got})
        try:
            request = parse_review(got)
        except ReviewError as exc:
            return _answer(start_response, "400 Bad Request", {"error": str(exc)})
        try:
            decision = review(request, self.current(), self.rules, now_s=time.time())
        except Exception:  # a fault of ours must not block the cluster's workloads
            log.exception("admission review %s failed: allowed", request.get("uid"))
            decision = Decision(
                uid=request["uid"],
                allowed=True,
                action="error",
                tenant="",
                subject=str((request.get("kind") or {}).get("kind", "?")),
                actor=str((request.get("userInfo") or {}).get("username") or ""),
                warnings=("gpuledger: allowed without a check (the webhook failed; see its log)",),
            )
        self.audit.put(decision)
        return _answer(start_response, "200 OK", decision.response())

    def body(self, environ: WSGIEnvironment) -> bytes | str:
        """The request's body, or why it is refused (too long: refused before it is read when
        its length is given)."""
        limit = self.max_body_bytes
        try:
            length = int(environ.get("CONTENT_LENGTH") or -1)
        except ValueError:
            return f"Content-Length {environ.get('CONTENT_LENGTH')!r} is not a number"
        if length > limit:
            return f"the review is {length:,} bytes, more than {limit:,}"
        stream = environ["wsgi.input"]
        want = length if length >= 0 else limit + 1  # chunked: read to its end, or past limit
        parts, size = [], 0
        while size < want and (chunk := stream.read(min(1 << 16, want - size))):
            parts.append(chunk)
            size += len(chunk)
        if size > limit:
            return f"the review is longer than {limit:,} bytes"
        return b"".join(parts)


def _answer(
    start_response: StartResponse,
    status: str,
    doc: dict[str, Any],
    headers: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    body = json.dumps(doc, separators=(",", ":")).encode()
    start_response(
        status,
        [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
         *(headers or [])],
    )  # fmt: skip
    return [body]
