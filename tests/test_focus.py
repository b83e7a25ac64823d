"""The FOCUS 1.2 export of a month's chargeback, checked by the FinOps Foundation's own
validator (``focus-validator`` 2.2.1, run offline from its own Python ≥ 3.12 venv, which
``make focus-venv`` builds) and against the ledger it was written from, to the cent.

Every mandatory rule (id ending in ``-M``) must pass; the other rules that fail are printed
(``pytest -s``), with what they ask, for the chargeback issue's closing note.
"""

from __future__ import annotations

import csv
import datetime as dt
import glob
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import fresh_database, recent, simulate

from gpuledger_errors import InputError
from reports.focus import (
    APPLICABILITY,
    COLUMNS,
    SHARE_DESCRIPTION,
    FocusAccount,
    focus_rows,
    write_focus,
)
from warehouse.client import Warehouse
from warehouse.ledger import Ledger, Window, compute_ledger

ROOT = Path(__file__).resolve().parents[1]
FOCUS_VENV = ROOT / ".venv-focus"
VALIDATOR = FOCUS_VENV / "bin" / "focus-validator"
ACCOUNT = FocusAccount("Research Computing", "sim-cluster", "Simulated GPU cluster")
SIM_DAYS = dt.timedelta(days=1)
BY = "tenant,user,gpu_model"


def _sim_end() -> dt.datetime:
    """Recent enough for the raw retention to keep the samples (so usage is measured), and a
    whole simulated day inside one calendar month."""
    end = recent(dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC))
    while (end - SIM_DAYS).month != end.month:
        end -= dt.timedelta(weeks=1)
    return end


SIM_END = _sim_end()
FIRST = SIM_END.date().replace(day=1)
LAST = (FIRST + dt.timedelta(days=32)).replace(day=1) - dt.timedelta(days=1)
MONTH = Window.days(FIRST, LAST)
AFTER = MONTH.end + dt.timedelta(days=1)  # the month is closed: nothing is cut


@pytest.fixture(scope="module")
def month(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=SIM_DAYS.days, gpus=16, seed=7, now=SIM_END)
        yield wh


def _ledger(wh: Warehouse, policy: str, tenant: str | None = None) -> Ledger:
    return compute_ledger(wh, MONTH, now=AFTER, group_by=BY, idle_policy=policy, tenant=tenant)


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


# --- the validator --------------------------------------------------------------------


