"""Alerting as a process runs it: evaluate, decide, record, queue (:meth:`Alerting.check`), and
deliver (:meth:`Alerting.deliver`), each on its own schedule.

:meth:`Alerting.start` rebuilds the open alerts from the history and the undelivered notices
from the outbox, so a restart neither fires an open alert again nor loses a notice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Sequence

from gpuledger_errors import InputError
from reports.alerts.book import AlertBook, Notice
from reports.alerts.evaluate import Evaluation, evaluate
from reports.alerts.notify import Notifier
from reports.alerts.outbox import DEFAULT_RETRY, Delivery, Outbox, RetryPolicy
from reports.alerts.rules import AlertRules
from warehouse.alerts import alert_history, open_alert_rows, record_alerts
from warehouse.client import Warehouse
from warehouse.ledger import load_price_book


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One evaluation: the notices it decided (fired, repeated, resolved), the alerts open
    after it, and the rules that could not look (rule -> what went wrong)."""

    at: dt.datetime
    notices: tuple[Notice, ...]
    open_alerts: int
    findings: int
    failed: dict[str, str]


class Alerting:
    """The open alerts and the outbox of one process, over ``wh``."""

    def __init__(
        self,
        wh: Warehouse,
        rules: AlertRules,
        notifiers: Sequence[Notifier],
        *,
        policy: RetryPolicy = DEFAULT_RETRY,
        currency: str = "USD",
    ) -> None:
        self.wh, self.rules, self.currency = wh, rules, currency
        self.notifiers = list(notifiers)
        self.outbox = Outbox(wh, notifiers, policy)
        self.book = AlertBook(rules.cooldown_s)
        self.last_at: dt.datetime | None = None  # the latest notice or evaluation
        self._checks = threading.Lock()  # one evaluation at a time

    @classmethod
    def start(
        cls,
        wh: Warehouse,
        rules: AlertRules,
        notifiers: Sequence[Notifier],
        *,
        policy: RetryPolicy = DEFAULT_RETRY,
        currency: str = "USD",
    ) -> Alerting:
        """An alerting that carries on from the history and the outbox in ``wh``."""
        alerting = cls(wh, rules, notifiers, policy=policy, currency=currency)
        alerting.book = AlertBook.rebuild(open_alert_rows(wh), rules.cooldown_s)
        latest = alert_history(wh, limit=1)
        alerting.last_at = latest[0].ts if latest else None
        alerting.outbox.load()
        return alerting

    def check(self, at: dt.datetime) -> CheckResult:
        """Evaluate the rules at ``at``, record every notice in the history and queue it for
        every notifier (delivery is :meth:`deliver`'s). When recording fails, the open alerts
        stay as they were, so the next evaluation decides the same notices again."""
        with self._checks:
            # one notice per alert and instant keeps the history's order (and its latest row)
            # unambiguous
            if self.last_at is not None and at <= self.last_at:
                raise InputError(
                    f"alerts are decided in time order: {at:%Y-%m-%d %H:%M:%S.%f} UTC is not "
                    f"after the latest notice or evaluation ({self.last_at:%Y-%m-%d %H:%M:%S.%f} "
                    "UTC); give a later time"
                )
            ev: Evaluation = evaluate(
                self.wh, self.rules, at, prices=load_price_book(self.wh, self.currency)
            )
            book, notices = self.book.update(ev)
            names = [n.name for n in self.notifiers]
            record_alerts(self.wh, [n.row(names) for n in notices])
            self.book, self.last_at = book, ev.at
            self.outbox.put(notices, ev.at)
            return CheckResult(ev.at, tuple(notices), len(book.open), len(ev.findings), ev.failed)

    def deliver(self, now: dt.datetime) -> list[Delivery]:
        """Send what is due to each notifier (see :class:`Outbox`)."""
        return self.outbox.deliver(now)
