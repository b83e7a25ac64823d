"""`gpuledger serve` and `gpuledger demo`: the processes that own the data directory and serve
the dashboard, the agents' ingest API and the periodic jobs, in threads."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from gpuledger.alert_commands import cmd_alerts
from gpuledger.collect_commands import start_embedded_collectors
from gpuledger.commands import (
    cmd_audit,
    cmd_db,
    cmd_fragmentation,
    cmd_ledger,
    cmd_queues,
    cmd_why,
    idle_rule,
    periodic_scheduler,
    utc_now,
)
from gpuledger.forward import FORWARDED_TEXT, ForwardServer, is_forwarded
from gpuledger.parser import parse
from gpuledger.quarantine_commands import cmd_quarantine
from gpuledger.settings import Settings, SettingsError
from gpuledger.sql_command import cmd_sql
from gpuledger_errors import InputError

if TYPE_CHECKING:
    from gpuledger.demo import DemoRun
    from reports.files import ReportRun
    from warehouse.audit import AuditEntry
    from warehouse.client import Warehouse

log = logging.getLogger(__name__)

#: The commands this process answers for others (gpuledger.forward.FORWARDED says which).
READ_COMMANDS = {
    "ledger": cmd_ledger,
    "why": cmd_why,
    "queues": cmd_queues,
    "fragmentation": cmd_fragmentation,
    "sql": cmd_sql,
    "audit": cmd_audit,
    "quarantine": cmd_quarantine,
    "db": cmd_db,
    "alerts": cmd_alerts,
}


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
    if not args.insecure:
        _demo_admin(settings, wh)
    scheduler = start_live(run, settings.simulator.interval_s)
    jobs = _demo_jobs(wh, settings, run)
    try:
        return _serve(wh, settings, insecure=args.insecure)
    finally:
        if jobs is not None:
            jobs.shutdown(wait=True)
        scheduler.shutdown(wait=True)
        wh.close()


def _demo_jobs(wh: Warehouse, settings: Settings, run: DemoRun) -> Any:
    """The jobs `serve` runs, with the demo's settings (:func:`gpuledger.demo.demo_settings`),
    and the chargeback of the demo's last full month (:func:`gpuledger.demo.report_month`)
    written at once; what they do is said on stdout."""
    from gpuledger.demo import alerts_text, demo_settings, report_month
    from gpuledger.report_commands import report_now
    from reports.alerts.notify import build_notifiers

    s = settings.server
    demo = demo_settings(settings, f"{'https' if s.tls_cert_file else 'http'}://{s.host}:{s.port}")
    notifiers = [n.name for n in build_notifiers(dataclasses.asdict(demo.alerts))]
    print(alerts_text(demo.alerts, notifiers), flush=True)
    if not demo.reports.schedule:
        print("reports: off (reports.schedule is empty); `gpuledger report` writes one", flush=True)
        return _periodic_jobs(wh, demo)
    month = report_month(run.began, run.position)
    where = demo.reports_dir.resolve()
    print(
        f"reports: the chargeback of {month} is being written into {where} "
        f"({demo.reports.formats}), then each month that ends, on the schedule "
        f"{demo.reports.schedule!r} (crontab, UTC)",
        flush=True,
    )

    def done(written: ReportRun | None) -> None:
        files = ", ".join(w.path.name for w in written.files) if written else ""
        said = f"is written: {files}" if written else "could not be written (see the log)"
        print(f"reports: the chargeback of {month} {said}", flush=True)

    return _periodic_jobs(
        wh, demo, first=lambda scheduler: report_now(scheduler, wh, demo, month, done)
    )


def _demo_admin(settings: Settings, wh: Warehouse) -> None:
    """The demo's first run makes an admin, so the dashboard can be opened at once."""
    from gpuledger.users import UserStore, new_password

    store = UserStore(settings.users_file)
    if store.users():
        return
    password = new_password()
    store.add("admin", "admin", password, by="gpuledger demo")
    wh.audit("gpuledger demo", "user.add", "admin", "role admin")
    print(f"dashboard login: admin / {password}  (shown this once; `gpuledger user` manages users)")


