"""`gpuledger alerts` and the alerting in `gpuledger serve`, run as a user runs them, over the
squatting cluster of tests/test_alerts.py (written by tests/alerts_writer.py), with a real
HTTP receiver for the webhook."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from alerts_fixture import at
from alerts_receivers import HttpReceiver
from conftest import ROOT, serving

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    http = HttpReceiver()
    yield http
    http.close()


def _write(data_dir: Path, mode: str, env: dict[str, str]) -> None:
    env = {**env, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    got = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "alerts_writer.py"), str(data_dir), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 0, got.stderr[-3000:]


def test_alerts_check_and_list(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str], receiver: HttpReceiver
) -> None:
    data = tmp_path / "d"
    _write(data, "past", cli_env)
    config = tmp_path / "gpuledger.toml"
    config.write_text(
        f'[alerts]\nwebhook_url = "{receiver.url}/hook"\nidle_for_s = 3600\nlog = false\n'
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*gpuledger_cmd, *args, "--data-dir", str(data), "--config", str(config)],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    first = run("alerts", "check", "--format", "json", "--at", at(3).isoformat())
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert [(n["event"], n["rule"], n["jobs"], n["cost"]) for n in doc["notices"]] == [
        ("fired", "idle", ["j-squat"], "6.00")
    ]
    assert doc["notices"][0]["delivery"] == ["webhook:delivered"]
    assert doc["open_alerts"] == 1 and doc["failed_rules"] == {}
    assert [b["jobs"] for b in receiver.bodies("/hook")] == [["j-squat"]]

    # a new process a minute later: the open alert comes back from the history, so it is quiet
    again = run("alerts", "check", "--at", at(3, 1).isoformat())
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("alerts at ") and "0 notice(s), 1 open alert(s)" in again.stdout
    assert len(receiver.bodies("/hook")) == 1

    listed = run("alerts", "list", "--state", "open", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["event"], row["rule"], row["job_id"], row["tenant"]) == (
        "fired",
        "idle",
        "j-squat",
        "ml/vision",
    )
    assert row["notified"] == ["webhook"] and row["cost"] == "6.00"

    # alerts are decided in time order: an evaluation before the latest notice is refused
    back = run("alerts", "check", "--at", at(2).isoformat())
    assert back.returncode == 2 and "alerts are decided in time order" in back.stderr

    config.write_text('[alerts]\nidle_overrides = "ml/vision=2%/2 hours"\n')
    bad = run("alerts", "check")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "gpuledger: alerts.idle_overrides entry 'ml/vision=2%/2 hours': duration '2 hours' is "
        "not a duration: give seconds, or a number with s, m, h or d (90, 30m, 2h)"
    )


def test_serve_evaluates_on_its_schedule_and_tells_once(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str], receiver: HttpReceiver
) -> None:
    data = tmp_path / "d"
    _write(data, "now", cli_env)
    env = {
        **cli_env,
        "GPULEDGER_ALERTS__INTERVAL_S": "1",
        "GPULEDGER_ALERTS__WEBHOOK_URL": f"{receiver.url}/hook",
        "GPULEDGER_REPORTS__SCHEDULE": "",
    }
    with serving(gpuledger_cmd, env, data):
        deadline = time.monotonic() + 120
        while not receiver.bodies("/hook") and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(4)  # a few more evaluations, one a second: within the cooldown, all quiet
        (told,) = receiver.bodies("/hook")
        assert (told["event"], told["rule"], told["jobs"]) == ("fired", "idle", ["j-squat"])
        # `alerts list` is answered by the serving process, which owns the data directory
        listed = subprocess.run(
            [*gpuledger_cmd, "alerts", "list", "--format", "json", "--data-dir", str(data)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert listed.returncode == 0, listed.stderr
        assert [r["alert_id"] for r in json.loads(listed.stdout)] == [told["alert_id"]]
