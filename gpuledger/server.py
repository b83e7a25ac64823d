"""HTTP endpoints of the gpuledger server process, beside the dashboard.

- ``POST /api/v1/ingest`` — a batch from an agent (``collector.spool.dump_batch`` bytes, the
  batch id in ``X-Batch-Id``), written through the same ``Ingestor`` as everything else. The
  id becomes the deduplication token, so an agent that re-sends after a lost reply writes once.
- ``GET /healthz`` — 200 when the warehouse answers, 503 otherwise.
- ``GET /metrics`` — gpuledger's own metrics in the Prometheus text format.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

import flask
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from collector.spool import load_batch
from warehouse.client import Warehouse, WarehouseError
from warehouse.ingest import Ingestor

log = logging.getLogger(__name__)


class ServerMetrics:
    """The server's own metrics, in a registry of its own (one per process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rows = Counter(
            "gpuledger_rows_written",
            "Rows written into the warehouse",
            ["table"],
            registry=self.registry,
        )
        self.quarantined = Counter(
            "gpuledger_rows_quarantined", "Rows rejected into quarantine", registry=self.registry
        )
        self.batches = Counter(
            "gpuledger_ingest_batches",
            "Batches received from agents",
            ["outcome"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "gpuledger_ingest_seconds", "Time to write one batch", registry=self.registry
        )
        self.lag = Gauge(
            "gpuledger_ingest_lag_seconds",
            "Age of the newest sample of the last batch when it was written",
            registry=self.registry,
        )
        self.up = Gauge(
            "gpuledger_warehouse_up",
            "1 when the warehouse answered the last check",
            registry=self.registry,
        )

    def record(self, result: object, newest: dt.datetime | None) -> None:
        for table, count in result.written.items():  # type: ignore[attr-defined]
            self.rows.labels(table).inc(count)
        self.quarantined.inc(result.quarantined_total)  # type: ignore[attr-defined]
        if newest is not None:
            self.lag.set((dt.datetime.now(dt.UTC) - newest).total_seconds())


def register(
    server: flask.Flask, wh: Warehouse, ingestor: Ingestor, metrics: ServerMetrics | None = None
) -> ServerMetrics:
    """Add the ingest, health and metrics routes to ``server`` (Dash's Flask app)."""
    metrics = metrics or ServerMetrics()

    @server.post("/api/v1/ingest")
    def ingest() -> flask.typing.ResponseReturnValue:
        batch_id = flask.request.headers.get("X-Batch-Id", "")
        if not batch_id:
            metrics.batches.labels("refused").inc()
            return flask.jsonify(
                error="the X-Batch-Id header is missing: agents name each "
                "batch so that a retry is written once"
            ), 400
        try:
            batch = load_batch(flask.request.get_data())
        except (ValueError, KeyError, TypeError) as exc:
            metrics.batches.labels("refused").inc()
            return flask.jsonify(error=f"the body is not a gpuledger batch: {exc}"), 400
        started = time.perf_counter()
        try:
            result = ingestor.write(batch, batch_id=batch_id)
        except WarehouseError as exc:
            metrics.batches.labels("failed").inc()
            log.error("ingest of batch %s failed: %s", batch_id, exc)
            return flask.jsonify(error=str(exc)), 503
        metrics.seconds.observe(time.perf_counter() - started)
        metrics.batches.labels("written").inc()
        newest = (
            batch.samples["ts"].max()  # type: ignore[call-overload]
            if hasattr(batch.samples, "columns") and len(batch.samples)
            else None
        )
        metrics.record(result, newest)  # type: ignore[arg-type]
        return flask.jsonify(written=dict(result.written), quarantined=result.quarantined_total)

    @server.get("/healthz")
    def healthz() -> flask.typing.ResponseReturnValue:
        try:
            wh.rows("SELECT 1")
        except WarehouseError as exc:
            metrics.up.set(0)
            return flask.jsonify(status="unhealthy", warehouse=str(exc)), 503
        metrics.up.set(1)
        return flask.jsonify(status="ok")

    @server.get("/metrics")
    def prometheus_metrics() -> flask.Response:
        return flask.Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    return metrics
