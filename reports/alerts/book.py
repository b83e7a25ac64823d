"""The open alerts and what changes them: dedup, cooldown and resolution.

An alert is one rule holding for one subject (a finding's ``key``) from the evaluation that
first found it (``fired``) to the first evaluation of its rule that no longer finds it
(``resolved``); ``alert_id`` names that stretch (the key and the instant it fired). While it stays
open, evaluations say nothing more until ``cooldown_s`` has passed since anyone was last told;
then it is told again (``repeated``; a cooldown of 0 never repeats). Every notice is a row of the
alert history, which is what a restarted process rebuilds the open alerts from.

:class:`AlertBook` is a value: :meth:`AlertBook.update` returns the next book and the notices,
so a caller keeps the old book when recording the notices fails.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reports.alerts.evaluate import Evaluation
from reports.alerts.findings import Finding, lasted, money, plain, when
from warehouse.alerts import AlertRow, OpenAlertRow

log = logging.getLogger(__name__)

EVENTS = ("fired", "repeated", "resolved")


@dataclasses.dataclass(frozen=True)
class Notice:
    """What to tell about one alert: it ``fired``, is ``repeated`` after the cooldown, or is
    ``resolved``; ``finding`` is the latest look at it (the last one, when resolved)."""

    event: str
    alert_id: str
    finding: Finding
    ts: dt.datetime  # the evaluation that decided it
    opened: dt.datetime  # when the alert fired
    note: str = ""  # why it resolved, when not simply because the condition ended

    @property
    def state(self) -> str:
        return "resolved" if self.event == "resolved" else "firing"

    @property
    def message_id(self) -> str:
        return f"{self.alert_id}|{self.event}|{int(self.ts.timestamp() * 1000)}"

    @property
    def duration_s(self) -> float:
        """How long the condition has held: from its start (or the firing) to this notice."""
        start = self.finding.since or self.opened
        return max(0.0, (self.ts - start).total_seconds())

    def text(self) -> str:
        """The notice in one line, as the log, Slack and the e-mail subject's body say it."""
        f = self.finding
        if self.event == "fired":
            return f"[{f.severity.upper()}] {f.title}: {f.summary}"
        if self.event == "repeated":
            return f"[{f.severity.upper()}, open since {when(self.opened)}] {f.title}: {f.summary}"
        note = f" ({self.note})" if self.note else ""
        return (
            f"[RESOLVED] {f.title}: {f.subject}: over at {when(self.ts)}{note}, after "
            f"{lasted(f.since or self.opened, self.ts)}; cost so far when last seen "
            f"{money(f.cost, f.currency)}"
        )

    def payload(self) -> dict[str, Any]:
        """The notice as the webhook receives it (JSON types)."""
        f = self.finding
        return plain(
            {
                "event": self.event,
                "state": self.state,
                "alert_id": self.alert_id,
                "key": f.key,
                "rule": f.rule,
                "title": f.title,
                "severity": f.severity,
                "cluster": f.cluster,
                "node": f.node,
                "gpus": list(f.gpus),
                "jobs": list(f.jobs),
                "tenant": f.tenant,
                "since": f.since,
                "opened": self.opened,
                "at": self.ts,
                "duration_s": self.duration_s,
                "cost": f.cost,
                "currency": f.currency,
                "value": f.value,
                "threshold": f.threshold,
                "subject": f.subject,
                "summary": f.summary,
                "text": self.text(),
                "url": f.link,
                "facts": dict(f.facts),
            }
        )

    def row(self, notified: Sequence[str]) -> AlertRow:
        """The notice as a row of the alert history, sent to ``notified``."""
        f = self.finding
        return AlertRow(
            ts=self.ts,
            alert_id=self.alert_id,
            alert_key=f.key,
            rule=f.rule,
            severity=f.severity,
            state=self.state,
            event=self.event,
            cluster=f.cluster,
            node=f.node,
            gpu_uuid=f.gpus[0] if f.gpus else "",
            job_id=f.jobs[0] if f.jobs else "",
            tenant=f.tenant,
            value=f.value,
            threshold=f.threshold,
            since=f.since,
            cost=f.cost,
            currency=f.currency,
            message=self.text(),
            url=f.link,
            gpus=f.gpus,
            jobs=f.jobs,
            notified=tuple(notified),
            details=json.dumps(f.to_json(), sort_keys=True),
        )


@dataclasses.dataclass(frozen=True)
class OpenAlert:
    alert_id: str
    opened: dt.datetime
    last_notice: dt.datetime
    finding: Finding


@dataclasses.dataclass(frozen=True)
class AlertBook:
    """The open alerts by key, and the cooldown between notices of one that stays open."""

    cooldown_s: int
    open: Mapping[str, OpenAlert] = dataclasses.field(default_factory=dict)

    @classmethod
    def rebuild(cls, rows: Iterable[OpenAlertRow], cooldown_s: int) -> AlertBook:
        """The book the history's open alerts make (the latest firing of a key wins)."""
        out: dict[str, OpenAlert] = {}
        for r in rows:
            try:
                finding = Finding.from_json(json.loads(r.details))
            except (ValueError, TypeError, KeyError) as exc:  # a row gpuledger did not write
                log.warning(
                    "open alert %s has no finding to rebuild (%s): kept by key", r.alert_id, exc
                )
                finding = Finding(r.rule, r.key, "", r.key, r.key, r.last_notice, r.opened)
            current = out.get(r.key)
            if current is None or r.opened >= current.opened:
                out[r.key] = OpenAlert(r.alert_id, r.opened, r.last_notice, finding)
        return cls(cooldown_s, out)

    def update(self, ev: Evaluation) -> tuple[AlertBook, list[Notice]]:
        """The book after ``ev``, and the notices to send: new findings fire, findings of open
        alerts repeat once the cooldown has passed (else say nothing), and open alerts that a
        rule looked for and did not find resolve (a rule turned off resolves its alerts too)."""
        at, found = ev.at, {f.key: f for f in ev.findings}
        book = dict(self.open)
        notices = []
        for key, finding in found.items():
            current = book.get(key)
            if current is None:
                alert_id = f"{key}@{at:%Y-%m-%dT%H:%M:%SZ}"
                notices.append(Notice("fired", alert_id, finding, at, at))
                book[key] = OpenAlert(alert_id, at, at, finding)
            elif self.cooldown_s and (at - current.last_notice).total_seconds() >= self.cooldown_s:
                notices.append(Notice("repeated", current.alert_id, finding, at, current.opened))
                book[key] = dataclasses.replace(current, last_notice=at, finding=finding)
            else:
                book[key] = dataclasses.replace(current, finding=finding)
        for key, current in self.open.items():
            rule = current.finding.rule
            if key in found or rule in ev.failed:
                continue
            note = "" if rule in ev.evaluated else "its rule is turned off"
            notices.append(
                Notice("resolved", current.alert_id, current.finding, at, current.opened, note)
            )
            del book[key]
        return AlertBook(self.cooldown_s, book), notices
