"""HTTP endpoints of the gpuledger server process, beside the dashboard.

- ``POST /api/v1/ingest`` — a batch from an agent (``collector.frame`` bytes, the batch id in
  ``X-Batch-Id``). It is kept in the server's write-ahead spool (fsync'd) and answered 202; a
  flusher thread writes many batches at a time, exactly once (:mod:`warehouse.ingest.coalesce`).
  An id already accepted is answered 200 ``"duplicate"``, so an agent that re-sends after a lost
  reply writes once. A full spool answers 503 with ``Retry-After``: the agent keeps the batch in
  its own spool and sends it again later.
- ``GET /healthz`` — 200 when the warehouse answers and the last group was written, 503
  otherwise; the body shows the spool's depth, the batches set aside and the last error.
- ``GET /metrics`` — gpuledger's own metrics in the Prometheus text format.

What the ingest route refuses, and how (every error answer of these routes is JSON
``{"error": reason}``, a fault of the server's own included, never an HTML page):

- a body longer than ``server.max_body_bytes`` (64 MiB by default): 413, before the body is
  read when its Content-Length says so, else as soon as the read passes the limit (a chunked
  body); a batch whose samples would take more than four times the limit once decompressed is
  refused (400) before they are decompressed;
- a compressed body (a Content-Encoding other than ``identity``): 415 — a batch's samples are
  zstd-compressed already;
- a body while ``server.max_concurrent_bodies`` others (4 by default) are being read and decoded:
  503 with ``Retry-After``, before it is read (counted as ``busy``), so that many large bodies
  at once cannot take the server's memory; the agent sends it again later;
- a body that is not a well-formed batch frame (:mod:`collector.frame`: the magic, the header
  length, a header that is not a JSON object of known kinds, a record that is not a list of its
  fields, samples that are not an Arrow file of SAMPLE_SCHEMA's columns): 400 with the reason;
  nothing is kept, and the agent sets the batch aside (any 4xx but 408 and 429).

An answer given before the body is read goes out at once and closes the connection
(:mod:`gpuledger.httpd`): the rest of the body is never read into memory.

A well-formed batch with rows whose *values* do not fit their record's schema (``gpu_index`` -1
or ``"abc"``, ``cluster`` 123, a string ``memory_total_bytes``, ``attempt`` ``"x"``) is accepted
(202): its other rows are written and those rows are quarantined with the field, the value and
the reason. The reply names them (``quarantined``: how many; ``problems``: the first 100, each
with the kind, the index in the batch, the field, the value and the reason).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import flask
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from collector.frame import BatchFormatError, load_batch
from collector.spool import id_fits
from gpuledger.auditing import Refusals
from gpuledger.tokens import Token, TokenBook, out_of_scope
from warehouse.client import Warehouse, WarehouseError
from warehouse.ingest.screen import schema_problems

if TYPE_CHECKING:
    from warehouse.ingest.coalesce import Coalescer
    from warehouse.ingest.metrics import ServerMetrics

log = logging.getLogger(__name__)

#: What a refused agent is told to wait before sending again, in seconds.
RETRY_AFTER_S = 30
#: The default of ``server.max_body_bytes``.
MAX_BODY_BYTES = 64 << 20
#: The default of ``server.max_concurrent_bodies``.
MAX_CONCURRENT_BODIES = 4
#: Problems named in a 202 reply (all are quarantined).
_PROBLEMS_SHOWN = 100
_TOO_LONG = "the body is longer than server.max_body_bytes: send fewer samples per batch"


def register(
    server: flask.Flask,
    wh: Warehouse,
    coalescer: Coalescer,
    tokens: TokenBook | None,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_concurrent_bodies: int = MAX_CONCURRENT_BODIES,
) -> ServerMetrics:
    """Add the ingest, health and metrics routes to ``server`` (Dash's Flask app). Ingest
    needs a token of ``tokens`` whose cluster (and node) every row belongs to; ``tokens``
    None checks none (``serve --insecure``, and tests of the ingest mechanics). At most
    ``max_concurrent_bodies`` bodies are read and decoded at once."""
    metrics = coalescer.metrics
    bodies = threading.BoundedSemaphore(max_concurrent_bodies)
    denials = Refusals(wh, "ingest.denied")
    api = flask.Blueprint("gpuledger_api", __name__)

    @api.post("/api/v1/ingest")
    def ingest() -> flask.typing.ResponseReturnValue:
        token = None
        if tokens is not None:
            token, why = tokens.check(flask.request.headers.get("Authorization", ""))
            if token is None:
                metrics.batches.labels("unauthorized").inc()
                denials.note("", why)
                refused = flask.jsonify(error=why)
                refused.headers["WWW-Authenticate"] = 'Bearer realm="gpuledger ingest"'
                return refused, 401
        batch_id = flask.request.headers.get("X-Batch-Id", "")
        if not batch_id or not id_fits(batch_id):
            return _refused(
                metrics,
                400,
                "the X-Batch-Id header is missing or too long: agents name each batch (up to "
                "~200 characters) so that a retry is written once",
            )
        refusal = _refuse_before_reading(max_body_bytes)
        if refusal is not None:
            return _refused(metrics, *refusal)
        if not bodies.acquire(blocking=False):  # each body may take max_body_bytes, and more
            metrics.batches.labels("busy").inc()
            return _busy(
                f"the server is reading {max_concurrent_bodies} other batches "
                "(server.max_concurrent_bodies): send this one again later"
            )
        try:
            with metrics.bodies_reading.track_inprogress():
                return take(batch_id, token)
        finally:
            bodies.release()

    def take(batch_id: str, token: Token | None) -> flask.typing.ResponseReturnValue:
        """Read, decode, check and spool the body of an ingest request (in one of the slots)."""
        # A chunked body (no Content-Length) is read up to one byte past the limit: werkzeug
        # stops a read at the limit without saying whether more was coming.
        flask.request.max_content_length = max_body_bytes + 1
        try:
            data = flask.request.get_data(cache=False)
        except RequestEntityTooLarge:
            return _refused(metrics, 413, _TOO_LONG)
        if len(data) > max_body_bytes:
            return _refused(metrics, 413, _TOO_LONG)
        try:
            batch = load_batch(data, max_decoded_bytes=4 * max_body_bytes)
        except BatchFormatError as exc:
            return _refused(metrics, 400, f"the body is not a gpuledger batch: {exc}")
        problems = schema_problems(batch)
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
        reply: dict[str, Any] = {
            "accepted": True,
            "rows": len(batch),
            "spool_batches": coalescer.spool.depth,
        }
        if problems:
            reply |= {"quarantined": len(problems), "problems": problems[:_PROBLEMS_SHOWN]}
        return flask.jsonify(reply), 202

    @api.get("/healthz")
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

    @api.get("/metrics")
    def prometheus_metrics() -> flask.Response:
        return flask.Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    api.register_error_handler(HTTPException, _http_error)
    api.register_error_handler(Exception, _fault)
    server.register_blueprint(api)
    for code in (404, 405):  # raised before a route is chosen: the app's, for /api/ paths
        server.register_error_handler(code, _api_routing_error)
    return metrics


def _refuse_before_reading(max_body_bytes: int) -> tuple[int, str] | None:
    """(status, reason) for a request refused on its headers alone, or None."""
    length = flask.request.content_length
    if length is not None and length > max_body_bytes:
        return 413, (
            f"the body is {length:,} bytes, more than server.max_body_bytes "
            f"({max_body_bytes:,}): send fewer samples per batch"
        )
    encoding = flask.request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        return 415, (
            f"Content-Encoding {encoding!r} is not accepted: send the batch as "
            "collector.frame.dump_batch wrote it (its samples are compressed already)"
        )
    return None


def _refused(metrics: ServerMetrics, status: int, reason: str) -> flask.typing.ResponseReturnValue:
    metrics.batches.labels("refused").inc()
    return flask.jsonify(error=reason), status


def _busy(message: str) -> flask.typing.ResponseReturnValue:
    reply = flask.jsonify(error=message)
    reply.headers["Retry-After"] = str(RETRY_AFTER_S)
    return reply, 503


def _http_error(exc: HTTPException) -> flask.typing.ResponseReturnValue:
    """An HTTP error (413 from a read past the limit, 400 from a broken chunked body) as JSON."""
    reason = _TOO_LONG if exc.code == 413 else (exc.description or exc.name)
    return flask.jsonify(error=reason), exc.code or 500


def _fault(exc: Exception) -> flask.typing.ResponseReturnValue:
    """A fault of the server's own: logged with its traceback, answered 500 as JSON."""
    log.exception("%s %s failed", flask.request.method, flask.request.path)
    return flask.jsonify(
        error=f"the server failed on this request ({type(exc).__name__}); the operator finds "
        "it in the server's log: send the request again later"
    ), 500


def _api_routing_error(exc: HTTPException) -> flask.typing.ResponseReturnValue:
    if flask.request.path.startswith("/api/"):
        return _http_error(exc)
    return exc
