"""The ``gpuledger`` command line. The only place that calls ``sys.exit``.

    gpuledger demo [--days N] [--gpus N] [--seed S] [--no-serve]
    gpuledger serve
    gpuledger agent [--once]
    gpuledger collect nvml|dcgm URL...|kubernetes|slurm [--once]
    gpuledger import alibaba-v2023|alibaba-v2025 ...
    gpuledger ledger --from YYYY-MM-DD --to YYYY-MM-DD [--by ...] [--idle-policy ...]
    gpuledger sql "SELECT ..." [--format table|csv|json]
    gpuledger db migrate | gpuledger db status

Every command takes ``--config FILE``, ``--data-dir DIR`` and ``--dsn DSN``. A user mistake
(a bad setting, a bad DSN, a locked data directory, bad SQL) ends with one line on stderr
saying what is wrong and what to do, and exit status 2 (settings) or 1 (everything else).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import decimal
import io
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from warehouse.client import WarehouseError

from .settings import Settings, SettingsError, load_settings


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML settings file")
    common.add_argument(
        "--data-dir", help="embedded warehouse directory (default ./gpuledger-data)"
    )
    common.add_argument(
        "--dsn", help="ClickHouse DSN: chdb:///abs/path or http(s)://user:pass@host:8123/db"
    )
    common.add_argument("-v", "--verbose", action="store_true", help="log more")

    parser = argparse.ArgumentParser(
        prog="gpuledger",
        description="Observability and cost allocation for shared GPU clusters.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="simulate a GPU cluster into the warehouse and serve the dashboard",
    )
    demo.add_argument("--days", type=float, help="days to backfill (default 7)")
    demo.add_argument("--gpus", type=int, help="GPUs in the simulated cluster (default 64)")
    demo.add_argument("--seed", type=int, help="random seed (default 0)")
    demo.add_argument(
        "--no-serve", action="store_true", help="backfill, print what was written, and exit"
    )
    demo.add_argument("--port", type=int, help="dashboard port (default 8050)")

    serve = sub.add_parser(
        "serve", parents=[common], help="serve the dashboard and the agents' ingest API"
    )
    serve.add_argument("--port", type=int, help="port (default 8050)")

    sql = sub.add_parser("sql", parents=[common], help="run a SQL query against the warehouse")
    sql.add_argument("query", help='the SQL text, e.g. "SELECT count() FROM gpuledger.gpu_samples"')
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")

    imp = sub.add_parser("import", parents=[common], help="import a public GPU cluster trace")
    kinds = imp.add_subparsers(dest="trace", required=True, metavar="TRACE")
    v2023 = kinds.add_parser(
        "alibaba-v2023", parents=[common], help="Alibaba openb GPU cluster trace (nodes + pods CSV)"
    )
    v2023.add_argument("--nodes", required=True, help="openb_node_list_*.csv")
    v2023.add_argument("--pods", required=True, help="openb_pod_list_*.csv")
    v2025 = kinds.add_parser(
        "alibaba-v2025", parents=[common], help="Alibaba GPU-disaggregated DLRM serving trace"
    )
    v2025.add_argument("file", help="disaggregated_DLRM_trace.csv")
    for trace in (v2023, v2025):
        trace.add_argument(
            "--start",
            required=True,
            help="ISO time of the trace's second 0, with its offset, e.g. "
            "2026-01-01T00:00:00+00:00",
        )
        trace.add_argument("--cluster", help="cluster name to file the trace under")

    agent = sub.add_parser(
        "agent", parents=[common], help="the node agent: NVML (and dcgm-exporter) to the warehouse"
    )
    agent.add_argument("--once", action="store_true", help="collect once, print, and exit")

    collect = sub.add_parser("collect", parents=[common], help="run one source in the foreground")
    collect.add_argument("source", choices=("nvml", "dcgm", "kubernetes", "slurm"))
    collect.add_argument("targets", nargs="*", help="dcgm-exporter /metrics URLs (dcgm)")
    collect.add_argument("--once", action="store_true", help="collect once, print, and exit")
    collect.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)"
    )
    collect.add_argument("--sacct", default="sacct", help="the sacct command (slurm)")

    led = sub.add_parser(
        "ledger",
        parents=[common],
        help="GPU-hours, idle time and cost per tenant (or other grouping)",
    )
    led.add_argument("--from", dest="date_from", required=True, help="first day, YYYY-MM-DD (UTC)")
    led.add_argument(
        "--to", dest="date_to", required=True, help="last day, YYYY-MM-DD (UTC), included"
    )
    led.add_argument(
        "--by",
        default="tenant",
        help="tenant|org|project|user|gpu_model|pool|node|queue|workload_type (default tenant)",
    )
    led.add_argument(
        "--idle-policy",
        choices=("weighted", "even", "none"),
        help="how unallocated cost is shared (default: ledger.idle_policy)",
    )
    led.add_argument("--cluster", default="", help="one cluster (default: all)")
    led.add_argument(
        "--source",
        choices=("rollup", "raw"),
        default="rollup",
        help="utilisation from the 1-minute rollup (default) or raw samples",
    )
    led.add_argument("--format", choices=("table", "csv", "json"), default="table")

    why = sub.add_parser("why", parents=[common], help="explain a number, with numbers")
    whys = why.add_subparsers(dest="what", required=True, metavar="WHAT")
    why_cost = whys.add_parser(
        "cost", parents=[common], help="why cost changed from the month before"
    )
    why_cost.add_argument("--month", required=True, help="YYYY-MM")
    why_cost.add_argument("--tenant", default="", help="one tenant (default: the cluster)")
    for explained in (why_cost,):
        explained.add_argument("--cluster", default="", help="one cluster (default: all)")
        explained.add_argument("--format", choices=("text", "json"), default="text")

    db = sub.add_parser("db", parents=[common], help="schema migrations")
    db.add_argument("action", choices=("migrate", "status"))
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, dict[str, Any]] = {}
    if args.data_dir:
        overrides.setdefault("warehouse", {})["data_dir"] = args.data_dir
    if args.dsn:
        overrides.setdefault("warehouse", {})["dsn"] = args.dsn
    for flag, key in (("days", "days"), ("gpus", "gpus"), ("seed", "seed")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.setdefault("simulator", {})[key] = value
    if getattr(args, "port", None) is not None:
        overrides.setdefault("server", {})["port"] = args.port
    return load_settings(args.config, overrides=overrides)


def _cell(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list | tuple):
        return [_cell(v) for v in value]
    return value


def format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str) -> str:
    """Render a result as an aligned text table, CSV, or a JSON array of objects."""
    if fmt == "json":
        return (
            json.dumps([dict(zip(columns, map(_cell, r), strict=True)) for r in rows], indent=1)
            + "\n"
        )
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_cell(v) for v in r] for r in rows])
        return buf.getvalue()
    cells = [[str(_cell(v)) if v is not None else "NULL" for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += [
        "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths, strict=True))
        for r in cells
    ]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    from .app import open_warehouse

    wh = open_warehouse(settings)
    columns, rows = wh.table(args.query)
    sys.stdout.write(format_rows(columns, rows, args.format))
    return 0


def cmd_db(settings: Settings, args: argparse.Namespace) -> int:
    from warehouse.migrate import migrate, status

    from .app import open_warehouse, render_options

    wh = open_warehouse(settings, apply_migrations=False)
    opts = render_options(settings)
    if args.action == "migrate":
        applied = migrate(wh, opts)
        for m in applied:
            print(f"applied {m.version:04d}_{m.name}")
        print(f"{len(applied)} migration(s) applied; schema is up to date")
        return 0
    rows = [
        (
            f"{s.version:04d}",
            s.name,
            ("applied " + s.applied_at.isoformat(timespec="seconds"))
            if s.applied_at
            else "pending",
            "CHANGED since applied" if s.checksum_changed else "",
        )
        for s in status(wh, opts)
    ]
    sys.stdout.write(format_rows(["version", "name", "state", "note"], rows, "table"))
    return 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from .app import open_warehouse
    from .demo import DemoRun, start_live

    wh = open_warehouse(settings)
    started = time.monotonic()
    run = DemoRun.start(wh, settings, progress=lambda m: print(m, file=sys.stderr, flush=True))
    took = time.monotonic() - started
    written = run.result.written
    print(
        f"wrote {sum(written.values()):,} rows in {took:.1f} s into "
        f"{settings.warehouse.resolved_dsn} (database {settings.warehouse.database}):"
    )
    for table, count in sorted(written.items()):
        print(f"  {table:<20} {count:>12,}")
    if run.result.quarantined:
        print(f"  quarantined          {run.result.quarantined_total:>12,}")
        for reason, count in run.result.quarantined.most_common(5):
            print(f"    {count:,} × {reason}")
    if args.no_serve:
        return 0
    scheduler = start_live(run, settings.simulator.interval_s)
    try:
        return _serve(wh, settings, run.ingestor)
    finally:
        scheduler.shutdown(wait=True)
        wh.close()


def _serve(wh: Any, settings: Settings, ingestor: Any) -> int:
    """Serve the dashboard and the ingest/health/metrics API until Ctrl-C or SIGTERM."""
    from dashboards.app import create_app

    from .server import register

    app = create_app(wh, settings)
    register(app.server, wh, ingestor)
    signal.signal(signal.SIGTERM, _terminate)
    url = f"http://{settings.server.host}:{settings.server.port}"
    print(
        f"gpuledger dashboard: {url}  (Ctrl-C to stop; data stays in "
        f"{settings.warehouse.resolved_dsn})",
        flush=True,
    )
    # Threaded, never forking: the embedded engine must not be forked once opened.
    with contextlib.suppress(SystemExit):
        app.run(host=settings.server.host, port=settings.server.port, debug=False, threaded=True)
    return 0


def _terminate(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from warehouse.ingest import Ingestor

    from .app import open_warehouse

    wh = open_warehouse(settings)
    ingestor = Ingestor(wh, settings.warehouse.raw_retention_days)
    stop = threading.Event()
    from collector.kubernetes import KubernetesError
    from collector.nvml import NvmlError
    from collector.slurm import SlurmError

    try:
        threads = _start_embedded_collectors(settings, ingestor, stop, args)
    except (NvmlError, KubernetesError, SlurmError) as exc:
        wh.close()
        raise SettingsError(f"server.collectors: {exc}") from None
    try:
        return _serve(wh, settings, ingestor)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        wh.close()


def _start_embedded_collectors(
    settings: Settings, ingestor: Any, stop: threading.Event, args: argparse.Namespace
) -> list[threading.Thread]:
    """Run server.collectors in this process, writing through the shared ingestor."""
    import uuid

    from collector.pipeline import WarehouseSink

    from .agent import make_pipeline, run_agent

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


def cmd_import(settings: Settings, args: argparse.Namespace) -> int:
    from collector import traces
    from warehouse.ingest import Ingestor, IngestResult

    from .app import open_warehouse

    try:
        start = dt.datetime.fromisoformat(args.start)
    except ValueError:
        raise SettingsError(
            f"--start {args.start!r} is not an ISO time such as 2026-01-01T00:00:00+00:00"
        ) from None
    if start.tzinfo is None:
        raise SettingsError(f"--start {args.start!r} has no UTC offset: add one, e.g. +00:00")
    extra = {"cluster": args.cluster} if args.cluster else {}
    if args.trace == "alibaba-v2023":
        batches = traces.alibaba_v2023(args.nodes, args.pods, start, **extra)
    else:
        batches = traces.alibaba_v2025(args.file, start, **extra)
    wh = open_warehouse(settings)
    # A trace's times lie in the past: retention is no reason to refuse them here.
    ingestor = Ingestor(wh, settings.warehouse.raw_retention_days)
    total = IngestResult()
    try:
        for batch in batches:
            total += ingestor.write(batch)
    except traces.TraceError as exc:
        raise SettingsError(str(exc)) from None
    print(
        f"imported {args.trace} into {settings.warehouse.resolved_dsn} "
        f"(database {settings.warehouse.database}):"
    )
    for table, count in sorted(total.written.items()):
        print(f"  {table:<20} {count:>12,}")
    print(f"  {'quarantined':<20} {total.quarantined_total:>12,}")
    return 0


def _day(text: str, flag: str) -> dt.datetime:
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise SettingsError(f"{flag} {text!r} is not a date: use YYYY-MM-DD") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def cmd_ledger(settings: Settings, args: argparse.Namespace) -> int:
    from warehouse.analytics.ledger import LedgerError, compute_ledger

    from .app import open_warehouse

    start = _day(args.date_from, "--from")
    end = _day(args.date_to, "--to") + dt.timedelta(days=1)
    wh = open_warehouse(settings)
    try:
        result = compute_ledger(
            wh,
            start,
            end,
            by=args.by,
            idle_policy=args.idle_policy or settings.ledger.idle_policy,
            cluster=args.cluster,
            idle_threshold_ratio=settings.ledger.idle_threshold_ratio,
            idle_min_duration_s=settings.ledger.idle_min_duration_s,
            source=args.source,
            currency=settings.ledger.currency,
        )
    except LedgerError as exc:
        raise SettingsError(str(exc)) from None
    doc = result.to_json()
    doc["from"], doc["to"] = args.date_from, args.date_to
    if args.format == "json":
        print(json.dumps(doc, indent=1))
        return 0
    columns = [
        "key",
        "allocated_gpu_hours",
        "used_gpu_hours",
        "idle_gpu_hours",
        "direct_cost",
        "shared_cost",
        "total_cost",
    ]
    rows = [[_fixed(r[c]) for c in columns] for r in doc["rows"]]
    if args.format == "csv":
        sys.stdout.write(format_rows([args.by, *columns[1:]], rows, "csv"))
        return 0
    sys.stdout.write(format_rows([args.by, *columns[1:]], rows, "table"))
    t = doc["totals"]
    print(
        f"\n{args.date_from} to {args.date_to} (UTC), {doc['currency']}, idle policy "
        f"{doc['idle_policy']}"
    )
    for name in (
        "capacity_gpu_hours",
        "allocated_gpu_hours",
        "used_gpu_hours",
        "idle_gpu_hours",
        "unallocated_gpu_hours",
        "stranded_gpu_hours",
        "capacity_cost",
        "unshared_cost",
        "total_cost",
    ):
        print(f"  {name:<22} {_fixed(t[name]) if t[name] is not None else 'n/a'}")
    if doc["conserved"] is not None:
        print(
            f"  conservation: rows + unshared = capacity cost: "
            f"{'holds' if doc['conserved'] else 'DOES NOT HOLD'}"
        )
    return 0


def _fixed(value: Any) -> Any:
    return f"{value:.3f}" if isinstance(value, float) else value


def _print_batch(batch: Any) -> None:
    """What one collection read, kind by kind, for --once."""
    from collector.records import samples_frame

    samples = samples_frame(batch.samples) if len(batch.samples) else None
    print(
        f"{len(batch.samples)} samples, {len(batch.gpus)} GPUs, {len(batch.nodes)} nodes, "
        f"{len(batch.job_events)} job events, {len(batch.rejects)} rejects"
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
    from collector.records import TenantRule
    from collector.tenancy import TenantMapper

    if wh is None and settings.agent.server_url:
        return TenantMapper([])
    from .app import open_warehouse

    own = wh is None
    wh = wh or open_warehouse(settings)
    try:
        rows = wh.rows(f"SELECT kind, pattern, tenant, rank FROM {wh.database}.tenant_rules FINAL")
    finally:
        if own:
            wh.close()
    return TenantMapper([TenantRule(*r) for r in rows])


def _source(settings: Settings, args: argparse.Namespace, warehouse_rules: Any = None) -> Any:
    from .agent import build_sources

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
        import shlex

        from collector.slurm import SlurmCollector

        return SlurmCollector(settings.agent.cluster, mapper, sacct=shlex.split(args.sacct))
    import kubernetes

    from collector.kubernetes import KubernetesCollector

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
    return KubernetesCollector(api, settings.agent.cluster, mapper)


def _run_foreground(settings: Settings, sources: list[Any], once: bool) -> int:
    """Collect once and print, or run the pipeline until Ctrl-C/SIGTERM."""
    from collector.nvml import NvmlError

    from .agent import build_sink, make_pipeline, run_agent, serve_status

    if once:
        for source in sources:
            try:
                _print_batch(source.collect(dt.datetime.now(dt.UTC)))
            except NvmlError as exc:
                raise SettingsError(str(exc)) from None
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


def cmd_agent(settings: Settings, args: argparse.Namespace) -> int:
    from collector.nvml import NvmlError

    from .agent import build_sources

    try:
        sources = build_sources(
            settings, nvml=settings.agent.nvml, dcgm_targets=settings.agent.targets
        )
    except NvmlError as exc:
        raise SettingsError(str(exc)) from None
    if not sources:
        raise SettingsError("the agent has no source: enable agent.nvml or set agent.dcgm_targets")
    return _run_foreground(settings, sources, args.once)


def cmd_collect(settings: Settings, args: argparse.Namespace) -> int:
    from collector.kubernetes import KubernetesError
    from collector.nvml import NvmlError
    from collector.slurm import SlurmError

    try:
        source = _source(settings, args)
        return _run_foreground(settings, [source], args.once)
    except (NvmlError, KubernetesError, SlurmError) as exc:
        raise SettingsError(str(exc)) from None


def cmd_why(settings: Settings, args: argparse.Namespace) -> int:
    from warehouse.analytics.ledger import LedgerError

    from .app import open_warehouse

    wh = open_warehouse(settings)
    ledger = settings.ledger
    try:
        if args.what == "cost":
            from warehouse.analytics.cost_change import why_cost

            result: Any = why_cost(
                wh,
                args.month,
                tenant=args.tenant,
                cluster=args.cluster,
                settings={
                    "idle_threshold_ratio": ledger.idle_threshold_ratio,
                    "idle_min_duration_s": ledger.idle_min_duration_s,
                },
            )
        else:  # pragma: no cover - the parser allows only the above
            raise SettingsError(f"why {args.what} is not known")
    except LedgerError as exc:
        raise SettingsError(str(exc)) from None
    print(json.dumps(result.to_json(), indent=1) if args.format == "json" else result.to_text())
    return 0


COMMANDS = {
    "why": cmd_why,
    "demo": cmd_demo,
    "ledger": cmd_ledger,
    "agent": cmd_agent,
    "collect": cmd_collect,
    "import": cmd_import,
    "serve": cmd_serve,
    "sql": cmd_sql,
    "db": cmd_db,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # the drivers' retry chatter; their failures reach the user as one line
        for name in ("urllib3", "clickhouse_connect"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        settings = _settings(args)
    except SettingsError as exc:
        print(f"gpuledger: settings error: {exc}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.command](settings, args)
    except SettingsError as exc:
        print(f"gpuledger: {exc}", file=sys.stderr)
        return 2
    except WarehouseError as exc:
        print(f"gpuledger: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