def _python_312() -> str | None:
    """A Python ≥ 3.12 the machine can run (pyenv's shims answer but may refuse to run)."""
    names = [shutil.which(n) for n in ("python3.12", "python3.13", "python3.14")]
    names += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
    for py in filter(None, names):
        probe = [py, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return py
    return None


@pytest.fixture(scope="session")
def validator() -> Path:
    if not VALIDATOR.exists():
        if _python_312() is None:
            pytest.skip("focus-validator 2.2.1 needs Python >= 3.12 and this machine has none")
        pytest.fail(f"{VALIDATOR} is missing: run `make focus-venv` (make test does)")
    return VALIDATOR


def _package() -> Path:
    found = sorted(FOCUS_VENV.glob("lib/python3.*/site-packages/focus_validator"))
    assert found, f"no focus_validator package in {FOCUS_VENV}"
    return found[0]


def _rule_texts() -> dict[str, str]:
    """Each rule's requirement, as the spec words it (the validator's XML names only the
    check), to say in a line why a rule failed."""
    model = json.loads((_package() / "rules" / "model-1.2.0.1.json").read_text())
    return {
        rule_id: rule["ValidationCriteria"].get("MustSatisfy", "")
        for rule_id, rule in model["ModelRules"].items()
    }


def _validate(validator: Path, data: Path, work: Path) -> dict[str, tuple[str, str]]:
    """Every rule's outcome (passed, failed, errored or skipped) and message.

    2.2.1 opens ``focus_validator/rules/currency_codes.csv`` relative to its working
    directory and writes its debug log there, so it runs in a folder of its own holding a
    link to the package's file, rather than in (and writing into) the venv's site-packages.
    """
    cwd = work / "validator"
    (cwd / "focus_validator" / "rules").mkdir(parents=True, exist_ok=True)
    codes = cwd / "focus_validator" / "rules" / "currency_codes.csv"
    if not codes.exists():
        codes.symlink_to(_package() / "rules" / "currency_codes.csv")
    report = work / f"{data.stem}.xml"
    done = subprocess.run(
        [
            str(validator),
            *("--data-file", str(data), "--validate-version", "1.2", "--block-download"),
            *("--output-type", "unittest", "--output-destination", str(report)),
            *("--applicability-criteria", ",".join(APPLICABILITY)),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and report.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).iter("testcase"):
        rule_id = case.get("name", "").split(" :: ")[0]
        verdict = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        status = {"failure": "failed", "error": "errored", "skipped": "skipped"}.get(
            verdict.tag if verdict is not None else "", "passed"
        )
        outcomes[rule_id] = (status, "" if verdict is None else verdict.get("message", ""))
    passed = sum(s == "passed" for s, _ in outcomes.values())
    assert len(outcomes) > 500 and passed > 150, f"the validator checked little: {passed} passed"
    return outcomes


def _failing(outcomes: dict[str, tuple[str, str]]) -> dict[str, str]:
    texts = _rule_texts()
    return {
        rule_id: f"{status}: {texts.get(rule_id, '')} {message}".strip()
        for rule_id, (status, message) in sorted(outcomes.items())
        if status in ("failed", "errored")
    }


# --- the tests --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["weighted", "none"])
def test_the_export_passes_every_mandatory_focus_rule(
    month: Warehouse, validator: Path, tmp_path: Path, policy: str
) -> None:
    ledger = _ledger(month, policy)
    assert len({r.parts[0] for r in ledger.rows}) >= 2, "the fixture needs several tenants"
    assert ledger.totals.used_gpu_hours, "the fixture's usage must be measured"
    path = tmp_path / f"focus-{policy}.csv"
    written = write_focus(path, ledger, account=ACCOUNT)

    failing = _failing(_validate(validator, path, tmp_path))
    mandatory = {k: v for k, v in failing.items() if k.endswith("-M")}
    print(f"\nFOCUS 1.2, {policy} policy: {len(failing)} non-mandatory rule(s) fail")
    for rule_id, why in failing.items():
        print(f"  {rule_id}: {why}")
    assert not mandatory, mandatory

    rows = _read(path)
    assert len(rows) == written and list(rows[0]) == list(COLUMNS)
    _assert_instants(rows)
    _assert_the_ledgers_figures(rows, ledger)


def _assert_instants(rows: list[dict[str, str]]) -> None:
    # the validator lets any date its CSV reader parses pass: the format is checked here
    instants = {r[c] for r in rows for c in COLUMNS if c.endswith(("PeriodStart", "PeriodEnd"))}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", t) for t in instants)
    assert {
        MONTH.start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        MONTH.end.strftime("%Y-%m-%dT%H:%M:%SZ"),
    } == instants


def _assert_the_ledgers_figures(rows: list[dict[str, str]], ledger: Ledger) -> None:
    """The cents add up to the ledger's (capacity cost, as the ledger conserves it), the
    hours to its hours, and each usage row is its line's."""
    billed = sum((Decimal(r["BilledCost"]) for r in rows), Decimal(0))
    lines = sum((r.total_cost for r in ledger.rows), Decimal(0))
    unallocated = ledger.unallocated.cost if ledger.unallocated else Decimal(0)
    assert billed == lines + unallocated == ledger.totals.total_cost
    assert ledger.totals.capacity_cost is not None and billed == ledger.totals.capacity_cost
    hours = sum(float(r["x_AllocatedGpuHours"] or 0) for r in rows)
    assert hours == pytest.approx(ledger.totals.allocated_gpu_hours, abs=1e-5 * len(rows))
    used = sum(float(r["x_UsedGpuHours"] or 0) for r in rows)
    assert used == pytest.approx(ledger.totals.used_gpu_hours, abs=1e-5 * len(rows))

    usage = [r for r in rows if r["ChargeCategory"] == "Usage"]
    assert len(usage) == len(ledger.rows)
    for row, line in zip(usage, ledger.rows, strict=True):
        assert Decimal(row["BilledCost"]) == line.direct_cost
        assert row["SubAccountId"] == line.parts[0] and row["x_GpuModel"] == line.parts[2]
        tags = json.loads(row["Tags"])
        assert tags["gpuledger/user"] == line.parts[1]
        assert f"{tags['gpuledger/org']}/{tags['gpuledger/project']}" == line.parts[0]
    shares = [r for r in rows if r["x_CostKind"] == "unallocated-share"]
    assert all(r["ChargeDescription"].startswith(SHARE_DESCRIPTION) for r in shares)
    assert sum((Decimal(r["BilledCost"]) for r in shares), Decimal(0)) == sum(
        (r.shared_cost for r in ledger.rows), Decimal(0)
    )
    nobody = [r for r in rows if not r["SubAccountId"]]
    if ledger.idle_policy.value == "none":
        assert not shares and ledger.unallocated is not None
        assert [Decimal(r["BilledCost"]) for r in nobody] == [ledger.unallocated.cost]
    else:
        assert shares and not nobody


def test_the_validator_catches_a_broken_export(
    month: Warehouse, validator: Path, tmp_path: Path
) -> None:
    """The check above can fail: a charge category FOCUS does not know and a missing currency
    are reported as failing mandatory rules."""
    rows = focus_rows(_ledger(month, "weighted"), account=ACCOUNT)
    for row in rows:
        row["ChargeCategory"] = "Rental"
        row["BillingCurrency"] = None
    path = tmp_path / "broken.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows([row.get(c) or "" for c in COLUMNS] for row in rows)
    mandatory = {k for k in _failing(_validate(validator, path, tmp_path)) if k.endswith("-M")}
    assert "BillingCurrency-C-004-M" in mandatory
    assert "ChargeCategory-C-003-M" in mandatory


def test_the_same_ledger_writes_the_same_bytes(month: Warehouse, tmp_path: Path) -> None:
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    write_focus(first, _ledger(month, "even"), account=ACCOUNT)
    write_focus(second, _ledger(month, "even"), account=ACCOUNT)
    assert first.read_bytes() == second.read_bytes()
    assert b"\r" not in first.read_bytes()


def test_a_tenants_export_holds_its_rows_alone(month: Warehouse, tmp_path: Path) -> None:
    whole = _ledger(month, "weighted")
    org = whole.rows[0].parts[0].split("/")[0]
    mine = _ledger(month, "weighted", tenant=org)
    path = tmp_path / "tenant.csv"
    write_focus(path, mine, account=ACCOUNT)
    rows = _read(path)
    assert rows and all(r["SubAccountId"].startswith(org + "/") for r in rows)
    billed = sum((Decimal(r["BilledCost"]) for r in rows), Decimal(0))
    assert billed == sum(
        (r.total_cost for r in whole.rows if r.parts[0].startswith(org + "/")), Decimal(0)
    )


def test_a_window_that_is_not_a_month_is_refused(month: Warehouse) -> None:
    week = compute_ledger(
        month, Window.days(FIRST, FIRST + dt.timedelta(days=6)), now=AFTER, group_by=BY
    )
    with pytest.raises(InputError, match="one calendar month"):
        focus_rows(week, account=ACCOUNT)
    with pytest.raises(InputError, match="billing_account_id"):
        FocusAccount("Research Computing", " ", "Simulated GPU cluster")
