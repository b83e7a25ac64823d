"""Advice through its approval path: proposed (stored with status ``proposed``), approved by a
manager, then applied; or rejected, superseded by a new amount, or withdrawn when its
condition no longer holds. Every step is a new row of ``advice`` (the latest row is the
advice's state) and an entry in the audit log with who did it and the state before and after.

Stable: a run that finds the same advice as the one in force (same kind, cluster, pool,
model and tenants) keeps it when the amount moved by ``min_change_gpus`` or less (a weight:
not at all) and the jobs it names are still among those it could name; only then is nothing
written. Together with the advice's ``hold_s`` (a condition counts once it has held that
long), a second run on unchanged data proposes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from gpuledger_errors import InputError
from scheduler_hooks.advice import EPS, AdviceReport, Recommendation
from warehouse.advice import AdviceRow, advice_rows, record_advice
from warehouse.analytics.alerts import current_advice
from warehouse.client import Warehouse

_MS = dt.timedelta(milliseconds=1)


class AdviceError(InputError):
    """No such advice, or it is not in the state the step needs."""


@dataclasses.dataclass(frozen=True)
class Stored:
    """An advice as its latest row has it; ``advice`` is its JSON (the recommendation)."""

    row: AdviceRow
    first_ts: dt.datetime

    @property
    def advice_id(self) -> str:
        return self.row.advice_id

    @property
    def status(self) -> str:
        return self.row.status

    @property
    def advice(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.row.payload or "{}")
        return doc | {"advice_id": self.advice_id, "status": self.status}

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        r = self.row
        return (r.kind, r.cluster, r.pool, r.gpu_model, r.from_tenant, r.to_tenant)

    def to_json(self) -> dict[str, Any]:
        """The advice's JSON, under its row's fields (which a tenant's view has scoped)."""
        r = self.row
        return self.advice | {
            "kind": r.kind,
            "cluster": r.cluster,
            "pool": r.pool,
            "gpu_model": r.gpu_model,
            "from_tenant": r.from_tenant,
            "to_tenant": r.to_tenant,
            "gpus": r.gpus,
            "job_ids": list(r.job_ids),
            "reason": r.reason,
            "proposed_at": self.first_ts.isoformat(),
            "changed_at": r.ts.isoformat(),
        }


@dataclasses.dataclass(frozen=True)
class ProposalRun:
    """What one run of :func:`propose` did, by advice id."""

    proposed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    superseded: tuple[str, ...] = ()
    withdrawn: tuple[str, ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in dataclasses.asdict(self).items()}


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def in_force(
    wh: Warehouse, at: dt.datetime, *, cluster: str = "", tenant: str | None = None
) -> list[Stored]:
    """The advice in force at ``at`` (proposed or approved), newest first, as ``tenant``
    may see it (see :func:`warehouse.analytics.alerts.current_advice`)."""
    frame = current_advice(wh, at, cluster=cluster, tenant=tenant)
    return [
        Stored(
            AdviceRow(
                r["ts"], r["advice_id"], r["kind"], r["cluster"], r["pool"], r["gpu_model"],
                r["from_tenant"], r["to_tenant"], r["gpus"], tuple(r["job_ids"] or ()),
                r["reason"], r["payload"], r["status"],
            ),
            r["first_ts"],
        )
        for r in frame.iter_rows(named=True)
    ]  # fmt: skip


def _unchanged(old: Stored, rec: Recommendation, min_change: float) -> bool:
    amount = float(old.advice.get("amount", old.row.gpus))
    allowed = EPS if rec.kind == "fair_share_weight" else min_change + EPS
    return abs(amount - rec.amount) <= allowed and set(old.row.job_ids) <= set(rec.candidates)


def _row(rec: Recommendation, advice_id: str, ts: dt.datetime, status: str) -> AdviceRow:
    return AdviceRow(
        ts, advice_id, rec.kind, rec.cluster, rec.pool, rec.gpu_model, rec.from_tenant,
        rec.to_tenant, rec.gpus, tuple(j.job_id for j in rec.jobs), rec.reason,
        json.dumps(rec.to_json(), sort_keys=True), status,
    )  # fmt: skip


def _summary(advice: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("kind", "cluster", "pool", "gpu_model", "from_tenant", "to_tenant", "amount")
    return {k: advice.get(k) for k in keep} | {
        "change": advice.get("change"),
        "jobs": [j["job_id"] for j in advice.get("jobs", [])],
    }


def propose(
    wh: Warehouse,
    report: AdviceReport,
    *,
    actor: str,
    clock: Callable[[], dt.datetime] = _utc_now,
) -> ProposalRun:
    """Store the report's recommendations as proposed, keeping the advice in force that
    still holds, superseding what moved and withdrawing proposed advice whose condition is
    gone; each change audited (``advice.propose``, ``.supersede``, ``.withdraw``)."""
    now = max(report.at, clock())
    current: dict[tuple[str, ...], Stored] = {}
    for s in in_force(wh, now, cluster=report.cluster):
        current.setdefault(s.key, s)  # newest first: the newest of a key wins
    min_change = report.policy.hysteresis.min_change_gpus
    rows: list[AdviceRow] = []
    audits: list[tuple[str, str, dict[str, Any]]] = []
    run: dict[str, list[str]] = {"proposed": [], "kept": [], "superseded": [], "withdrawn": []}
    for rec in report.recommendations:
        old = current.pop(rec.key, None)
        if old is not None and _unchanged(old, rec, min_change):
            run["kept"].append(old.advice_id)
            continue
        advice_id = uuid.uuid4().hex[:12]
        if old is not None:
            rows.append(dataclasses.replace(old.row, ts=now, status="superseded"))
            run["superseded"].append(old.advice_id)
            audits.append(("advice.supersede", old.advice_id, {
                "before": _summary(old.advice), "after": {"superseded_by": advice_id},
            }))  # fmt: skip
        rows.append(_row(rec, advice_id, report.at, "proposed"))
        run["proposed"].append(advice_id)
        audits.append(("advice.propose", advice_id, {
            "before": None if old is None else _summary(old.advice),
            "after": _summary(rec.to_json()) | {"reason": rec.reason},
        }))  # fmt: skip
    for old in current.values():
        if old.status == "proposed":
            rows.append(dataclasses.replace(old.row, ts=now, status="withdrawn"))
            run["withdrawn"].append(old.advice_id)
            audits.append(("advice.withdraw", old.advice_id, {
                "before": _summary(old.advice), "after": "its condition no longer holds",
            }))  # fmt: skip
    record_advice(wh, rows)
    for action, obj, detail in audits:
        wh.audit(actor, action, obj, json.dumps(detail, sort_keys=True, default=str))
    return ProposalRun(**{k: tuple(v) for k, v in run.items()})


def get(wh: Warehouse, advice_id: str) -> Stored:
    """One advice as it stands now; :class:`AdviceError` when there is none."""
    rows = advice_rows(wh, advice_id)
    if not rows:
        raise AdviceError(
            f"no advice {advice_id!r}: `gpuledger advise list` shows the advice in force and "
            "its ids"
        )
    return Stored(rows[-1], rows[0].ts)


def _step(
    wh: Warehouse,
    advice_id: str,
    *,
    actor: str,
    wanted: str,
    status: str,
    clock: Callable[[], dt.datetime],
    detail: Mapping[str, Any] | None = None,
) -> Stored:
    """Move an advice from status ``wanted`` to ``status``, audited as ``advice.<verb>``."""
    old = get(wh, advice_id)
    if old.status != wanted:
        raise AdviceError(
            f"advice {advice_id} is {old.status}: only {wanted} advice can be "
            f"{status}"
            + (" (approve it first: `gpuledger advise approve ID`)" if wanted == "approved" else "")
        )
    row = dataclasses.replace(old.row, ts=max(clock(), old.row.ts + _MS), status=status)
    record_advice(wh, [row])
    verb = {"approved": "approve", "rejected": "reject", "applied": "apply"}[status]
    wh.audit(
        actor,
        f"advice.{verb}",
        advice_id,
        json.dumps(
            {"before": {"status": old.status}, "after": {"status": status}, **(detail or {})}
            | {"advice": _summary(old.advice)},
            sort_keys=True,
            default=str,
        ),
    )
    return Stored(row, old.first_ts)


def approve(
    wh: Warehouse, advice_id: str, *, actor: str, clock: Callable[[], dt.datetime] = _utc_now
) -> Stored:
    """A manager approves proposed advice, which may then be applied."""
    return _step(wh, advice_id, actor=actor, wanted="proposed", status="approved", clock=clock)


def reject(
    wh: Warehouse, advice_id: str, *, actor: str, clock: Callable[[], dt.datetime] = _utc_now
) -> Stored:
    """A manager turns proposed advice down; it is no longer in force."""
    return _step(wh, advice_id, actor=actor, wanted="proposed", status="rejected", clock=clock)


def applied(
    wh: Warehouse,
    advice_id: str,
    *,
    actor: str,
    before: Any,
    after: Any,
    clock: Callable[[], dt.datetime] = _utc_now,
) -> Stored:
    """Record that approved advice was applied, with the scheduler's state before and after."""
    return _step(
        wh,
        advice_id,
        actor=actor,
        wanted="approved",
        status="applied",
        clock=clock,
        detail={"scheduler_before": before, "scheduler_after": after},
    )


def check_approved(wh: Warehouse, advice_id: str) -> Stored:
    """The advice, if it is approved (only approved advice is applied)."""
    found = get(wh, advice_id)
    if found.status != "approved":
        raise AdviceError(
            f"advice {advice_id} is {found.status}: only approved advice is applied (a "
            "manager approves it with `gpuledger advise approve ID`)"
        )
    return found
