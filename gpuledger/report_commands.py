"""`gpuledger report`: a month's chargeback files, and the monthly job `serve` runs to write
the month that just ended."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuledger.settings import Settings

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from reports.chargeback import Chargeback
    from reports.files import ReportRun
    from warehouse.client import Warehouse

log = logging.getLogger(__name__)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    rep = sub.add_parser(
        "report",
        parents=[common],
        help="a month's chargeback: CSV, XLSX, HTML, PDF and FOCUS files",
    )
    rep.add_argument("--month", required=True, help="the month, YYYY-MM (UTC)")
    rep.add_argument("--tenant", help="one tenant (an org or org/project): its rows alone")
    rep.add_argument("--formats", help="some of csv,xlsx,html,pdf,focus (default: reports.formats)")
    rep.add_argument(
        "--idle-policy",
        choices=("weighted", "even", "none"),
        help="how unallocated cost is shared (default: ledger.idle_policy)",
    )
    rep.add_argument("--cluster", default="", help="one cluster (default: all)")
    rep.add_argument("--out", help="the folder to write into (default: reports.out_dir)")


def make_reports(
    wh: Warehouse,
    settings: Settings,
    month: str,
    *,
    now: dt.datetime,
    out_dir: Path,
    kinds: tuple[str, ...],
    tenant: str | None = None,
    idle_policy: str | None = None,
    cluster: str = "",
) -> ReportRun:
    """Build ``month``'s chargeback and write ``kinds`` of it into ``out_dir``."""
    from gpuledger.commands import idle_rule
    from reports.chargeback import build_chargeback
    from reports.files import write_reports
    from warehouse.ledger import load_price_book

    cb = build_chargeback(
        wh,
        month,
        now=now,
        tenant=tenant,
        idle_policy=idle_policy or settings.ledger.idle_policy,
        idle=idle_rule(settings),
        prices=load_price_book(wh, settings.ledger.currency),
        cluster=cluster,
    )
    return write_reports(cb, out_dir, kinds, focus=_focus(settings, cluster))


def _focus(settings: Settings, cluster: str) -> Any:
    """The FOCUS renderer, with the settings it names the provider and account by."""

    def render(cb: Chargeback) -> bytes:
        from reports.focus import FocusAccount, render_focus

        r = settings.reports
        account = r.billing_account or cluster or "gpuledger"
        return render_focus(
            cb.lines,
            account=FocusAccount(
                provider_name=r.provider,
                billing_account_id=account,
                billing_account_name=account,
            ),
        )

    return render


def cmd_report(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse
    from gpuledger.commands import _cluster, utc_now
    from reports.formats import formats

    kinds = formats(args.formats or settings.reports.formats)
    out_dir = Path(args.out).expanduser() if args.out else settings.reports_dir
    wh = open_warehouse(settings, must_exist=True)
    run = make_reports(
        wh,
        settings,
        args.month,
        now=utc_now(),
        out_dir=out_dir,
        kinds=kinds,
        tenant=args.tenant,
        idle_policy=args.idle_policy,
        cluster=_cluster(wh, args.cluster, one=False),
    )
    _print_run(run)
    return 0


def _print_run(run: ReportRun) -> None:
    for w in run.files:
        print(f"{w.path}  {w.bytes:,} bytes  {w.seconds:.2f} s")
    if run.changes:
        print("changed since the last run of this month:")
        for change in run.changes:
            print(f"  {change}")
    elif not run.first:
        print("unchanged since the last run of this month")
    sys.stdout.flush()


def previous_month(now: dt.datetime) -> str:
    """The month before the one ``now`` is in (YYYY-MM)."""
    return (now.replace(day=1) - dt.timedelta(days=1)).strftime("%Y-%m")


def monthly_reports(
    wh: Warehouse, settings: Settings, now: dt.datetime, month: str = ""
) -> ReportRun | None:
    """The monthly job: write the previous month's reports (or ``month``'s) into
    ``reports.out_dir`` and tell the ``[alerts]`` notifiers (webhook, Slack, e-mail, log) what
    was written and what changed; None, logged and told, when the month could not be written."""
    from reports.alerts.notify import build_notifiers, tell_each
    from reports.formats import formats

    month = month or previous_month(now)
    payload: dict[str, Any] = {"event": "report", "title": "Monthly chargeback", "subject": month}
    run: ReportRun | None = None
    try:
        written = make_reports(
            wh,
            settings,
            month,
            now=now,
            out_dir=settings.reports_dir,
            kinds=formats(settings.reports.formats),
        )
    except Exception as exc:  # a failed month is logged and told; next month's job still runs
        log.exception("the chargeback of %s could not be written", month)
        payload["text"] = f"The chargeback of {month} could not be written: {exc}"
    else:
        run = written
        moved = "; changed since the last run: " + "; ".join(run.changes) if run.changes else ""
        payload["text"] = (
            f"The chargeback of {month} is written: "
            + ", ".join(str(w.path) for w in run.files)
            + moved
        )
        payload["files"] = [str(w.path) for w in run.files]
    said = tell_each(build_notifiers(dataclasses.asdict(settings.alerts)), payload)
    for name, error in said.items():
        if error is not None:
            log.error("the chargeback notice of %s was not delivered by %s: %s", month, name, error)
    return run


def schedule_reports(scheduler: BackgroundScheduler, wh: Warehouse, settings: Settings) -> None:
    """Add the monthly job (:func:`monthly_reports`) to ``scheduler`` at ``reports.schedule``
    (a crontab line, UTC)."""
    from apscheduler.triggers.cron import CronTrigger

    if not settings.reports.schedule:
        return
    scheduler.add_job(
        lambda: monthly_reports(wh, settings, dt.datetime.now(dt.UTC)),
        CronTrigger.from_crontab(settings.reports.schedule, timezone="UTC"),
        id="monthly-chargeback",
        coalesce=True,
        misfire_grace_time=6 * 3600,
    )


def report_now(
    scheduler: BackgroundScheduler,
    wh: Warehouse,
    settings: Settings,
    month: str,
    done: Callable[[ReportRun | None], None] = lambda _run: None,
) -> None:
    """Add a job to ``scheduler`` that writes ``month``'s reports at once, as the monthly job
    does (:func:`monthly_reports`), then hands what it wrote (None: it could not) to ``done``."""
    scheduler.add_job(
        lambda: done(monthly_reports(wh, settings, dt.datetime.now(dt.UTC), month)),
        id="chargeback-now",
        misfire_grace_time=None,
    )
