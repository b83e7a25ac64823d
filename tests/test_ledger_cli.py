"""`gpuledger ledger` as a user runs it, on a simulated cluster."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from warehouse.times import format_duration

pytestmark = pytest.mark.integration


def test_ledger_command(tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]) -> None:
    d = str(tmp_path / "d")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*gpuledger_cmd, *args, "--data-dir", d],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert run("demo", "--days", "0.5", "--gpus", "8", "--no-serve").returncode == 0
    today = dt.datetime.now(dt.UTC).date()
    first, last = (today - dt.timedelta(days=1)).isoformat(), today.isoformat()
    doc = json.loads(run("ledger", "--from", first, "--to", last, "--format", "json").stdout)
    assert doc["from"] == first and doc["to"] == last and doc["currency"] == "USD"
    assert doc["conserved"] is True
    totals = doc["totals"]
    assert totals["total_cost"] == totals["capacity_cost"]
    assert sum(float(r["total_cost"]) for r in doc["rows"]) == pytest.approx(
        float(totals["total_cost"]), abs=0.001
    )
    assert 0 < totals["allocated_gpu_hours"] <= totals["capacity_gpu_hours"]
    assert all(isinstance(r["direct_cost"], str) for r in doc["rows"])
    none = json.loads(
        run(
            "ledger",
            "--from",
            first,
            "--to",
            last,
            "--format",
            "json",
            "--idle-policy",
            "none",
            "--by",
            "gpu_model",
        ).stdout
    )
    assert none["unallocated"]["name"] == "unallocated capacity"
    assert "__unallocated__" not in {r["key"] for r in none["rows"]}
    table = run("ledger", "--from", first, "--to", last)
    assert "conservation: rows + unallocated = capacity cost: holds" in table.stdout
    csv = run("ledger", "--from", first, "--to", last, "--format", "csv", "--by", "org").stdout
    assert csv.splitlines()[0].startswith("org,allocated_gpu_hours")
    bad = run("ledger", "--from", first, "--to", last, "--by", "team")
    assert bad.returncode == 2 and "'team' is not one of tenant, org" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    empty = run("ledger", "--from", last, "--to", first)
    assert empty.returncode == 2 and "window is empty" in empty.stderr
    month = today.strftime("%Y-%m")
    why = json.loads(run("why", "cost", "--month", month, "--format", "json").stdout)
    effects = sum(float(v) for v in why["because"].values())
    assert effects == pytest.approx(float(why["change"]), abs=0.011)
    assert why["current"]["month"] == month
    text = run("why", "cost", "--month", month).stdout
    assert text.startswith("Cost of the cluster ") and f"in {month}" in text
    assert isinstance(doc["totals"]["stranded_gpu_hours"], float)  # one cluster: measured
    frag = json.loads(run("fragmentation", "--format", "json").stdout)
    assert 0 <= frag["cluster_fgd_gpus"] <= frag["free_gpus"]
    assert "free" in run("fragmentation").stdout
    gpu = run("sql", "SELECT gpu_uuid FROM gpuledger.gpus FINAL LIMIT 1", "--format", "csv")
    uuid = gpu.stdout.splitlines()[1]
    why_gpu = json.loads(run("why", "gpu", uuid, "--format", "json").stdout)
    assert why_gpu["state"] and why_gpu["summary"]
    tenant = doc["rows"][0]["key"]
    assert tenant in run("why", "tenant", tenant).stdout
    job = run("sql", "SELECT job_id FROM gpuledger.job_events LIMIT 1", "--format", "csv")
    job_id = job.stdout.splitlines()[1]
    assert job_id in run("why", "job", job_id).stdout
    missing = run("why", "job", "no-such-job")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    energy = json.loads(
        run("ledger", "--from", first, "--to", last, "--format", "json", "--energy").stdout
    )["energy"]
    assert energy["energy_kwh"] > 0 and energy["unpriced_kwh"] == 0
    assert sum(float(r["energy_cost"]) for r in energy["rows"]) == pytest.approx(
        float(energy["energy_cost"]), abs=0.001
    )
    # sealing: yesterday (if the demo reached it and it has finished) is kept, once
    sealed = json.loads(run("seal", "--format", "json").stdout)
    assert all(d < last for d in sealed["sealed"])
    # and the stranded capacity's past hours, today's too
    stranded = sealed["stranded_hours"]
    assert stranded["rows"] > 0 and all(d["day"] <= last for d in stranded["sealed"])
    again = run("seal")
    assert again.returncode == 0
    assert ("sealed 0 day(s)" in again.stdout) or again.stdout.startswith("nothing to seal")
    one_day = [
        json.loads(run("ledger", "--from", first, "--to", first, "--format", "json", *f).stdout)
        for f in ((), ("--no-seals",))
    ]
    with_seals, without = ({r["key"]: r for r in d["rows"]} for d in one_day)
    assert with_seals.keys() == without.keys()
    for key, row in without.items():
        for figure in ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours"):
            assert with_seals[key][figure] == pytest.approx(row[figure], abs=1e-6), key
    assert one_day[0]["totals"]["total_cost"] == one_day[1]["totals"]["total_cost"]
    q = json.loads(run("queues", "--from", first, "--to", last, "--format", "json").stdout)
    assert set(q) == {"wait_times", "outcomes", "top_reasons", "lost_gpu_hours"}
    assert all(w["p50_s"] <= w["p90_s"] <= w["p99_s"] for w in q["wait_times"])
    table = run("queues", "--from", first, "--to", last).stdout
    assert "wait_times:" in table
    # the table prints each tenant's longest wait as a person reads it (JSON keeps seconds)
    header = table.splitlines()[1].split()
    assert header[:8] == ["tenant", "attempts", "p50", "p90", "p99", "mean", "max", "unknown_wait"]
    for w in q["wait_times"]:
        line = next(x for x in table.splitlines() if x.startswith(w["tenant"] + " "))
        assert format_duration(w["max_s"]) in line and str(w["max_s"]) not in line
