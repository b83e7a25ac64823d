"""The node agent: NVML (and optionally a local dcgm-exporter) every interval, through the
pipeline to the warehouse or a ``gpuledger serve`` process, spooling while either is away.

The agent exposes its own health on ``/healthz`` and metrics on ``/metrics`` (spool depth,
scrape failures per target, rows written, lag), so an existing monitoring system watches
gpuledger itself.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import http.server
import json
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from collector.pipeline import Enricher, HttpSink, Pipeline, Sink, Source
from collector.records import Batch
from collector.spool import Spool
from gpuledger.settings import Settings, SettingsError

log = logging.getLogger(__name__)


class NvmlSource:
    """The NVML collector as a pipeline source: samples, compute processes and health counters
    every step, inventory on the first step and every ``inventory_every`` steps after (GPUs
    come, go, and change health)."""

    name = "nvml"

    def __init__(self, collector: Any, inventory_every: int = 30):
        self.collector = collector
        self.inventory_every = inventory_every
        self._steps = 0

    def collect(self, now: dt.datetime) -> Batch:
        poll = self.collector.collect(now)
        gpus = self.collector.inventory(now) if self._steps % self.inventory_every == 0 else ()
        self._steps += 1
        return Batch(
            samples=tuple(poll.samples),
            gpus=tuple(gpus),
            processes=tuple(poll.processes),
            health=tuple(poll.health),
            rejects=tuple(poll.rejects),
        )

    def close(self) -> None:
        self.collector.close()


def node_name(settings: Settings) -> str:
    return settings.agent.node or socket.gethostname()


def build_sources(settings: Settings, *, nvml: bool, dcgm_targets: Sequence[str]) -> list[Source]:
    """The sources the settings ask for. A missing NVML library is one clear error here."""
    a = settings.agent
    sources: list[Source] = []
    if nvml:
        from collector.nvml import NvmlCollector, PynvmlBackend

        backend = PynvmlBackend.open(a.nvml_library or None)
        sources.append(
            NvmlSource(
                NvmlCollector(
                    backend,
                    cluster=a.cluster,
                    node=node_name(settings),
                    pool=a.pool,
                    proc_root=a.proc_root,
                )
            )
        )
    if dcgm_targets:
        from collector.dcgm.collector import DcgmCollector

        # With NVML on, its inventory (health, serial, MIG layout) describes the GPUs.
        sources.append(
            DcgmCollector(list(dcgm_targets), a.cluster, pool=a.pool, inventory=not nvml)
        )
    return sources


def build_sink(settings: Settings) -> tuple[Sink, Callable[[], None]]:
    """The sink: a gpuledger server URL, or the warehouse itself. Returns (sink, close)."""
    a = settings.agent
    if a.server_url:
        token = a.token
        if a.token_file:
            try:
                token = Path(a.token_file).expanduser().read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise SettingsError(
                    f"agent.token_file {a.token_file!r} cannot be read: {exc.strerror}"
                ) from None
        if not token:
            log.warning(
                "agent.token is empty: %s refuses batches without one (make one with "
                "`gpuledger token create --cluster %s`)",
                a.server_url,
                a.cluster,
            )
        sink = HttpSink(a.server_url, token=token, verify=a.tls_ca_file or True)
        return sink, sink.close
    from gpuledger.app import open_warehouse
    from warehouse.ingest.sink import WarehouseSink
    from warehouse.ingest.writer import Ingestor

    wh = open_warehouse(settings)
    return WarehouseSink(Ingestor(wh, settings.warehouse.raw_retention_days)), wh.close


class AgentMetrics(Collector):
    """Reads the pipeline's and the sources' counters at scrape time."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def collect(self) -> Any:
        p, stats = self.pipeline, self.pipeline.stats
        yield GaugeMetricFamily(
            "gpuledger_agent_spool_batches", "Batches waiting in the spool", value=p.spool.depth
        )
        yield GaugeMetricFamily(
            "gpuledger_agent_spool_bytes", "Bytes in the spool", value=p.spool.size_bytes
        )
        yield CounterMetricFamily(
            "gpuledger_agent_spool_dropped_batches",
            "Batches refused because the spool was full",
            value=p.spool.dropped_batches,
        )
        yield CounterMetricFamily(
            "gpuledger_agent_batches_sent",
            "Batches delivered to the sink",
            value=stats.batches_sent,
        )
        yield CounterMetricFamily(
            "gpuledger_agent_rows_sent", "Rows delivered to the sink", value=stats.rows_sent
        )
        yield CounterMetricFamily(
            "gpuledger_agent_send_failures",
            "Deliveries that failed and were spooled",
            value=stats.send_failures,
        )
        lag = GaugeMetricFamily(
            "gpuledger_agent_lag_seconds", "Seconds since the sink last took a batch"
        )
        if stats.last_success is not None:
            lag.add_metric([], (dt.datetime.now(dt.UTC) - stats.last_success).total_seconds())
        yield lag
        errors = CounterMetricFamily(
            "gpuledger_agent_source_errors",
            "Collection steps that raised, per source",
            labels=["source"],
        )
        for name, count in stats.source_errors.items():
            errors.add_metric([name], count)
        yield errors
        failures = CounterMetricFamily(
            "gpuledger_agent_scrape_failures",
            "Failed scrapes per dcgm-exporter target",
            labels=["target"],
        )
        for source in p.sources:
            for target, count in getattr(source, "failures", {}).items():
                failures.add_metric([target], count)
        yield failures
        lookups = CounterMetricFamily(
            "gpuledger_agent_enricher_errors",
            "Failed look-ups per enricher (the kubelet's pod-resources API)",
            labels=["enricher"],
        )
        for enricher in p.enrichers:
            if (lookup_errors := getattr(enricher, "errors", None)) is not None:
                lookups.add_metric([getattr(enricher, "name", "")], lookup_errors)
        yield lookups