def _viewer() -> Any:
    """The dashboards' viewer for the request being answered: the logged-in user, or None."""
    from dashboards.context import Viewer
    from gpuledger.login import current_user

    user = current_user()
    return None if user is None else Viewer(user.name, user.role)


def _serve(wh: Any, settings: Settings, *, insecure: bool = False) -> int:
    """Serve the dashboard and the ingest/health/metrics API until Ctrl-C or SIGTERM."""
    from dashboards.answers.warm import warm
    from dashboards.app import create_app
    from dashboards.cache import AnswerCache, keep_refreshed
    from gpuledger.advise_commands import decide
    from gpuledger.login import protect, session_key
    from gpuledger.server import register
    from gpuledger.tokens import TokenBook, TokenStore
    from gpuledger.users import UserBook, UserStore
    from warehouse.ingest.coalesce import Coalescer
    from warehouse.ledger.tail import LiveTail

    s = settings.server
    tokens = None if insecure else TokenBook(TokenStore(settings.tokens_file))
    users = None if insecure else UserBook(UserStore(settings.users_file))
    if tokens is None or users is None:
        log.warning(
            "--insecure: anyone who reaches %s:%s reads every tenant's figures and writes "
            "batches for any cluster",
            s.host,
            s.port,
        )
    else:
        logins = bool(len(users)) or s.oidc() is not None
        if not _loopback(s.host) and not len(tokens) and not logins:
            raise SettingsError(
                f"server.host {s.host} answers beyond this machine and no user or ingest "
                "token is set up: make them first (`gpuledger user add`, `gpuledger token "
                "create`), or pass --insecure for a test bed"
            )
        if not len(tokens):
            log.warning(
                "no ingest tokens in %s: agents are refused (401) until one is made with "
                "`gpuledger token create --cluster NAME`",
                settings.tokens_file,
            )
        if not logins:
            log.warning(
                "no users in %s: the dashboard refuses everyone (401) until one is made "
                "with `gpuledger user add NAME --role admin`",
                settings.users_file,
            )
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
    answers = AnswerCache(s.dashboard_cache_s) if s.dashboard_cache_s else None
    # the pages' and the API's queries each through their thread's own client, so that a
    # slow answer (or the answer cache's refresh) never holds up another request's
    pages_wh = wh.per_thread()
    idle = idle_rule(settings)
    tail = (
        LiveTail(pages_wh, idle, every_s=s.live_tail_s, clock=utc_now, warm=warm)
        if s.live_tail_s
        else None
    )
    app = create_app(
        pages_wh,
        idle=idle,
        as_of=None if tail is None else tail.now,
        currency=settings.ledger.currency,
        idle_policy=settings.ledger.idle_policy,
        viewer=None if users is None else _viewer,
        answers=answers,
        # advice is approved by a person who logged in: not under --insecure
        decide=None if users is None else functools.partial(decide, wh),
    )
    register(
        app.server,
        wh,
        coalescer,
        tokens,
        max_body_bytes=s.max_body_bytes,
        max_concurrent_bodies=s.max_concurrent_bodies,
    )
    if users is not None:
        protect(
            app.server,
            users,
            wh,
            session_key(settings.session_key_file),
            secure_cookie=bool(s.tls_cert_file),
            oidc=s.oidc(),
        )
    _advice_api(app.server, wh, settings, None if users is None else _viewer)
    admission = _admission(app.server, wh, settings)
    coalescer.start()
    signal.signal(signal.SIGTERM, _terminate)
    from cheroot.ssl.builtin import BuiltinSSLAdapter

    from gpuledger.httpd import make_server

    server = make_server(s.host, s.port, app.server, s.threads)
    tls = bool(s.tls_cert_file)
    if tls:
        try:
            server.ssl_adapter = BuiltinSSLAdapter(s.tls_cert_file, s.tls_key_file)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise SettingsError(
                f"server.tls_cert_file/tls_key_file cannot be used: {exc}; give a PEM "
                "certificate (chain) and its key"
            ) from None
    elif not _loopback(s.host):
        log.warning(
            "server.host %s answers beyond this machine over plain HTTP: set "
            "server.tls_cert_file and server.tls_key_file, or put a TLS proxy in front",
            s.host,
        )
    forwarding = _start_forwarding(wh, settings)
    refreshing = threading.Event()
    if tail is not None:
        tail.start(refreshing)
    if answers is not None:
        keep_refreshed(answers, refreshing)
    url = f"{'https' if tls else 'http'}://{s.host}:{s.port}"
    # What start-up built (Dash, plotly, pandas: about 200,000 objects) lives as long as the
    # process: out of the collector's view, a full collection takes milliseconds, not a tenth
    # of a second that every request in flight (the admission webhook's first) would wait.
    gc.collect()
    gc.freeze()
    try:
        _listen(server, s.host, s.port)
        print(
            f"gpuledger dashboard: {url}  (Ctrl-C to stop; data stays in "
            f"{settings.warehouse.resolved_dsn}; agents' batches wait in {spool_dir})",
            flush=True,
        )
        with contextlib.suppress(SystemExit, KeyboardInterrupt):
            server.serve()
    finally:
        refreshing.set()
        if forwarding is not None:
            forwarding.close()
        _stop_http(server)
        coalescer.stop(timeout_s=30)
        for part in admission:
            part.stop()
        pages_wh.close()
    return 0


