"""`gpuledger report` as a user runs it: the files, what a second run says, and mistakes."""

from __future__ import annotations

import csv
import datetime as dt
import json
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_report_command(tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]) -> None:
    d, out = str(tmp_path / "d"), tmp_path / "out"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*gpuledger_cmd, *args, "--data-dir", d],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    assert run("demo", "--days", "0.5", "--gpus", "8", "--no-serve").returncode == 0
    month = dt.datetime.now(dt.UTC).strftime("%Y-%m")
    made = run("report", "--month", month, "--formats", "csv,xlsx", "--out", str(out))
    assert made.returncode == 0, made.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        f"chargeback-{month}.csv",
        f"chargeback-{month}.manifest.json",
        f"chargeback-{month}.xlsx",
    ]
    assert "bytes" in made.stdout
    manifest = json.loads((out / f"chargeback-{month}.manifest.json").read_text())
    with (out / f"chargeback-{month}.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sum((Decimal(r["total_cost"]) for r in rows), Decimal(0)) == Decimal(
        manifest["total_cost"]
    )
    ledger = json.loads(
        run(
            "ledger",
            "--from",
            f"{month}-01",
            "--to",
            dt.date.today().isoformat(),
            "--format",
            "json",
        ).stdout
    )
    # the month is not over: capacity (and so shared cost) grows between the two commands
    assert set(manifest["tenants"]) == {r["key"] for r in ledger["rows"]}
    again = run("report", "--month", month, "--formats", "csv,focus", "--out", str(out))
    assert again.returncode == 0, again.stderr
    focus = (out / f"chargeback-{month}.focus.csv").read_text().splitlines()
    assert focus[0].startswith("AvailabilityZone,") or "BilledCost" in focus[0]
    assert len(focus) > len(rows)  # a usage row per line, and its share of idle capacity
    # …and so a second run of an unfinished month names what grew
    assert "changed since the last run of this month:" in again.stdout
    assert "total:" in again.stdout

    wrong = run("report", "--month", month, "--formats", "csv,docx", "--out", str(out))
    assert wrong.returncode == 2
    assert wrong.stderr.startswith("gpuledger: --formats 'csv,docx': docx is not a report format")
    future = run("report", "--month", "2099-01", "--out", str(out))
    assert future.returncode == 2 and "has not started yet" in future.stderr
    nobody = run("report", "--month", month, "--tenant", "nobody", "--formats", "csv")
    assert nobody.returncode == 2 and "held no GPU" in nobody.stderr
