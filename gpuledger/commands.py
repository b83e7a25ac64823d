"""The warehouse-side commands: demo, serve, sql, db, import, ledger, why."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import signal
import sys
import threading
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuledger.collect_commands import start_embedded_collectors
from gpuledger.inputs import day, instant
from gpuledger.output import format_duration, format_rows
from gpuledger.settings import Settings, SettingsError
from gpuledger_errors import InputError
from warehouse.times import FIRST_INSTANT

if TYPE_CHECKING:
    from warehouse.ledger import IdleRule, Ledger


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse

    wh = open_warehouse(settings, must_exist=True)
    wh.name_tables_unqualified()
    columns, rows = wh.table(args.query)
    sys.stdout.write(format_rows(columns, rows, args.format))
    return 0


def cmd_db(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse, render_options
    from warehouse.migrate import migrate, status

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
    from gpuledger.app import open_warehouse
    from gpuledger.demo import DemoRun, start_live

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
        return _serve(wh, settings)
    finally:
        scheduler.shutdown(wait=True)
        wh.close()


def _serve(wh: Any, settings: Settings) -> int:
    """Serve the dashboard and the ingest/health/metrics API until Ctrl-C or SIGTERM."""
    from dashboards.app import create_app
    from gpuledger.server import register
    from warehouse.ingest.coalesce import Coalescer

    s = settings.server
    spool_dir = settings.server_spool_dir
    coalescer = Coalescer(  # a CoalesceError (a ConfigError) names server.spool_dir
        wh,
        settings.warehouse.raw_retention_days,
        spool_dir,
        max_rows=s.coalesce_max_rows,
        max_ms=s.coalesce_max_ms,
        max_bytes=s.spool_max_bytes,
        dedup_window_s=s.dedup_window_s,
    )
    app = create_app(wh, idle=_idle_rule(settings), currency=settings.ledger.currency)
    register(app.server, wh, coalescer)
    coalescer.start()
    signal.signal(signal.SIGTERM, _terminate)
    url = f"http://{s.host}:{s.port}"
    print(
        f"gpuledger dashboard: {url}  (Ctrl-C to stop; data stays in "
        f"{settings.warehouse.resolved_dsn}; agents' batches wait in {spool_dir})",
        flush=True,
    )
    # Threaded, never forking: the embedded engine must not be forked once opened.
    try:
        with contextlib.suppress(SystemExit):
            app.run(host=s.host, port=s.port, debug=False, threaded=True)
    finally:
        coalescer.stop(timeout_s=30)
    return 0


def _terminate(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse
    from warehouse.ingest.writer import Ingestor

    wh = open_warehouse(settings)
    ingestor = Ingestor(wh, settings.warehouse.raw_retention_days)
    stop = threading.Event()
    from collector.kubernetes.collector import KubernetesError
    from collector.nvml import NvmlError
    from collector.slurm.collector import SlurmError

    try:
        threads = start_embedded_collectors(settings, ingestor, stop, args)
    except (NvmlError, KubernetesError, SlurmError) as exc:
        wh.close()
        raise SettingsError(f"server.collectors: {exc}") from exc
    if settings.ledger.seal_interval_s:
        from warehouse.ledger import start_sealer

        threads.append(
            start_sealer(
                wh,
                stop,
                interval_s=settings.ledger.seal_interval_s,
                idle=_idle_rule(settings),
                clock=_now,
                warehouse_cluster=settings.warehouse.cluster,
            )
        )
    try:
        return _serve(wh, settings)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        wh.close()


def cmd_import(settings: Settings, args: argparse.Namespace) -> int:
    from collector.traces import alibaba as traces
    from gpuledger.app import open_warehouse
    from warehouse.ingest.writer import Ingestor, IngestResult

    start = instant(args.start, "--start", "2026-01-01T00:00:00+00:00", offset=True)
    extra = {"cluster": args.cluster} if args.cluster else {}
    if args.trace == "alibaba-v2023":
        batches = traces.alibaba_v2023(args.nodes, args.pods, start, **extra)
    else:
        batches = traces.alibaba_v2025(args.file, start, **extra)
    wh = open_warehouse(settings)
    # A trace's times lie in the past: retention is no reason to refuse them here.
    ingestor = Ingestor(wh, settings.warehouse.raw_retention_days)
    total = IngestResult()
    for batch in batches:
        total += ingestor.write(batch)
    print(
        f"imported {args.trace} into {settings.warehouse.resolved_dsn} "
        f"(database {settings.warehouse.database}):"
    )
    for table, count in sorted(total.written.items()):
        print(f"  {table:<20} {count:>12,}")
    print(f"  {'quarantined':<20} {total.quarantined_total:>12,}")
    return 0


def _now() -> dt.datetime:
    """The one place the commands read the clock; everything below takes ``now``."""
    return dt.datetime.now(dt.UTC)


def _idle_rule(settings: Settings) -> IdleRule:
    from warehouse.ledger import IdleRule

    return IdleRule(settings.ledger.idle_threshold_ratio, settings.ledger.idle_min_duration_s)


def cmd_ledger(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse
    from warehouse.ledger import Window, compute_ledger, load_price_book

    first = day(args.date_from, "--from").date()
    last = day(args.date_to, "--to").date()
    wh = open_warehouse(settings, must_exist=True)
    ledger = compute_ledger(
        wh,
        Window.days(first, last),
        now=_now(),
        group_by=args.by,
        idle_policy=args.idle_policy or settings.ledger.idle_policy,
        idle=_idle_rule(settings),
        prices=load_price_book(wh, settings.ledger.currency),
        cluster=_cluster(wh, args.cluster, one=False),
        source=args.source,
        sealed=not args.no_seals,
        energy=args.energy,
    )
    if args.format == "json":
        print(json.dumps(ledger.to_json(), indent=1))
        return 0
    sys.stdout.write(render_ledger(ledger, args.format))
    return 0


_LEDGER_COLUMNS = (
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unmeasured_gpu_hours",
    "direct_cost",
    "shared_cost",
    "total_cost",
)
_TOTALS_SHOWN = (
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unmeasured_gpu_hours",
    "unallocated_gpu_hours",
    "stranded_gpu_hours",
    "capacity_cost",
    "unshared_cost",
    "total_cost",
)


def render_ledger(ledger: Ledger, fmt: str) -> str:
    """The ledger as a table (with its totals and conservation line) or as CSV rows. Under the
    ``none`` policy the unallocated capacity is a last line with columns of its own."""
    rows = [[r.key, *(_fixed(getattr(r, c)) for c in _LEDGER_COLUMNS)] for r in ledger.rows]
    header = [ledger.group_by, *_LEDGER_COLUMNS]
    line = ledger.unallocated
    if line is not None:
        header += ["unallocated_gpu_hours", "unallocated_cost"]
        rows = [[*r, "", ""] for r in rows]
        blank = [""] * (len(_LEDGER_COLUMNS) - 1)
        rows.append(
            [f"({line.name})", *blank, _fixed(line.cost), _fixed(line.gpu_hours), _fixed(line.cost)]
        )
    if fmt == "csv":
        return format_rows(header, rows, "csv")
    w = ledger.window
    out = [
        format_rows(header, rows, "table"),
        f"\n{w.first_day} to {w.last_day} (UTC), {ledger.currency}, idle policy "
        f"{ledger.idle_policy.value}\n",
    ]
    for name in _TOTALS_SHOWN:
        value = getattr(ledger.totals, name)
        out.append(f"  {name:<22} {_fixed(value) if value is not None else 'n/a'}\n")
    out.append(f"  {ledger.conservation_note()}\n")
    out.extend(f"  {c.note()}\n" for c in ledger.censored)
    e = ledger.energy
    if e is not None:
        unpriced = f"; {e.unpriced_kwh:.3f} kWh with no energy_kwh price" if e.unpriced_kwh else ""
        out.append(
            f"\nenergy (beside the GPU-hour ledger): {e.energy_kwh:.3f} kWh, "
            f"{e.energy_cost} {ledger.currency}{unpriced}\n"
        )
        out.append(
            format_rows(
                [ledger.group_by, "energy_kwh", "energy_cost"],
                [[r.key, f"{r.energy_kwh:.3f}", str(r.energy_cost)] for r in e.rows],
                "table",
            )
        )
    return "".join(out)


def cmd_seal(settings: Settings, args: argparse.Namespace) -> int:
    """Seal the ledger's finished days (see warehouse.ledger.seal)."""
    from gpuledger.app import open_warehouse
    from warehouse.ledger import seal_days

    since = day(args.since, "--since").date() if args.since else None
    until = (day(args.until, "--until") + dt.timedelta(days=1)).date() if args.until else None
    if since and until and until <= since:
        raise InputError(
            f"--since {args.since} is after --until {args.until}: put --since first "
            "(--until is the last day, included)"
        )
    wh = open_warehouse(settings, must_exist=True)
    report = seal_days(
        wh,
        idle=_idle_rule(settings),
        now=_now(),
        since=since,
        until=until,
        warehouse_cluster=settings.warehouse.cluster,
    )
    # every printed window names its last day, included, as the user types it
    last = report.end_day - dt.timedelta(days=1) if report.end_day else None
    doc = {
        "from": report.first_day.isoformat() if report.first_day else None,
        "to": last.isoformat() if last else None,
        "sealed": [d.isoformat() for d in report.sealed],
        "still_sealed": report.still_sealed,
        "usage_rows": report.usage_rows,
    }
    if args.format == "json":
        print(json.dumps(doc, indent=1))
    elif report.first_day is None:
        print("nothing to seal: no finished day has samples or allocations")
    else:
        days = f"{len(report.sealed)} day(s)"
        if report.sealed:
            days += f" ({report.sealed[0]} to {report.sealed[-1]})"
        print(
            f"sealed {days} with {report.usage_rows} usage rows; {report.still_sealed} "
            f"day(s) from {report.first_day} to {last} were sealed already"
        )
    return 0