def _listen(server: Any, host: str, port: int) -> None:
    """Bind the HTTP server's socket (cheroot's ``prepare``), or say in one line why it cannot:
    a port another program holds is a setting to change, not a traceback."""
    try:
        server.prepare()
    except OSError as exc:
        why = exc.args[0] if exc.args else exc
        raise SettingsError(
            f"server.port {port}: cannot listen on {host}:{port} ({why}): another program "
            "may hold it; stop it, or pick another port with --port (server.port)"
        ) from None


#: How long the HTTP server's threads get to finish their requests when serve stops, seconds.
_HTTP_STOP_S = 15


def _stop_http(server: Any) -> None:
    """Stop the HTTP server, waiting at most :data:`_HTTP_STOP_S`: cheroot's stop can wait for
    ever on a worker thread that never takes its shutdown request (seen under load), and the
    rest (the spool's flush, the warehouse) must still be closed in order."""
    stopper = threading.Thread(target=server.stop, name="http-stop", daemon=True)
    stopper.start()
    stopper.join(_HTTP_STOP_S)
    if stopper.is_alive():
        log.warning("the HTTP server's threads did not stop within %d s: left behind", _HTTP_STOP_S)


def _exit_if_threads_linger(status: int) -> None:
    """After every part of serve has stopped, end the process even if a library's thread is
    still alive (a stuck HTTP worker would otherwise keep it running after SIGTERM)."""
    lingering = [
        t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon
    ]
    if lingering:
        log.warning("ending with threads still alive: %s", ", ".join(lingering))
        logging.shutdown()
        sys.stdout.flush()
        os._exit(status)


def _admission(server: Any, wh: Warehouse, settings: Settings) -> tuple[Any, ...]:
    """``POST /admission`` on ``server``, answered from a snapshot rebuilt in the background;
    the parts to stop at the end (none when admission.enabled is false)."""
    a = settings.admission
    if not a.enabled:
        return ()
    from scheduler_hooks import webhook
    from scheduler_hooks.priority import CachedClassNames
    from scheduler_hooks.snapshot import SnapshotKeeper, build_snapshot
    from warehouse.ledger import load_price_book

    priorities = CachedClassNames(settings.scheduler.policy().priority, idle=idle_rule(settings))

    def build() -> Any:
        return build_snapshot(
            wh,
            utc_now(),
            idle=idle_rule(settings),
            prices=load_price_book(wh, settings.ledger.currency),
            cluster=a.cluster,
            priorities=priorities,
        )

    keeper = SnapshotKeeper(build, a.refresh_s)
    keeper.start()
    audit = webhook.AuditQueue(wh)
    webhook.register(server, keeper.current, a.rules(), audit, max_body_bytes=a.max_body_bytes)
    return keeper, audit


def _advice_api(server: Any, wh: Warehouse, settings: Settings, viewer: Any) -> None:
    """``GET /api/advice`` on ``server``, for the viewer the login saw (everyone, as an
    admin, with --insecure)."""
    from dashboards.context import EVERYONE
    from gpuledger.advise_commands import live_report
    from scheduler_hooks import api

    api.register(
        server,
        wh,
        viewer=viewer or (lambda: EVERYONE),
        now=utc_now,
        live=functools.partial(live_report, wh, settings),
    )


