"""The notices waiting for their notifiers, and their delivery with retries.

Each notice is queued once per notifier. A delivery pass (:meth:`Outbox.deliver`) sends each
notifier its due notices, oldest first; when one fails, that notifier is tried again after a
back-off that doubles from ``initial_s`` up to ``max_s`` (its other notices wait with it, so a
notifier that is down costs one timeout per pass), and a notice still undelivered ``give_up_s``
after it was queued is given up (logged). Every change is written to ``alert_outbox``, so a
restarted process picks up what was still pending.

Queueing and delivering are separate steps taken on separate threads in ``serve``: the
evaluation only queues (memory and one insert) and never waits on a notifier. The outbox is
thread-safe; sending is done outside its lock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from reports.alerts.book import Notice
from reports.alerts.notify import Notifier, NotifyError
from warehouse.alerts import OutboxRow, pending_outbox, record_outbox
from warehouse.client import Warehouse, WarehouseError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    initial_s: float = 30.0
    max_s: float = 900.0
    give_up_s: float = 86_400.0

    def delay(self, failures: int) -> dt.timedelta:
        """The wait after the ``failures``-th failure in a row (1, 2, ...)."""
        return dt.timedelta(seconds=min(self.max_s, self.initial_s * 2 ** max(0, failures - 1)))


DEFAULT_RETRY = RetryPolicy()


@dataclasses.dataclass
class Pending:
    """A notice one notifier has not taken yet."""

    notifier: str
    message_id: str
    alert_id: str
    created: dt.datetime
    payload: Mapping[str, Any]
    attempts: int = 0
    next_try: dt.datetime | None = None  # None: at once
    last_error: str = ""
    version: int = 0

    def row(self, state: str, ts: dt.datetime) -> OutboxRow:
        return OutboxRow(
            self.notifier,
            self.message_id,
            self.alert_id,
            self.created,
            ts,
            state,
            self.attempts,
            self.next_try or ts,
            self.last_error,
            json.dumps(self.payload, sort_keys=True),
            self.version,
        )


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What one try of one notice came to: delivered, failed (tried again at ``next_try``) or
    expired (given up)."""

    notifier: str
    message_id: str
    alert_id: str
    event: str
    outcome: str
    attempts: int
    error: str = ""
    next_try: dt.datetime | None = None


class Outbox:
    """The pending notices of ``notifiers``, kept in memory and in ``alert_outbox``."""

    def __init__(
        self, wh: Warehouse, notifiers: Sequence[Notifier], policy: RetryPolicy = DEFAULT_RETRY
    ) -> None:
        self.wh = wh
        self.notifiers = {n.name: n for n in notifiers}
        self.policy = policy
        self._lock = threading.Lock()  # guards _pending and _blocked
        self._passes = threading.Lock()  # one delivery pass at a time
        self._pending: dict[tuple[str, str], Pending] = {}
        self._blocked: dict[str, dt.datetime] = {}  # notifier -> not before

    def load(self) -> int:
        """Pick up what the table holds as pending (after a restart); how many notices."""
        rows = pending_outbox(self.wh)
        with self._lock:
            for r in rows:
                self._pending[(r.notifier, r.message_id)] = Pending(
                    r.notifier,
                    r.message_id,
                    r.alert_id,
                    r.created_ts,
                    json.loads(r.payload),
                    r.attempts,
                    r.next_try_ts,
                    r.last_error,
                    r.version,
                )
        return len(rows)

    def put(self, notices: Sequence[Notice], now: dt.datetime) -> None:
        """Queue each notice for every notifier."""
        fresh = [
            Pending(name, n.message_id, n.alert_id, now, n.payload())
            for n in notices
            for name in self.notifiers
        ]
        with self._lock:
            for p in fresh:
                self._pending.setdefault((p.notifier, p.message_id), p)
        self._persist([p.row("pending", now) for p in fresh])

    def pending(self) -> list[Pending]:
        with self._lock:
            return sorted(self._pending.values(), key=lambda p: (p.created, p.notifier))

    def deliver(self, now: dt.datetime) -> list[Delivery]:
        """One delivery pass at ``now``: what was tried and how it went."""
        with self._passes:
            done: list[Delivery] = []
            for name in sorted({p.notifier for p in self.pending()}):
                done += self._deliver_to(name, now)
            return done

    def _mine(self, name: str) -> list[Pending]:
        with self._lock:
            mine = [p for p in self._pending.values() if p.notifier == name]
        return sorted(mine, key=lambda p: (p.created, p.message_id))

    def _expire(self, name: str, now: dt.datetime, rows: list[OutboxRow]) -> list[Delivery]:
        """Give up the notices of ``name`` queued ``give_up_s`` ago or more (all of them when
        the notifier is no longer configured), whether or not their next try is due."""
        done = []
        gone = name not in self.notifiers
        for p in self._mine(name):
            if not gone and (now - p.created).total_seconds() < self.policy.give_up_s:
                continue
            why = "no such notifier any more" if gone else "retried too long"
            log.error("alert notice %s to %s given up (%s)", p.message_id, name, why)
            p.version += 1
            rows.append(p.row("expired", now))
            event = str(p.payload.get("event", ""))
            done.append(Delivery(name, p.message_id, p.alert_id, event, "expired", p.attempts, why))
            self._drop(p)
        return done

    def _deliver_to(self, name: str, now: dt.datetime) -> list[Delivery]:
        rows: list[OutboxRow] = []
        done = self._expire(name, now, rows)
        notifier = self.notifiers.get(name)
        with self._lock:
            blocked = self._blocked.get(name, now) > now
        if blocked or notifier is None:
            self._persist(rows)
            return done
        for p in (p for p in self._mine(name) if p.next_try is None or p.next_try <= now):
            event = str(p.payload.get("event", ""))
            p.attempts += 1
            try:
                notifier.send(p.payload)
            except NotifyError as exc:
                p.last_error, p.version = str(exc), p.version + 1
                p.next_try = now + self.policy.delay(p.attempts)
                with self._lock:
                    self._blocked[name] = p.next_try
                log.warning("alert notifier %s failed (try %d): %s", name, p.attempts, exc)
                rows.append(p.row("pending", now))
                done.append(
                    Delivery(
                        name,
                        p.message_id,
                        p.alert_id,
                        event,
                        "failed",
                        p.attempts,
                        str(exc),
                        p.next_try,
                    )
                )
                break  # the notifier is down: its other notices wait for the next try
            p.version += 1
            rows.append(p.row("delivered", now))
            done.append(Delivery(name, p.message_id, p.alert_id, event, "delivered", p.attempts))
            self._drop(p)
        with self._lock:
            if self._blocked.get(name, now) <= now:  # it took what it was sent: unblocked
                self._blocked.pop(name, None)
        self._persist(rows)
        return done

    def _drop(self, p: Pending) -> None:
        with self._lock:
            self._pending.pop((p.notifier, p.message_id), None)

    def _persist(self, rows: list[OutboxRow]) -> None:
        """Best effort: a warehouse that is down keeps the outbox in memory only (logged)."""
        try:
            record_outbox(self.wh, rows)
        except WarehouseError as exc:
            log.error("the alert outbox could not be written (kept in memory): %s", exc)
