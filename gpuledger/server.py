"""HTTP endpoints of the gpuledger server process, beside the dashboard.

- ``POST /api/v1/ingest`` — a batch from an agent (``collector.spool.dump_batch`` bytes, the
  batch id in ``X-Batch-Id``). It is kept in the server's write-ahead spool (fsync'd) and
  answered 202; a flusher thread writes many batches at a time, exactly once
  (:mod:`warehouse.ingest.coalesce`). An id already accepted is answered 200 ``"duplicate"``, so an
  agent that re-sends after a lost reply writes once. A full spool answers 503 with
  ``Retry-After``: the agent keeps the batch in its own spool and sends it again later.
- ``GET /healthz`` — 200 when the warehouse answers and the last group was written, 503
  otherwise; the body shows the spool's depth and the last error either way.
- ``GET /metrics`` — gpuledger's own metrics in the Prometheus text format.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import flask
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from collector.spool import id_fits, load_batch
from gpuledger.auditing import Refusals
from gpuledger.tokens import TokenBook, out_of_scope
from warehouse.client import Warehouse, WarehouseError

if TYPE_CHECKING:
    from warehouse.ingest.coalesce import Coalescer
    from warehouse.ingest.metrics import ServerMetrics

log = logging.getLogger(__name__)

#: What a refused agent is told to wait before sending again, in seconds.
RETRY_AFTER_S = 30


def register(
    server: flask.Flask, wh: Warehouse, coalescer: Coalescer, tokens: TokenBook | None
) -> ServerMetrics:
    """Add the ingest, health and metrics routes to ``server`` (Dash's Flask app). Ingest
    needs a token of ``tokens`` whose cluster (and node) every row belongs to; ``tokens``
    None checks none (``serve --insecure``, and tests of the ingest mechanics)."""
    metrics = coalescer.metrics
    denials = Refusals(wh, "ingest.denied")

    @server.post("/api/v1/ingest")
    def ingest() -> flask.typing.ResponseReturnValue:
        token = None
        if tokens is not None:
            token, why = tokens.check(flask.request.headers.get("Authorization", ""))
            if token is None:
                metrics.batches.labels("unauthorized").inc()
                denials.note("", why)
                reply = flask.jsonify(error=why)
                reply.headers["WWW-Authenticate"] = 'Bearer realm="gpuledger ingest"'
                return reply, 401
        batch_id = flask.request.headers.get("X-Batch-Id", "")
        if not batch_id or not id_fits(batch_id):
            metrics.batches.labels("refused").inc()
            return flask.jsonify(
                error="the X-Batch-Id header is missing or too long: agents name each "
                "batch (up to ~200 characters) so that a retry is written once"
            ), 400
        data = flask.request.get_data()
        try:
            batch = load_batch(data)
        except (ValueError, KeyError, TypeError) as exc:
            metrics.batches.labels("refused").inc()
            return flask.jsonify(error=f"the body is not a gpuledger batch: {exc}"), 400
        stray = out_of_scope(batch, token) if token is not None else None
        if token is not None and stray is not None:
            metrics.batches.labels("forbidden").inc()
            denials.note(f"token {token.id}", stray)
            return flask.jsonify(error=stray), 403
        try:
            outcome = coalescer.accept(batch_id, data, batch)
        except OSError as exc:
            metrics.batches.labels("failed").inc()
            log.error("cannot spool batch %s: %s", batch_id, exc)
            return _busy(f"the server cannot keep the batch ({exc.strerror}); send it later")
        metrics.batches.labels(outcome).inc()
        if outcome == "duplicate":
            return flask.jsonify(duplicate=True, batch_id=batch_id), 200
        if outcome == "full":
            return _busy(
                f"the server's ingest spool is full ({coalescer.spool.size_bytes} of "
                f"{coalescer.spool.max_bytes} bytes; last write error: "
                f"{coalescer.last_error}): keep the batch and send it again later"
            )
        return flask.jsonify(
            accepted=True, rows=len(batch), spool_batches=coalescer.spool.depth
        ), 202

    @server.get("/healthz")
    def healthz() -> flask.typing.ResponseReturnValue:
        body = coalescer.status()
        try:
            wh.rows("SELECT 1")
        except WarehouseError as exc:
            metrics.up.set(0)
            return flask.jsonify(status="unhealthy", warehouse=str(exc), **body), 503
        metrics.up.set(1)
        ok = body["last_error"] is None and body["flusher"] == "running"
        return flask.jsonify(status="ok" if ok else "unhealthy", warehouse="ok", **body), (
            200 if ok else 503
        )

    @server.get("/metrics")
    def prometheus_metrics() -> flask.Response:
        return flask.Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    return metrics


def _busy(message: str) -> flask.typing.ResponseReturnValue:
    reply = flask.jsonify(error=message)
    reply.headers["Retry-After"] = str(RETRY_AFTER_S)
    return reply, 503
