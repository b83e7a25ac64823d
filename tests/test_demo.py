"""The demo: backfill, resume without gap or duplicate, and the served process end to end."""

from __future__ import annotations

import datetime as dt
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests
from conftest import recent

from gpuledger.demo import DemoRun
from gpuledger.settings import load_settings
from warehouse.client import Warehouse

NOW = recent(dt.datetime(2026, 11, 20, 12, 0, 5, tzinfo=dt.UTC))


def _settings(wh: Warehouse, gpus: int = 16, seed: int = 3):
    return load_settings(
        env={},
        overrides={
            "simulator": {"days": 0.25, "gpus": gpus, "seed": seed, "cluster": "demo-t"},
            "warehouse": {"database": wh.database},
        },
    )


def test_backfill_then_restart_continues_without_gap_or_duplicate(wh: Warehouse) -> None:
    first = DemoRun.start(wh, _settings(wh), now=NOW)
    assert first.resumed_from is None
    assert first.result.written["gpu_samples"] > 16 * 6 * 360 * 0.8
    assert first.result.quarantined_total == 0  # everything the simulator makes is valid
    assert first.result.written["job_events"] > 0
    assert wh.rows(f"SELECT count() FROM {wh.database}.allocations FINAL")[0][0] > 0
    later = NOW + dt.timedelta(minutes=20)
    second = DemoRun.start(wh, _settings(wh), now=later)  # a new process on the same data
    assert second.resumed_from == NOW.replace(second=0)
    rows = wh.rows(
        f"SELECT count(), uniqExact(gpu_uuid, ts), uniqExact(ts), "
        f"toUnixTimestamp(max(ts)) - toUnixTimestamp(min(ts)) "
        f"FROM {wh.database}.gpu_samples"
    )
    count, unique, instants, span = rows[0]
    assert count == unique  # no sample written twice
    assert instants == span // 10 + 1  # one instant every 10 s, no gap at the restart
    assert wh.rows(f"SELECT sum(samples) FROM {wh.database}.gpu_samples_1m") == [(count,)]
    events = wh.rows(
        f"SELECT count(), uniqExact(job_id, attempt, event, ts) FROM {wh.database}.job_events"
    )
    assert events[0][0] == events[0][1]


def test_restart_with_other_parameters_is_refused(wh: Warehouse) -> None:
    from warehouse.client import WarehouseError

    DemoRun.start(wh, _settings(wh), now=NOW)
    with pytest.raises(WarehouseError, match="same --gpus/--seed"):
        DemoRun.start(wh, _settings(wh, gpus=8), now=NOW)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd: list[str], env: dict[str, str], data: Path, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            *cmd,
            "demo",
            "--days",
            "0.1",
            "--gpus",
            "8",
            "--port",
            str(port),
            "--data-dir",
            str(data),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("dashboard login: "):  # the first run makes an admin
            LOGINS[str(data)] = ("admin", line.split()[4])
        if line.startswith("gpuledger dashboard: "):
            assert line.split()[2] == f"http://127.0.0.1:{port}"
            break
    for _ in range(100):  # the URL is printed just before the server binds
        try:
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            return proc
        except requests.ConnectionError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the demo did not serve its page")


#: The admin each demo data directory's first run made, and its password.
LOGINS: dict[str, tuple[str, str]] = {}


def _count(cmd: list[str], env: dict[str, str], data: Path) -> int:
    out = subprocess.run(
        [
            *cmd,
            "sql",
            "SELECT count() FROM gpuledger.gpu_samples",
            "--format",
            "csv",
            "--data-dir",
            str(data),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return int(out.splitlines()[1])


def test_served_demo_survives_a_kill(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data, port = tmp_path / "d", _free_port()
    proc = _start(gpuledger_cmd, cli_env, data, port)
    try:
        assert requests.get(f"http://127.0.0.1:{port}/_dash-layout", timeout=10).status_code == 401
        page = requests.get(f"http://127.0.0.1:{port}/", auth=LOGINS[str(data)], timeout=10)
        assert page.status_code == 200 and "gpuledger" in page.text
        health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
        assert health["status"] == "ok" and health["spool_batches"] == 0
    finally:
        proc.kill()  # no chance to clean up
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    before = _count(gpuledger_cmd, cli_env, data)
    assert before > 8 * 0.1 * 8640 * 0.8
    made = LOGINS.pop(str(data))
    proc = _start(gpuledger_cmd, cli_env, data, port)
    try:
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        assert str(data) not in LOGINS  # the admin is made once, then kept
        assert requests.get(f"http://127.0.0.1:{port}/", auth=made, timeout=10).ok
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop this time
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()  # type: ignore[union-attr]
    assert _count(gpuledger_cmd, cli_env, data) >= before
