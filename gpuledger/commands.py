"""The commands that run and end: audit, token, user, db, import, ledger, seal, why, queues,
fragmentation (`sql` is in :mod:`gpuledger.sql_command`, `serve` and `demo` in
:mod:`gpuledger.serve_commands`)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gpuledger.audit_trail import os_user
from gpuledger.inputs import day, instant
from gpuledger.output import format_rows
from gpuledger.settings import Settings
from gpuledger_errors import InputError
from warehouse.times import format_duration

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from warehouse.client import Warehouse
    from warehouse.ledger import IdleRule, Ledger


def cmd_audit(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    """The audit log, newest first."""
    from gpuledger.app import reading_warehouse
    from warehouse.audit import audit_entries

    if args.limit < 1:
        raise InputError(f"--limit {args.limit} must be at least 1")
    since = instant(args.since, "--since", "2026-11-30 or 2026-11-30T12:00") if args.since else None
    wh = reading_warehouse(settings, wh)
    out = sys.stdout if out is None else out
    entries = audit_entries(wh, since=since, who=args.who, action=args.action, limit=args.limit)
    columns = ["ts", "actor", "action", "object", "outcome", "detail"]
    rows = [[getattr(e, c) for c in columns] for e in entries]
    out.write(format_rows(columns, rows, args.format))
    return 0


def cmd_token(settings: Settings, args: argparse.Namespace) -> int:
    """Make, list and revoke ingest tokens (a file beside the warehouse: this works while
    `serve` runs, which reads it again when it changes). Changes go to the audit log."""
    from gpuledger.tokens import TokenStore

    store = TokenStore(settings.tokens_file)
    if args.action == "create":
        what = f"cluster {args.cluster}" + (f", node {args.node}" if args.node else "")
        with _audited(settings, "token.create", args.cluster, what):
            token, record = store.create(args.cluster, args.node, by=os_user(), note=args.note)
        print(token)
        print(
            f"ingest token {record.id} for {record.scope()}: shown this once, keep it in the "
            "agents' agent.token (GPULEDGER_AGENT__TOKEN)",
            file=sys.stderr,
        )
        _record(settings, "token.create", record.id, record.scope(), "ok")
        return 0
    if args.action == "revoke":
        with _audited(settings, "token.revoke", args.id, ""):
            record = store.revoke(args.id)
        print(f"ingest token {record.id} ({record.scope()}) revoked at {record.revoked_at}")
        _record(settings, "token.revoke", record.id, record.scope(), "ok")
        return 0
    columns = ["id", "cluster", "node", "created_at", "created_by", "note", "revoked_at"]
    rows = [[getattr(t, c) for c in columns] for t in store.tokens()]
    sys.stdout.write(format_rows(columns, rows, "table"))
    return 0


def cmd_user(settings: Settings, args: argparse.Namespace) -> int:
    """Add, list and remove the people who may log in (a file beside the warehouse: this
    works while `serve` runs, which reads it again when it changes). Changes go to the audit
    log."""
    from gpuledger.users import UserStore, new_password

    store = UserStore(settings.users_file)
    if args.action == "add":
        made = not args.password_stdin
        password = new_password() if made else sys.stdin.readline().rstrip("\n")
        with _audited(settings, "user.add", args.name, f"role {args.role}"):
            user = store.add(args.name, args.role, password, by=os_user())
        if made:
            print(password)
        print(
            f"user {user.name} ({user.role}) added"
            + ("; the password above is shown this once" if made else ""),
            file=sys.stderr,
        )
        _record(settings, "user.add", user.name, f"role {user.role}", "ok")
        return 0
    if args.action == "remove":
        with _audited(settings, "user.remove", args.name, ""):
            user = store.remove(args.name)
        print(f"user {user.name} ({user.role}) removed; their sessions end now")
        _record(settings, "user.remove", user.name, f"role {user.role}", "ok")
        return 0
    columns = ["name", "role", "created_at", "created_by"]
    rows = [[getattr(u, c) for c in columns] for u in store.users()]
    sys.stdout.write(format_rows(columns, rows, "table"))
    return 0


@contextlib.contextmanager
def _audited(settings: Settings, action: str, obj: str, what: str) -> Iterator[None]:
    """A change refused as asked (an unknown id, a bad name) is on record too."""
    try:
        yield
    except InputError as exc:
        _record(settings, action, obj, "; ".join(filter(None, [what, str(exc)])), "failed")
        raise


def _record(settings: Settings, action: str, obj: str, detail: str, outcome: str) -> None:
    from gpuledger.audit_pending import new_entry
    from gpuledger.audit_trail import record

    record(settings, new_entry(os_user(), action, obj, detail, outcome))


def cmd_db(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    from gpuledger.app import open_warehouse, render_options
    from warehouse.migrate import migrate, status

    wh = open_warehouse(settings, apply_migrations=False) if wh is None else wh
    out = sys.stdout if out is None else out
    opts = render_options(settings)
    if args.action == "migrate":
        applied = migrate(wh, opts, repair=True)
        for m in applied:
            print(f"applied {m.version:04d}_{m.name}", file=out)
        print(f"{len(applied)} migration(s) applied; schema is up to date", file=out)
        return 0
    rows = [
        (
            f"{s.version:04d}",
            s.name,
            ("applied " + s.applied_at.isoformat(timespec="seconds"))
            if s.applied_at
            else "pending",
            "; ".join(
                [
                    *(["CHANGED since applied"] if s.checksum_changed else []),
                    *(
                        f"{name} is GONE (dropped?): `db migrate` creates it empty"
                        for name in s.missing
                    ),
                ]
            ),
        )
        for s in status(wh, opts)
    ]
    out.write(format_rows(["version", "name", "state", "note"], rows, "table"))
    made = Path(settings.warehouse.data_dir).expanduser() / ".gpuledger-database"
    if not settings.warehouse.dsn and made.is_file() and not any(r[2] != "pending" for r in rows):
        print(
            f"the database {settings.warehouse.database} was made here before and is gone "
            "(dropped by hand?): `gpuledger db migrate` creates it again, empty",
            file=out,
        )
    return 0


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


def utc_now() -> dt.datetime:
    """The one place the commands read the clock; everything below takes ``now``."""
    return dt.datetime.now(dt.UTC)


def periodic_scheduler() -> BackgroundScheduler:
    """The scheduler of a process's periodic jobs (threads, never processes: the engine must not
    be forked), in UTC. A run that starts late still runs, once: APScheduler's default drops a
    run more than 1 s late, which a busy process (a backfill, a ledger) makes of every run."""
    from apscheduler.schedulers.background import BackgroundScheduler

    return BackgroundScheduler(
        timezone="UTC", job_defaults={"misfire_grace_time": None, "coalesce": True}
    )


def idle_rule(settings: Settings) -> IdleRule:
    from warehouse.ledger import IdleRule

    return IdleRule(settings.ledger.idle_threshold_ratio, settings.ledger.idle_min_duration_s)


def cmd_ledger(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    from gpuledger.app import reading_warehouse
    from warehouse.ledger import Window, compute_ledger, load_price_book

    first = day(args.date_from, "--from").date()
    last = day(args.date_to, "--to").date()
    wh = reading_warehouse(settings, wh)
    out = sys.stdout if out is None else out
    ledger = compute_ledger(
        wh,
        Window.days(first, last),
        now=utc_now(),
        group_by=args.by,
        idle_policy=args.idle_policy or settings.ledger.idle_policy,
        idle=idle_rule(settings),
        prices=load_price_book(wh, settings.ledger.currency),
        cluster=_cluster(wh, args.cluster, one=False),
        source=args.source,
        sealed=not args.no_seals,
        energy=args.energy,
    )
    if args.format == "json":
        print(json.dumps(ledger.to_json(), indent=1), file=out)
        return 0
    out.write(render_ledger(ledger, args.format))
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
    from warehouse.analytics.stranded import seal_hours
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
        idle=idle_rule(settings),
        now=utc_now(),
        since=since,
        until=until,
        warehouse_cluster=settings.warehouse.cluster,
    )
    hours = seal_hours(
        wh, now=utc_now(), since=since, until=until, warehouse_cluster=settings.warehouse.cluster
    )
    # every printed window names its last day, included, as the user types it
    last = report.end_day - dt.timedelta(days=1) if report.end_day else None
    doc = {
        "from": report.first_day.isoformat() if report.first_day else None,
        "to": last.isoformat() if last else None,
        "sealed": [d.isoformat() for d in report.sealed],
        "still_sealed": report.still_sealed,
        "usage_rows": report.usage_rows,
        "hours_sealed_until": report.hours_until.isoformat() if report.hours_until else None,
        "stranded_hours": {
            "sealed": [{"cluster": c, "day": d.isoformat()} for c, d in hours.sealed],
            "still_sealed": hours.still_sealed,
            "rows": hours.rows,
        },
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
    if args.format != "json" and report.hours_until is not None:
        print(
            f"sealed the finished hours of {report.hours_until:%Y-%m-%d} up to "
            f"{report.hours_until:%H:%M} UTC"
        )
    if args.format != "json" and (hours.sealed or hours.still_sealed):
        print(
            f"sealed the stranded capacity of {len(hours.sealed)} cluster-day(s) up to the last "
            f"hour ({hours.rows} rows); {hours.still_sealed} were sealed already"
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

    return fleet.pick_cluster(wh, given, name="--cluster", one=one)


def cmd_queues(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    """Wait-time percentiles, failure and preemption rates with reasons, lost GPU-hours."""
    from gpuledger.app import reading_warehouse
    from warehouse.analytics import queues
    from warehouse.ledger import Window

    # the window as the ledger's: --to is the last day, included, and an error names it
    window = Window.days(day(args.date_from, "--from").date(), day(args.date_to, "--to").date())
    start, end = window.start, window.end
    wh = reading_warehouse(settings, wh)
    out = sys.stdout if out is None else out
    result = queues.report(wh, _cluster(wh, args.cluster), start, end, by=(args.by,))
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=1, default=str), file=out)
        return 0
    for title, frame in result.frames().items():
        print(f"{title}:", file=out)
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
        out.write(format_rows(header, rows, "table"))
    return 0


def cmd_fragmentation(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    from gpuledger.app import reading_warehouse
    from warehouse.analytics.fragmentation import fragmentation_at, trailing_days

    at = _at(args.at, utc_now())
    window = trailing_days(args.window_days, at, "--window-days")
    wh = reading_warehouse(settings, wh)
    out = sys.stdout if out is None else out
    report = fragmentation_at(wh, _cluster(wh, args.cluster), at, window=window, scope=args.scope)
    print(report.to_json() if args.format == "json" else report.to_text(), file=out)
    return 0


def cmd_why(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    from gpuledger.app import reading_warehouse

    wh = reading_warehouse(settings, wh)
    out = sys.stdout if out is None else out
    ledger = settings.ledger
    now = utc_now()
    if args.what == "cost":
        from warehouse.ledger import load_price_book, why_cost

        result: Any = why_cost(
            wh,
            args.month,
            now=now,
            tenant=args.tenant,
            cluster=_cluster(wh, args.cluster, one=False),
            idle=idle_rule(settings),
            prices=load_price_book(wh, ledger.currency),
        )
        text = json.dumps(result.to_json(), indent=1) if args.format == "json" else result.to_text()
        print(text, file=out)
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
    print(answer.to_json() if args.format == "json" else answer.to_text(), file=out)
    return 0
