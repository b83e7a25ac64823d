"""One evaluation of the alert rules: what holds at an instant, rule by rule.

A rule that fails (the warehouse is unreachable, a bug) is named in ``failed`` and its alerts are
left as they were: an alert resolves because its rule looked and found nothing, never because
its rule could not look.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable

from reports.alerts.findings import Finding
from reports.alerts.fleet_rules import unhealthy_findings, waiting_findings
from reports.alerts.idle_rules import borrowed_findings, idle_findings
from reports.alerts.look import Look
from reports.alerts.rules import RULES, AlertRules
from warehouse.analytics.fleet import known_clusters
from warehouse.client import Warehouse
from warehouse.ledger import PriceBook

log = logging.getLogger(__name__)

_JUDGES: dict[str, Callable[[Look], list[Finding]]] = {
    "idle": idle_findings,
    "waiting": waiting_findings,
    "unhealthy": unhealthy_findings,
    "borrowed": borrowed_findings,
}
assert tuple(_JUDGES) == RULES


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The findings at ``at`` of the rules in ``evaluated``; ``failed`` could not look."""

    at: dt.datetime
    findings: tuple[Finding, ...]
    evaluated: frozenset[str]
    failed: dict[str, str]  # rule -> what went wrong


def evaluate(wh: Warehouse, rules: AlertRules, at: dt.datetime, *, prices: PriceBook) -> Evaluation:
    """Evaluate ``rules`` at ``at`` (UTC) over every cluster of ``wh``, pricing with
    ``prices``; findings in rule order, each rule's in the order it found them. Two findings
    never share a key (the first is kept)."""
    if at.tzinfo is None:
        raise ValueError("evaluate needs a timezone-aware instant")
    at = at.astimezone(dt.UTC)
    look = Look(wh, rules, at, prices, known_clusters(wh))
    findings: dict[str, Finding] = {}
    failed: dict[str, str] = {}
    for rule in rules.rules:
        try:
            found = _JUDGES[rule](look)
        except Exception as exc:  # one rule's failure must not silence the others
            log.exception("alert rule %s could not be evaluated at %s", rule, at)
            failed[rule] = f"{type(exc).__name__}: {exc}"
            continue
        for finding in found:
            findings.setdefault(finding.key, finding)
    return Evaluation(at, tuple(findings.values()), frozenset(rules.rules) - set(failed), failed)