def _start_forwarding(wh: Warehouse, settings: Settings) -> ForwardServer | None:
    """Answer the read commands of other processes on the socket in the embedded data
    directory (:mod:`gpuledger.forward`), from this process's warehouse and settings (a server
    DSN needs none: every process connects itself). Best effort: None, logged, when it
    cannot."""
    from warehouse.client import embedded_path

    data_dir = embedded_path(wh.dsn)
    if data_dir is None:
        return None
    server = ForwardServer.start(
        data_dir,
        functools.partial(_answer, wh=wh, settings=settings),
        functools.partial(_record, wh=wh, settings=settings),
    )
    if server is not None:
        print(f"read commands typed meanwhile ({FORWARDED_TEXT}) are answered here", flush=True)
    return server


def _answer(argv: list[str], out: TextIO, *, wh: Warehouse, settings: Settings) -> int:
    """Run a command another process sent, writing what it prints to ``out`` (the audit
    entries that wait in the pending file first, for an `audit` or a `sql` reading the log)."""
    from gpuledger.app import write_pending

    write_pending(wh, settings)
    args = parse(argv, strict=True)
    if not is_forwarded(args):
        raise InputError(
            f"`gpuledger {' '.join(_words(args))}` is not answered for other processes (only "
            f"{FORWARDED_TEXT} are): stop `gpuledger serve` or `demo` to run it"
        )
    return READ_COMMANDS[args.command](settings, args, wh=wh, out=out)


def _record(entry: AuditEntry, *, wh: Warehouse, settings: Settings) -> None:
    """Write an audit entry another process sent (gpuledger.audit_trail), and any that wait
    in the pending file."""
    from gpuledger.app import write_pending
    from gpuledger.audit_pending import write

    write(wh, entry)
    write_pending(wh, settings)


def _words(args: argparse.Namespace) -> list[str]:
    """The command's name as typed: ``db migrate``, ``sql --write``."""
    action = getattr(args, "action", None)
    return [
        args.command,
        *([action] if isinstance(action, str) else []),
        *(["--write"] if getattr(args, "write", False) else []),
    ]


def _loopback(host: str) -> bool:
    """Whether ``host`` answers this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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
    # the sealer and the periodic jobs query through clients of their own: a pass takes
    # seconds at scale, and ingest (on wh's own client) must not wait for it
    background = wh.per_thread()
    if settings.ledger.seal_interval_s:
        from warehouse.ledger import start_sealer

        threads.append(
            start_sealer(
                background,
                stop,
                interval_s=settings.ledger.seal_interval_s,
                idle=idle_rule(settings),
                clock=utc_now,
                warehouse_cluster=settings.warehouse.cluster,
            )
        )
    scheduler = _periodic_jobs(background, settings)
    try:
        status = _serve(wh, settings, insecure=args.insecure)
    finally:
        stop.set()
        if scheduler is not None:
            scheduler.shutdown(wait=True)
        for thread in threads:
            thread.join(timeout=30)
        background.close()
        wh.close()
    _exit_if_threads_linger(status)
    return status


def _periodic_jobs(
    wh: Any, settings: Settings, *, first: Callable[[Any], None] | None = None
) -> Any:
    """The serve process's scheduled jobs (the monthly chargeback; the alert rules and the
    delivery of their notices; the scheduler advice), on one APScheduler with threads (never
    processes: the engine must not be forked); None when there are none. ``first`` adds more
    to the scheduler before it starts (the demo's chargeback at once)."""
    if not (
        settings.reports.schedule
        or settings.alerts.interval_s
        or settings.scheduler.propose_interval_s
        or first
    ):
        return None
    from gpuledger.advise_commands import schedule_advice
    from gpuledger.alert_commands import schedule_alerts
    from gpuledger.report_commands import schedule_reports

    scheduler = periodic_scheduler()
    if first is not None:
        first(scheduler)
    schedule_reports(scheduler, wh, settings)
    schedule_alerts(scheduler, wh, settings)
    schedule_advice(scheduler, wh, settings)
    scheduler.start()
    return scheduler