def _fixed(value: Any) -> Any:
    """Hours with 3 decimals, money with its cents."""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, Decimal):
        return str(value.quantize(Decimal("0.01")))
    return value


def _at(text: str | None, now: dt.datetime) -> dt.datetime:
    return instant(text, "--at", "2026-11-30T12:00") if text else now


def _cluster(wh: Any, given: str, *, one: bool = True) -> str:
    """The cluster asked for (which must exist), or the only one there is; with ``one``
    False, '' (every cluster) when none was asked for."""
    from warehouse.analytics import fleet

    names = fleet.known_clusters(wh)
    if given:
        if given not in names:
            known = ", ".join(names) if names else "none yet"
            raise InputError(f"--cluster {given!r} is not in the warehouse (its clusters: {known})")
        return given
    if not one or len(names) == 1:
        return names[0] if len(names) == 1 and one else ""
    if not names:
        raise InputError(
            "the warehouse holds no cluster's data yet: fill it with `gpuledger demo`, "
            "`gpuledger import` or a collector"
        )
    raise InputError(
        f"the warehouse holds several clusters ({', '.join(names)}): pick one with --cluster"
    )


def cmd_queues(settings: Settings, args: argparse.Namespace) -> int:
    """Wait-time percentiles, failure and preemption rates with reasons, lost GPU-hours."""
    from gpuledger.app import open_warehouse
    from warehouse.analytics import queues

    start = day(args.date_from, "--from")
    end = day(args.date_to, "--to") + dt.timedelta(days=1)
    if end <= start:
        raise InputError(
            f"the window is empty: --to {args.date_to} is before --from {args.date_from}; "
            "put --from before --to"
        )
    wh = open_warehouse(settings, must_exist=True)
    by = (args.by,)
    cluster = _cluster(wh, args.cluster)
    waits = queues.wait_times(wh, cluster, start, end, by=by)
    rates, reasons, lost = queues.failures(wh, cluster, start, end, by=by)
    frames = {
        "wait_times": waits,
        "outcomes": rates,
        "top_reasons": reasons,
        "lost_gpu_hours": lost,
    }
    if args.format == "json":
        print(json.dumps({k: f.to_dicts() for k, f in frames.items()}, indent=1, default=str))
        return 0
    for title, frame in frames.items():
        print(f"{title}:")
        # durations (columns in seconds, `_s`) as a person reads them; JSON keeps seconds
        header = [c.removesuffix("_s") for c in frame.columns]
        seconds = [c.endswith("_s") for c in frame.columns]
        rows = [
            [
                format_duration(v) if in_s else f"{v:.3f}" if isinstance(v, float) else v
                for v, in_s in zip(r, seconds, strict=True)
            ]
            for r in frame.rows()
        ]
        sys.stdout.write(format_rows(header, rows, "table"))
    return 0


