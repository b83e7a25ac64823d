"""``POST /admission``: the Kubernetes admission webhook, on the serve process's Flask app.

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
from collections.abc import Callable

import flask

from scheduler_hooks.admission import AdmissionRules, Decision, ReviewError, parse_review, review
from scheduler_hooks.snapshot import Snapshot
from warehouse.client import Warehouse, WarehouseError

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
    """Add ``POST /admission`` to ``server``, deciding from ``current()``'s snapshot."""
    hook = flask.Blueprint("gpuledger_admission", __name__)

    @hook.post("/admission")
    def admission() -> flask.typing.ResponseReturnValue:
        length = flask.request.content_length
        if length is not None and length > max_body_bytes:
            return _bad(f"the review is {length:,} bytes, more than {max_body_bytes:,}")
        body = flask.request.get_data(cache=False)[: max_body_bytes + 1]
        if len(body) > max_body_bytes:
            return _bad(f"the review is longer than {max_body_bytes:,} bytes")
        try:
            request = parse_review(body)
        except ReviewError as exc:
            return _bad(str(exc))
        try:
            decision = review(request, current(), rules, now_s=time.time())
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
        audit.put(decision)
        return flask.jsonify(decision.response())

    server.register_blueprint(hook)


def _bad(reason: str) -> flask.typing.ResponseReturnValue:
    return flask.jsonify(error=reason), 400
