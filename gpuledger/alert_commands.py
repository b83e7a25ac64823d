"""`gpuledger alerts check` (one evaluation now: record, notify, say what fired and resolved),
`gpuledger alerts list` (the history), and the jobs `serve` runs: the evaluation every
``alerts.interval_s`` and the delivery of the notices, on separate threads."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import sys
from typing import TYPE_CHECKING, Any, TextIO

from gpuledger.inputs import instant
from gpuledger.output import format_rows
from gpuledger.settings import Settings
from gpuledger_errors import InputError

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from reports.alerts.outbox import Delivery
    from reports.alerts.runner import Alerting, CheckResult
    from warehouse.client import Warehouse

log = logging.getLogger(__name__)
#: How often `serve` tries to deliver what the outbox holds, seconds (at most; a notifier
#: that failed waits for its back-off).
DELIVERY_INTERVAL_S = 5


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    alerts = sub.add_parser(
        "alerts", parents=[common], help="idle-GPU alerts: evaluate the rules now, or the history"
    )
    actions = alerts.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        parents=[common],
        help="evaluate the [alerts] rules now: record and notify, and print what fired and "
        "resolved",
    )
    check.add_argument("--format", choices=("table", "json"), default="table")
    check.add_argument(
        "--at", help="ISO time to evaluate at (default: now); notices are sent as at that time"
    )
    listing = actions.add_parser("list", parents=[common], help="the alert history, newest first")
    listing.add_argument(
        "--state", choices=("open", "all"), default="all", help="open: the open alerts' rows"
    )
    listing.add_argument("--rule", default="", help="one rule: idle, waiting, unhealthy, borrowed")
    listing.add_argument("--since", help="rows at or after this ISO time")
    listing.add_argument("--limit", type=int, default=100, help="at most this many rows")
    listing.add_argument("--format", choices=("table", "csv", "json"), default="table")


def alerting(wh: Warehouse, settings: Settings) -> Alerting:
    """The alerting the settings describe, carrying on from the history and outbox in ``wh``."""
    from reports.alerts.notify import build_notifiers
    from reports.alerts.outbox import RetryPolicy
    from reports.alerts.rules import build_rules
    from reports.alerts.runner import Alerting

    a = settings.alerts
    values = dataclasses.asdict(a)
    return Alerting.start(
        wh,
        build_rules(values),
        build_notifiers(values),
        policy=RetryPolicy(a.retry_initial_s, a.retry_max_s, a.retry_for_s),
        currency=settings.ledger.currency,
    )


def cmd_alerts(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    from gpuledger.app import open_warehouse, reading_warehouse
    from gpuledger.commands import utc_now

    out = sys.stdout if out is None else out
    if args.action == "list":
        return _list(reading_warehouse(settings, wh), args, out)
    at = instant(args.at, "--at", "2026-11-30T12:00") if args.at else utc_now()
    wh = wh or open_warehouse(settings, must_exist=True)
    run = alerting(wh, settings)
    result = run.check(at)
    sent = run.deliver(at if args.at else utc_now())
    out.write(_render_check(result, sent, args.format))
    for rule, why in result.failed.items():
        print(f"gpuledger: alert rule {rule} could not be evaluated: {why}", file=sys.stderr)
    return 1 if result.failed else 0


def _render_check(result: CheckResult, sent: list[Delivery], fmt: str) -> str:
    delivered: dict[str, list[str]] = {}
    for d in sent:
        delivered.setdefault(d.message_id, []).append(f"{d.notifier}:{d.outcome}")
    if fmt == "json":
        doc = {
            "at": result.at.isoformat(),
            "findings": result.findings,
            "open_alerts": result.open_alerts,
            "failed_rules": result.failed,
            "notices": [
                {**n.payload(), "delivery": delivered.get(n.message_id, [])} for n in result.notices
            ],
            "deliveries": [
                {**dataclasses.asdict(d), "next_try": d.next_try and d.next_try.isoformat()}
                for d in sent
            ],
        }
        return json.dumps(doc, indent=1) + "\n"
    columns = ["event", "rule", "severity", "cluster", "subject", "for", "cost", "delivery"]
    rows = [
        [
            n.event,
            n.finding.rule,
            n.finding.severity,
            n.finding.cluster,
            n.finding.subject,
            _duration(n.duration_s),
            "" if n.finding.cost is None else f"{n.finding.currency} {n.finding.cost}",
            " ".join(delivered.get(n.message_id, [])),
        ]
        for n in result.notices
    ]
    head = (
        f"alerts at {result.at:%Y-%m-%d %H:%M:%S} UTC: {len(result.notices)} notice(s), "
        f"{result.open_alerts} open alert(s)\n"
    )
    body = format_rows(columns, rows, "table") if rows else ""
    details = "".join(f"  {n.text()}\n    {n.finding.link}\n" for n in result.notices)
    return head + body + details


def _duration(seconds: float) -> str:
    from reports.alerts.rules import duration_text

    return duration_text(seconds)


def _list(wh: Warehouse, args: argparse.Namespace, out: TextIO) -> int:
    from warehouse.alerts import alert_history

    if not 1 <= args.limit <= 1_000_000:
        raise InputError(f"--limit {args.limit} must be within 1-1000000")
    if args.rule and args.rule not in ("idle", "waiting", "unhealthy", "borrowed"):
        raise InputError(
            f"--rule {args.rule!r} is not a rule: use idle, waiting, unhealthy or borrowed"
        )
    since = instant(args.since, "--since", "2026-11-30T12:00") if args.since else None
    rows = alert_history(
        wh, since=since, rule=args.rule, open_only=args.state == "open", limit=args.limit
    )
    columns = [
        "ts", "alert_id", "event", "state", "rule", "severity", "cluster", "node", "gpu_uuid",
        "job_id", "tenant", "since", "cost", "currency", "message", "url", "notified",
    ]  # fmt: skip
    out.write(format_rows(columns, [[getattr(r, c) for c in columns] for r in rows], args.format))
    return 0


def schedule_alerts(scheduler: BackgroundScheduler, wh: Warehouse, settings: Settings) -> None:
    """Add alerting to ``scheduler``: the rules every ``alerts.interval_s`` and the delivery
    of notices every few seconds, as separate jobs (so a notifier that hangs until its timeout
    never holds up an evaluation), each never running twice at once."""
    from apscheduler.triggers.interval import IntervalTrigger

    from gpuledger.commands import utc_now

    interval = settings.alerts.interval_s
    if not interval:
        return
    run = alerting(wh, settings)

    def evaluate() -> None:
        try:
            result = run.check(utc_now())
        except Exception:  # a failed evaluation is logged; the next one runs on time
            log.exception("the alert rules could not be evaluated")
            return
        if result.notices or result.failed:
            log.info(
                "alerts: %d notice(s), %d open, rules that failed: %s",
                len(result.notices),
                result.open_alerts,
                ", ".join(result.failed) or "none",
            )

    def deliver() -> None:
        try:
            run.deliver(utc_now())
        except Exception:  # delivery is retried on the next pass
            log.exception("alert notices could not be delivered")

    now = dt.datetime.now(dt.UTC)
    scheduler.add_job(
        evaluate,
        IntervalTrigger(seconds=interval, timezone="UTC"),
        id="alerts-evaluate",
        next_run_time=now,
        max_instances=1,
        coalesce=True,
    )
    scheduler.add_job(
        deliver,
        IntervalTrigger(seconds=min(DELIVERY_INTERVAL_S, interval), timezone="UTC"),
        id="alerts-deliver",
        max_instances=1,
        coalesce=True,
    )
