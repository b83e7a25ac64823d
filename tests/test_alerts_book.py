"""The open alerts' book (dedup, cooldown, resolution) on evaluations written by hand, and the
outbox's delivery rules with notifiers of its own protocol over the real engine."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from reports.alerts.book import AlertBook
from reports.alerts.evaluate import Evaluation
from reports.alerts.findings import Finding
from reports.alerts.notify import NotifyError
from reports.alerts.outbox import Outbox, RetryPolicy
from warehouse.alerts import OpenAlertRow, pending_outbox
from warehouse.client import Warehouse

T0 = dt.datetime(2026, 11, 20, 6, 0, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)


def _finding(key: str, rule: str = "idle", at: dt.datetime = T0) -> Finding:
    return Finding(rule, key, "c1", f"subject {key}", f"summary {key}", at, T0 - 60 * MIN)


def _ev(
    at: dt.datetime, *keys: str, rules: tuple[str, ...] = ("idle",), failed: Any = None
) -> Evaluation:
    failed = failed or {}
    return Evaluation(
        at,
        tuple(_finding(k, at=at) for k in keys),
        frozenset(rules) - set(failed),
        failed,
    )


def test_fired_quiet_repeated_resolved() -> None:
    book = AlertBook(cooldown_s=1800)
    book, told = book.update(_ev(T0, "a"))
    assert [(n.event, n.alert_id) for n in told] == [("fired", "a@2026-11-20T06:00:00Z")]
    for minutes in (1, 10, 29):  # within the cooldown: quiet, but the latest figures are kept
        book, told = book.update(_ev(T0 + minutes * MIN, "a"))
        assert told == [] and book.open["a"].finding.at == T0 + minutes * MIN
    book, told = book.update(_ev(T0 + 30 * MIN, "a", "b"))
    assert sorted((n.event, n.finding.key) for n in told) == [("fired", "b"), ("repeated", "a")]
    assert told[0].opened == T0  # a repeat keeps the alert's first firing
    book, told = book.update(_ev(T0 + 31 * MIN, "b"))
    assert [(n.event, n.finding.key, n.alert_id) for n in told] == [
        ("resolved", "a", "a@2026-11-20T06:00:00Z")
    ]
    assert told[0].text().startswith("[RESOLVED] GPU idle in a job: subject a: over at")
    # the same subject again later is a new alert, with an id of its own
    book, told = book.update(_ev(T0 + 40 * MIN, "a", "b"))
    assert [(n.event, n.alert_id) for n in told] == [("fired", "a@2026-11-20T06:40:00Z")]


def test_no_cooldown_tells_once_and_a_failed_rule_keeps_its_alerts() -> None:
    book, _ = AlertBook(cooldown_s=0).update(_ev(T0, "a"))
    book, told = book.update(_ev(T0 + 600 * MIN, "a"))
    assert told == []
    # the rule could not look: its alert stays open, neither resolved nor fired again
    book, told = book.update(_ev(T0 + 601 * MIN, failed={"idle": "WarehouseError: down"}))
    assert told == [] and list(book.open) == ["a"]
    # the rule is turned off: its alerts resolve, saying so
    book, told = book.update(_ev(T0 + 602 * MIN, rules=()))
    assert [n.event for n in told] == ["resolved"] and "its rule is turned off" in told[0].text()
    assert book.open == {}


def test_the_book_rebuilds_from_the_history_rows() -> None:
    fired = dataclasses.replace(_finding("a"), cost=None)
    rows = [
        OpenAlertRow("a@1", "a", "idle", T0 - 120 * MIN, T0 - 90 * MIN, ("log",), "{bad json"),
        OpenAlertRow(
            "a@2", "a", "idle", T0 - 60 * MIN, T0 - 10 * MIN, ("log",), json.dumps(fired.to_json())
        ),
    ]
    book = AlertBook.rebuild(rows, cooldown_s=1800)
    assert book.open["a"].alert_id == "a@2" and book.open["a"].finding == fired
    _, told = book.update(_ev(T0, "a"))
    assert told == []  # told 10 min ago: within the cooldown
    _, told = book.update(_ev(T0 + 20 * MIN, "a"))
    assert [(n.event, n.alert_id) for n in told] == [("repeated", "a@2")]


@dataclasses.dataclass
class Receiver:
    """A notifier (the outbox's protocol) that is up or down."""

    name: str
    up: bool = True
    got: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)

    def send(self, payload: Mapping[str, Any]) -> None:
        if not self.up:
            raise NotifyError(f"{self.name} is down")
        self.got.append(payload)


def test_one_notifier_down_holds_up_no_other_and_notices_are_given_up_in_time(
    wh: Warehouse,
) -> None:
    up, down = Receiver("up"), Receiver("down", up=False)
    policy = RetryPolicy(initial_s=60, max_s=120, give_up_s=600)
    box = Outbox(wh, [up, down], policy)
    _, notices = AlertBook(0).update(_ev(T0, "a", "b"))
    box.put(notices, T0)
    first = box.deliver(T0)
    assert [(d.notifier, d.outcome) for d in first] == [
        ("down", "failed"),  # its second notice waits with it, untried
        ("up", "delivered"),
        ("up", "delivered"),
    ]
    assert [p["key"] for p in up.got] == ["a", "b"]
    # the back-off doubles up to max_s; the notices are given up give_up_s after they were queued
    tries = [d for t in range(1, 11) for d in box.deliver(T0 + t * MIN)]
    assert [(d.outcome, d.attempts) for d in tries if d.notifier == "down"] == [
        ("failed", 2),  # T0 + 1 min (60 s after the first)
        ("failed", 3),  # T0 + 3 min (120 s)
        ("failed", 4),  # T0 + 5 min (120 s: max_s)
        ("failed", 5),  # T0 + 7 min
        ("failed", 6),  # T0 + 9 min
        ("expired", 6),  # T0 + 10 min: queued 600 s ago
        ("expired", 0),
    ]
    assert box.pending() == [] and pending_outbox(wh) == []
