"""Advice through its approval path on tests/advice_fixture.py's cluster: proposed once and
kept while nothing changed (no flapping), superseded when its amount moves, withdrawn when its
condition is gone; approved by a manager, applied only once approved (Slurm commands through
a stub), each step in the audit log with who and before/after."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import advice_fixture as af
import polars as pl
import pytest
from test_advice import LIMITS, advise

from scheduler_hooks import proposals
from scheduler_hooks.apply import ApplyError, apply_advice
from scheduler_hooks.policy import Names
from scheduler_hooks.proposals import AdviceError
from warehouse.analytics import quota
from warehouse.audit import audit_entries
from warehouse.client import Warehouse

KINDS = [
    "fair_share_weight",
    "fair_share_weight",
    "idle_limit",
    "interactive_limit",
    "lend_guarantee",
    "lower_borrow_limit",
    "reclaim",
]


def later() -> dt.datetime:
    """After every row written: status changes are stamped with the wall clock."""
    return dt.datetime.now(dt.UTC) + dt.timedelta(days=1)


def rows(wh: Warehouse) -> int:
    return int(wh.rows(f"SELECT count() FROM {wh.database}.advice")[0][0])


def by_kind(wh: Warehouse) -> dict[str, str]:
    """The advice in force, id by kind (and tenant, for weights)."""
    return {
        f"{s.row.kind}:{s.row.from_tenant}": s.advice_id for s in proposals.in_force(wh, later())
    }


def test_a_second_run_on_the_same_data_proposes_nothing(wh: Warehouse) -> None:
    af.fill(wh)
    first = proposals.propose(wh, advise(wh, **LIMITS), actor="cron")
    assert len(first.proposed) == 7 and not (first.kept or first.superseded or first.withdrawn)
    written = rows(wh)
    again = proposals.propose(wh, advise(wh, **LIMITS), actor="cron")
    assert again.proposed == () and sorted(again.kept) == sorted(first.proposed)
    assert rows(wh) == written  # nothing written at all
    # ten minutes on, the same data still holds the same advice
    moved = proposals.propose(wh, advise(wh, at=af.T + 10 * af.MIN, **LIMITS), actor="cron")
    assert moved.proposed == () and len(moved.kept) == 7
    stored = proposals.in_force(wh, later())
    assert sorted(s.row.kind for s in stored) == KINDS
    assert {s.status for s in stored} == {"proposed"}
    reclaim = next(s for s in stored if s.row.kind == "reclaim")
    assert reclaim.row.job_ids == ("nlp-idle1", "nlp-idle2") and reclaim.row.gpus == 3
    assert reclaim.advice["recovers_cost"] == "180.00" and reclaim.advice["amount"] == 3
    entries = audit_entries(wh, action="advice")
    assert [e.action for e in entries] == ["advice.propose"] * 7
    assert {e.actor for e in entries} == {"cron"}
    detail = json.loads(next(e.detail for e in entries if e.object == reclaim.advice_id))
    assert detail["before"] is None and detail["after"]["jobs"] == ["nlp-idle1", "nlp-idle2"]


def test_a_moved_amount_supersedes_and_a_gone_condition_withdraws(wh: Warehouse) -> None:
    af.fill(wh)
    proposals.propose(wh, advise(wh), actor="cron")
    before = by_kind(wh)
    # ml/nlp's guarantee up to 5: the reclaim falls from 3 GPUs to 1 (moved by more than 1)
    quotas = quota.quotas_at(wh, "c1", af.T).with_columns(
        pl.when(pl.col("tenant") == af.A).then(5.0).otherwise(pl.col("guaranteed_gpus"))
        .alias("guaranteed_gpus")
    )  # fmt: skip
    run = proposals.propose(wh, advise(wh, quotas=quotas), actor="cron")
    assert run.superseded == (before[f"reclaim:{af.A}"],) and len(run.proposed) == 1
    assert before[f"lower_borrow_limit:{af.A}"] in run.kept  # 1 -> 0: by 1, not more
    now = by_kind(wh)
    assert now[f"reclaim:{af.A}"] == run.proposed[0]
    assert proposals.get(wh, before[f"reclaim:{af.A}"]).status == "superseded"
    # approved advice stays; proposed advice whose condition is gone (nothing has waited or
    # idled for 5 h) is withdrawn
    proposals.approve(wh, now[f"lend_guarantee:{af.C}"], actor="mia")
    gone = proposals.propose(wh, advise(wh, quotas=quotas, HOLD_S="18000"), actor="cron")
    assert sorted(gone.withdrawn) == sorted(
        [now[f"reclaim:{af.A}"], now[f"lower_borrow_limit:{af.A}"]]
    )
    assert proposals.get(wh, now[f"lend_guarantee:{af.C}"]).status == "approved"
    actions = [e.action for e in audit_entries(wh, action="advice")]
    assert actions.count("advice.supersede") == 1 and actions.count("advice.withdraw") == 2


def _stub(tmp_path: Path, exit_code: int = 0) -> Path:
    """sacctmgr, scontrol and scancel that log their arguments (and fail when asked)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("sacctmgr", "scontrol", "scancel"):
        script = bin_dir / name
        script.write_text(
            f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/calls.log"\necho done\n'
            + (f'echo "refused" >&2\nexit {exit_code}\n' if exit_code else "")
        )
        script.chmod(0o755)
    return bin_dir