class _Handler(http.server.BaseHTTPRequestHandler):
    registry: CollectorRegistry
    healthy: Callable[[], tuple[bool, dict[str, Any]]]

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, ctype, code = generate_latest(self.registry), CONTENT_TYPE_LATEST, 200
        elif self.path == "/healthz":
            ok, detail = type(self).healthy()
            body, ctype, code = json.dumps(detail).encode(), "application/json", 200 if ok else 503
        else:
            body, ctype, code = b"not found\n", "text/plain", 404
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


def serve_status(
    pipeline: Pipeline, interval_s: float, host: str, port: int
) -> http.server.ThreadingHTTPServer:
    """Serve /metrics and /healthz in a thread; healthy while batches reach the sink."""
    registry = CollectorRegistry()
    registry.register(AgentMetrics(pipeline))

    def healthy() -> tuple[bool, dict[str, Any]]:
        last = pipeline.stats.last_success
        age = (dt.datetime.now(dt.UTC) - last).total_seconds() if last else None
        ok = pipeline.spool.depth == 0 or (age is not None and age < 3 * interval_s)
        return ok, {
            "status": "ok" if ok else "unhealthy",
            "spool_batches": pipeline.spool.depth,
            "seconds_since_delivery": age,
        }

    handler = type(
        "AgentHandler", (_Handler,), {"registry": registry, "healthy": staticmethod(healthy)}
    )
    server = http.server.ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, name="agent-status", daemon=True).start()
    return server


def run_agent(
    pipeline: Pipeline,
    interval_s: float,
    stop: threading.Event,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> None:
    """Step the pipeline every ``interval_s`` until ``stop`` is set; then flush the spool."""
    while not stop.is_set():
        started = clock()
        pipeline.step(started)
        elapsed = (clock() - started).total_seconds()
        stop.wait(max(0.0, interval_s - elapsed))
    if not pipeline.flush():
        log.warning(
            "stopping with %d batch(es) still spooled in %s: they are sent on the next start",
            pipeline.spool.depth,
            pipeline.spool.directory,
        )


def slurm_job_enricher(directory: str, node: str) -> Callable[[Batch], Batch]:
    """Label samples with the Slurm job the node's mapping files say holds each GPU
    (re-read every batch: prolog and epilog scripts rewrite them as jobs come and go)."""
    from collector.slurm.parse import enrich_job_ids, read_job_mapping

    def enrich(batch: Batch) -> Batch:
        if not len(batch.samples):
            return batch
        mapping = read_job_mapping(directory)
        if not mapping:
            return batch
        samples = enrich_job_ids(batch.samples, mapping, node=node)
        return dataclasses.replace(batch, samples=samples)

    return enrich


def pod_resources_enricher(settings: Settings, sources: Sequence[Source]) -> Enricher:
    """Label samples with the pods the kubelet's pod-resources API says hold their GPUs; MIG
    device UUIDs are resolved through the NVML source's backend, when there is one."""
    from collector.kubernetes.podresources import (
        PodResourcesClient,
        PodResourcesEnricher,
        nvml_mig_uuids,
    )

    a = settings.agent
    nvml = next((s for s in sources if isinstance(s, NvmlSource)), None)
    mig_uuids = None
    if nvml is not None:
        backend = nvml.collector.backend
        mig_uuids = functools.partial(nvml_mig_uuids, backend)
    return PodResourcesEnricher(
        PodResourcesClient(a.pod_resources_socket),
        node=node_name(settings),
        refresh_s=a.pod_resources_refresh_s,
        mig_uuids=mig_uuids,
    )


def make_pipeline(settings: Settings, sources: Sequence[Source], sink: Sink) -> Pipeline:
    """The pipeline, with the enrichers the settings choose."""
    a = settings.agent
    enrichers: list[Enricher] = []
    if a.slurm_job_map_dir:
        enrichers.append(slurm_job_enricher(a.slurm_job_map_dir, node_name(settings)))
    if a.pod_resources_socket:
        enrichers.append(pod_resources_enricher(settings, sources))
    return Pipeline(
        sources,
        sink,
        Spool(settings.agent_spool_dir, a.spool_max_bytes),
        enrichers=enrichers,
        node=node_name(settings),
        max_backoff_s=a.max_backoff_s,
    )
