"""`gpuledger agent` and `gpuledger collect`: sources in the foreground, and the collectors
`gpuledger serve` hosts in-process."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import sys
import threading
from typing import Any

from gpuledger.output import format_rows
from gpuledger.settings import Settings, SettingsError
from gpuledger_errors import SourceError


def _print_batch(batch: Any) -> None:
    """What one collection read, kind by kind, for --once."""
    from collector.records import samples_frame

    samples = samples_frame(batch.samples) if len(batch.samples) else None
    print(
        f"{len(batch.samples)} samples, {len(batch.gpus)} GPUs, {len(batch.nodes)} nodes, "
        f"{len(batch.job_events)} job events, {len(batch.processes)} GPU processes, "
        f"{len(batch.health)} GPU health rows, {len(batch.rejects)} rejects"
    )
    if samples is not None:
        cols = [
            "node",
            "gpu_uuid",
            "gpu_index",
            "mig_instance",
            "gpu_model",
            "gpu_util_ratio",
            "memory_used_bytes",
            "power_watts",
            "temperature_celsius",
            "pod",
            "job_id",
        ]
        sys.stdout.write(format_rows(cols, samples.select(cols).rows(), "table"))
    for kind, fields in (
        ("gpus", ("node", "gpu_uuid", "mig_instance", "gpu_model", "health")),
        ("nodes", ("node", "gpu_model", "gpu_count", "state")),
        ("job_events", ("ts", "job_id", "event", "tenant", "gpus_requested", "node", "reason")),
        (
            "processes",
            (
                "gpu_uuid",
                "mig_instance",
                "pid",
                "used_memory_bytes",
                "sm_util_ratio",
                "pod_uid",
                "slurm_job_id",
            ),
        ),
        ("health", ("gpu_uuid", "clock_event_reasons", "ecc_dbe_volatile", "gpu_lost")),
        ("rejects", ("source", "field", "value", "reason")),
    ):
        records = getattr(batch, kind)
        if records:
            sys.stdout.write(
                format_rows(
                    list(fields), [[getattr(r, f) for f in fields] for r in records], "table"
                )
            )


def _tenant_mapper(settings: Settings, wh: Any = None) -> Any:
    """Tenant rules from the warehouse when it is reachable here; none otherwise."""
    from collector.tenancy import TenantMapper

    if wh is None and settings.agent.server_url:
        return TenantMapper([])
    from gpuledger.app import open_warehouse
    from warehouse.analytics.fleet import tenant_mapper

    own = wh is None
    wh = wh or open_warehouse(settings)
    try:
        return tenant_mapper(wh)
    finally:
        if own:
            wh.close()


def _source(settings: Settings, args: argparse.Namespace, warehouse_rules: Any = None) -> Any:
    from gpuledger.agent import build_sources

    if args.source == "nvml":
        return build_sources(settings, nvml=True, dcgm_targets=())[0]
    if args.source == "dcgm":
        targets = args.targets or settings.agent.targets
        if not targets:
            raise SettingsError(
                "collect dcgm needs the exporters' URLs, e.g. "
                "http://node-1:9400/metrics (or agent.dcgm_targets)"
            )
        return build_sources(settings, nvml=False, dcgm_targets=targets)[0]
    mapper = _tenant_mapper(settings, warehouse_rules)
    if args.source == "slurm":
        from collector.slurm.collector import SlurmCollector

        return SlurmCollector(settings.agent.cluster, mapper, sacct=_command(args.sacct))
    import kubernetes

    from collector.kubernetes.collector import KubernetesCollector

    try:
        if args.kubeconfig:
            api = kubernetes.config.new_client_from_config(config_file=args.kubeconfig)
        else:
            try:
                kubernetes.config.load_incluster_config()
                api = kubernetes.client.ApiClient()
            except kubernetes.config.ConfigException:
                api = kubernetes.config.new_client_from_config()
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise SettingsError(f"no Kubernetes configuration: {exc}; pass --kubeconfig") from None
    except Exception as exc:  # the loader trips over a file that is not a kubeconfig
        raise SettingsError(
            f"{args.kubeconfig or '~/.kube/config'} is not a kubeconfig "
            f"({type(exc).__name__}: {exc}): pass the cluster's kubeconfig with --kubeconfig"
        ) from None
    return KubernetesCollector(
        api,
        settings.agent.cluster,
        mapper,
        state_dir=settings.kubernetes_state_dir,
        state_save_interval_s=settings.kubernetes.state_save_interval_s,
    )


def _command(text: str) -> list[str]:
    """A command given as one argument (``--sacct "ssh login1 sacct"``), split as a shell
    splits it."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SettingsError(
            f"--sacct {text!r} is not a command line ({exc}): quote it as a shell would"
        ) from None
    if not words:
        raise SettingsError("--sacct is empty: give the sacct command, e.g. /usr/bin/sacct")
    return words