def test_only_approved_advice_is_applied_and_each_step_is_audited(
    wh: Warehouse, tmp_path: Path
) -> None:
    af.fill(wh)
    proposals.propose(wh, advise(wh), actor="cron")
    ids = by_kind(wh)
    reclaim, limit, lend = (
        ids[f"reclaim:{af.A}"],
        ids[f"lower_borrow_limit:{af.A}"],
        ids[f"lend_guarantee:{af.C}"],
    )
    names, bin_dir = Names(), _stub(tmp_path)

    def apply(advice_id: str) -> proposals.Stored:
        return apply_advice(
            wh, advice_id, target="slurm", actor="ops", names=names, slurm_bin_dir=str(bin_dir)
        )

    with pytest.raises(AdviceError, match="only approved advice is applied"):
        apply(reclaim)
    assert not (tmp_path / "calls.log").exists()  # nothing ran
    assert proposals.approve(wh, reclaim, actor="mia").status == "approved"
    assert proposals.approve(wh, limit, actor="mia").status == "approved"
    assert proposals.reject(wh, lend, actor="mia").status == "rejected"
    with pytest.raises(AdviceError, match="is rejected: only proposed advice can be approved"):
        proposals.approve(wh, lend, actor="mia")
    assert apply(reclaim).status == "applied"
    assert apply(limit).status == "applied"
    assert (tmp_path / "calls.log").read_text().splitlines() == [
        "scontrol requeue nlp-idle1",
        "scontrol requeue nlp-idle2",
        "sacctmgr -i modify account where name=nlp set GrpTRES=gres/gpu=3",
    ]
    with pytest.raises(AdviceError, match="is applied"):
        apply(reclaim)
    assert {s.advice_id for s in proposals.in_force(wh, later())}.isdisjoint(
        {reclaim, limit, lend}
    )  # applied and rejected advice is no longer in force
    entries = {(e.action, e.object): e for e in audit_entries(wh, action="advice")}
    approval = entries[("advice.approve", reclaim)]
    assert approval.actor == "mia" and approval.outcome == "ok"
    detail = json.loads(approval.detail)
    assert (detail["before"], detail["after"]) == ({"status": "proposed"}, {"status": "approved"})
    applied = json.loads(entries[("advice.apply", limit)].detail)
    assert entries[("advice.apply", limit)].actor == "ops"
    assert applied["scheduler_before"] == {
        "change": {"field": "borrow_limit_gpus", "from": None, "to": 1.0}
    }
    assert applied["scheduler_after"]["commands"][0]["command"].endswith("GrpTRES=gres/gpu=3")
    assert entries[("advice.reject", lend)].actor == "mia"


def test_a_failed_command_is_audited_and_leaves_the_advice_approved(
    wh: Warehouse, tmp_path: Path
) -> None:
    af.fill(wh)
    proposals.propose(wh, advise(wh), actor="cron")
    limit = by_kind(wh)[f"lower_borrow_limit:{af.A}"]
    proposals.approve(wh, limit, actor="mia")
    with pytest.raises(ApplyError, match="failed \\(exit 3\\): refused"):
        apply_advice(
            wh, limit, target="slurm", actor="ops", names=Names(),
            slurm_bin_dir=str(_stub(tmp_path, exit_code=3)),
        )  # fmt: skip
    assert proposals.get(wh, limit).status == "approved"
    (failed,) = audit_entries(wh, action="advice.apply")
    assert failed.outcome == "failed" and "refused" in failed.detail
    with pytest.raises(AdviceError, match="needs the cluster: give --kubeconfig"):
        apply_advice(wh, limit, target="kueue", actor="ops", names=Names())
    with pytest.raises(AdviceError, match="no advice 'nope'"):
        proposals.approve(wh, "nope", actor="mia")