def cmd_fragmentation(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse
    from warehouse.analytics.fragmentation import fragmentation_at

    at = _at(args.at, _now())
    most = (at - FIRST_INSTANT) / dt.timedelta(days=1)
    if not 0 < args.window_days <= most:  # NaN too
        raise InputError(
            f"--window-days {args.window_days:g} must be more than 0 and reach back no "
            f"further than {FIRST_INSTANT:%Y-%m-%d} ({most:.0f} days before --at)"
        )
    wh = open_warehouse(settings, must_exist=True)
    report = fragmentation_at(
        wh,
        _cluster(wh, args.cluster),
        at,
        window=dt.timedelta(days=args.window_days),
        scope=args.scope,
    )
    print(report.to_json() if args.format == "json" else report.to_text())
    return 0


def cmd_why(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse

    wh = open_warehouse(settings, must_exist=True)
    ledger = settings.ledger
    now = _now()
    if args.what == "cost":
        from warehouse.ledger import load_price_book, why_cost

        result: Any = why_cost(
            wh,
            args.month,
            now=now,
            tenant=args.tenant,
            cluster=_cluster(wh, args.cluster, one=False),
            idle=_idle_rule(settings),
            prices=load_price_book(wh, ledger.currency),
        )
        print(json.dumps(result.to_json(), indent=1) if args.format == "json" else result.to_text())
        return 0
    from warehouse.analytics import explain

    cluster, at = _cluster(wh, args.cluster), _at(args.at, now)
    if args.what == "job":
        answer = explain.why_job(wh, cluster, args.id, at)
    elif args.what == "gpu":
        answer = explain.why_gpu(
            wh,
            cluster,
            args.id,
            at,
            mig_instance=args.mig,
            idle_threshold_ratio=ledger.idle_threshold_ratio,
            idle_min_duration_s=ledger.idle_min_duration_s,
        )
    else:
        answer = explain.why_tenant(
            wh, cluster, args.id, at, idle_threshold_ratio=ledger.idle_threshold_ratio
        )
    print(answer.to_json() if args.format == "json" else answer.to_text())
    return 0