def _run_foreground(settings: Settings, sources: list[Any], once: bool) -> int:
    """Collect once and print, or run the pipeline until Ctrl-C/SIGTERM."""
    from gpuledger.agent import build_sink, make_pipeline, run_agent, serve_status

    if once:
        if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
            # a failed target is this command's error, said once; the per-scrape warning
            # is for a long-running agent (-v still shows it)
            logging.getLogger("collector.dcgm").setLevel(logging.ERROR)
        silent: dict[str, str] = {}
        for source in sources:
            _print_batch(source.collect(dt.datetime.now(dt.UTC)))
            silent |= source.unanswered() if hasattr(source, "unanswered") else {}
        if silent:
            # a one-off read is a check: a target that answered nothing fails it
            raise SourceError(
                f"{len(silent)} target(s) answered nothing: "
                + "; ".join(
                    why if why.startswith(t) else f"{t}: {why}" for t, why in silent.items()
                )
                + ". Check that the exporter runs and that the URL is reachable from here"
            )
        return 0
    sink, close = build_sink(settings)
    pipeline = make_pipeline(settings, sources, sink)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    status = serve_status(
        pipeline, settings.agent.interval_s, settings.agent.status_host, settings.agent.status_port
    )
    print(
        f"gpuledger agent: {', '.join(s.name for s in sources)} every "
        f"{settings.agent.interval_s:g} s; status on http://{settings.agent.status_host}:"
        f"{status.server_port}/healthz",
        flush=True,
    )
    try:
        watcher = next((s for s in sources if hasattr(s, "run")), None)
        if watcher is not None:  # a watch source pushes batches as events arrive
            import uuid

            watcher.run(stop, lambda b: pipeline.deliver(b, f"{watcher.name}:{uuid.uuid4().hex}"))
        else:
            run_agent(pipeline, settings.agent.interval_s, stop)
    except KeyboardInterrupt:
        stop.set()
        pipeline.flush()
    finally:
        status.shutdown()
        status.server_close()
        close()
        st = pipeline.stats
        print(
            f"gpuledger agent: stopped; collected {st.samples_collected} samples, delivered "
            f"{st.batches_sent} batches ({st.rows_sent} rows), {pipeline.spool.depth} still "
            "spooled",
            flush=True,
        )
    return 0


def start_embedded_collectors(
    settings: Settings, ingestor: Any, stop: threading.Event, args: argparse.Namespace
) -> list[threading.Thread]:
    """Run server.collectors in this process, writing through the shared ingestor."""
    import uuid

    from gpuledger.agent import make_pipeline, run_agent
    from warehouse.ingest.sink import WarehouseSink

    threads = []
    for name in settings.server.sources:
        ns = argparse.Namespace(source=name, targets=[], kubeconfig=None, sacct="sacct")
        source = _source(settings, ns, warehouse_rules=ingestor.wh)
        pipeline = make_pipeline(settings, [source], WarehouseSink(ingestor))
        call: tuple[Any, ...]
        if hasattr(source, "run"):  # a watch: batches arrive as events do
            target: Any = source.run
            call = (stop, lambda b, p=pipeline, n=name: p.deliver(b, f"{n}:{uuid.uuid4().hex}"))
        else:
            target, call = run_agent, (pipeline, settings.agent.interval_s, stop)
        thread = threading.Thread(target=target, args=call, name=f"collector-{name}", daemon=True)
        thread.start()
        threads.append(thread)
        print(f"collecting {name} in-process every {settings.agent.interval_s:g} s", flush=True)
    return threads


def cmd_agent(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.agent import build_sources

    sources = build_sources(settings, nvml=settings.agent.nvml, dcgm_targets=settings.agent.targets)
    if not sources:
        raise SettingsError("the agent has no source: enable agent.nvml or set agent.dcgm_targets")
    return _run_foreground(settings, sources, args.once)


def cmd_collect(settings: Settings, args: argparse.Namespace) -> int:
    return _run_foreground(settings, [_source(settings, args)], args.once)
