"""The ingest path's own metrics (rows written and quarantined, batches by outcome, group
sizes, spool depth, lag), served by ``gpuledger serve`` at ``/metrics``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
            "Agent batches by outcome: accepted (spooled), duplicate, refused (bad request), "
            "full (spool full, 503), failed (spool not writable, 503), busy (as many bodies "
            "as server.max_concurrent_bodies being read, 503), written",
            ["outcome"],
            registry=self.registry,
        )
        self.bodies_reading = Gauge(
            "gpuledger_ingest_bodies_reading",
            "Agent batch bodies being read and decoded now (at most server.max_concurrent_bodies)",
            registry=self.registry,
        )
        self.seconds = Histogram(
            "gpuledger_ingest_seconds",
            "Time to write one group of batches (one insert per table)",
            registry=self.registry,
        )
        self.group_batches = Histogram(
            "gpuledger_ingest_group_batches",
            "Agent batches per group written",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
            registry=self.registry,
        )
        self.group_rows = Histogram(
            "gpuledger_ingest_group_rows",
            "Rows per group written",
            buckets=(10, 100, 1000, 5000, 10_000, 50_000, 100_000, 500_000, 1_000_000),
            registry=self.registry,
        )
        self.flush_failures = Counter(
            "gpuledger_ingest_flush_failures",
            "Group writes that failed (each is retried until written)",
            registry=self.registry,
        )
        self.spool_batches = Gauge(
            "gpuledger_ingest_spool_batches",
            "Agent batches accepted and not yet written",
            registry=self.registry,
        )
        self.spool_bytes = Gauge(
            "gpuledger_ingest_spool_bytes", "Bytes in the ingest spool", registry=self.registry
        )
        self.oldest = Gauge(
            "gpuledger_ingest_oldest_pending_seconds",
            "How long the oldest batch not yet written has waited",
            registry=self.registry,
        )
        self.lag = Gauge(
            "gpuledger_ingest_lag_seconds",
            "Age of the newest sample of the last group when it was written",
            registry=self.registry,
        )
        self.up = Gauge(
            "gpuledger_warehouse_up",
            "1 when the warehouse answered the last check",
            registry=self.registry,
        )

    def watch(
        self,
        depth: Callable[[], float],
        size_bytes: Callable[[], float],
        oldest_pending_s: Callable[[], float],
    ) -> None:
        """Read the spool's gauges through these functions at each scrape."""
        self.spool_batches.set_function(depth)
        self.spool_bytes.set_function(size_bytes)
        self.oldest.set_function(oldest_pending_s)

    def record(self, result: object, newest: dt.datetime | None) -> None:
        for table, count in result.written.items():  # type: ignore[attr-defined]
            self.rows.labels(table).inc(count)
        self.quarantined.inc(result.quarantined_total)  # type: ignore[attr-defined]
        if newest is not None:
            self.lag.set((dt.datetime.now(dt.UTC) - newest).total_seconds())
