"""The demo: backfill, resume without gap or duplicate, and the served process end to end."""

from __future__ import annotations

import datetime as dt
import queue
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import recent

from gpuledger.demo import ALERTS_INTERVAL_S, DemoRun, demo_settings, report_month
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
    try:
        _healthy(port)
    except AssertionError:
        proc.kill()
        raise
    return proc


def _healthy(port: int) -> None:
    """Wait for the demo's server to answer (its URL is printed just before it binds)."""
    for _ in range(100):
        try:
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            return
        except requests.ConnectionError:
            time.sleep(0.1)
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
    # the chargeback the demo writes as it starts: no PDF, whose Chromium a kill would orphan
    env = {**cli_env, "GPULEDGER_REPORTS__FORMATS": "csv"}
    proc = _start(gpuledger_cmd, env, data, port)
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
    proc = _start(gpuledger_cmd, env, data, port)
    try:
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        assert str(data) not in LOGINS  # the admin is made once, then kept
        assert requests.get(f"http://127.0.0.1:{port}/", auth=made, timeout=10).ok
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop this time
        try:
            code = proc.wait(timeout=60)
        finally:  # a stop that hangs fails the test, and leaves no demo running behind it
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]
    assert code == 0
    assert _count(gpuledger_cmd, cli_env, data) >= before


# -- the jobs the demo runs: alerts, and the chargeback of its last full month ----------------
def test_the_demo_reports_the_last_month_it_simulated_else_this_one() -> None:
    now = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
    assert report_month(now - dt.timedelta(days=7), now) == "2026-11"
    assert report_month(dt.datetime(2026, 11, 30, 23, 59, tzinfo=dt.UTC), now) == "2026-11"
    assert report_month(dt.datetime(2026, 12, 1, tzinfo=dt.UTC), now) == "2026-12"
    assert report_month(now - dt.timedelta(days=40), now) == "2026-11"


def test_the_demo_evaluates_alerts_often_and_links_its_own_dashboard() -> None:
    settings = load_settings(env={})
    demo = demo_settings(settings, "http://127.0.0.1:8050")
    assert demo.alerts.interval_s == ALERTS_INTERVAL_S < settings.alerts.interval_s
    assert demo.alerts.dashboard_url == "http://127.0.0.1:8050"
    assert demo.alerts.log and not demo.alerts.webhook_url  # the log: no network
    off = load_settings(
        env={}, overrides={"alerts": {"interval_s": 0, "dashboard_url": "https://x.example"}}
    )
    assert demo_settings(off, "http://127.0.0.1:8050").alerts.interval_s == 0  # kept off
    assert demo_settings(off, "http://127.0.0.1:8050").alerts.dashboard_url == "https://x.example"


class _Lines:
    """The lines a process writes to a pipe, read on a thread of their own as they come."""

    def __init__(self, pipe: Any) -> None:
        self.seen: list[str] = []
        self._pipe = pipe
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._reader.start()

    def close(self) -> None:
        """Once the process has ended: the rest read, the pipe closed."""
        self._reader.join(timeout=10)
        self._pipe.close()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout_s: float) -> str:
        """The first line (seen so far or to come) that holds ``text``."""
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.seen):
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line with {text!r} in {timeout_s} s: {self.seen}"
                ) from None
            if line is None:
                raise AssertionError(f"the process ended before a line with {text!r}: {self.seen}")
            self.seen.append(line)
        return next(line for line in self.seen if text in line)


def test_the_demo_fires_alerts_and_writes_the_chargeback(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data, port = tmp_path / "d", _free_port()
    env = {
        **cli_env,
        "GPULEDGER_REPORTS__FORMATS": "csv,focus",  # no PDF: no Chromium to wait for
        # whether 8 GPUs hold an hour-long idle job at this hour depends on the hour: a GPU
        # held under 99% for 10 min is there at any hour, so the rule fires whenever it runs
        "GPULEDGER_ALERTS__IDLE_UTIL_PERCENT": "99",
        "GPULEDGER_ALERTS__IDLE_FOR_S": "600",
    }
    proc = subprocess.Popen(
        [*gpuledger_cmd, "demo", "--days", "0.5", "--gpus", "8", "--insecure",
         "--port", str(port), "--data-dir", str(data)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = _Lines(proc.stdout), _Lines(proc.stderr)
    try:
        on = out.wait_for("alerts: ", 180)
        assert "alerts: on" in on and "every 30 s" in on and "the log" in on and "/alerts" in on
        where = out.wait_for("reports: the chargeback of ", 10)
        month = where.split()[4]
        assert str((data / "reports").resolve()) in where
        out.wait_for("gpuledger dashboard: ", 60)
        _healthy(port)
        written = out.wait_for(f"chargeback of {month} is written", 180)
        assert f"is written: chargeback-{month}.csv, chargeback-{month}.focus.csv" in written
        err.wait_for("WARNING gpuledger.alerts: ", 300)  # told to the log as they fire
        listed = subprocess.run(
            [*gpuledger_cmd, "alerts", "list", "--format", "csv", "--data-dir", str(data)],
            env=env, capture_output=True, text=True, timeout=120, check=True,
        ).stdout.splitlines()  # fmt: skip
        events = [row.split(",")[2] for row in listed[1:]]
        assert "fired" in events, listed[:5]
        assert (data / "reports" / f"chargeback-{month}.csv").stat().st_size > 0
        assert (data / "reports" / f"chargeback-{month}.manifest.json").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        out.close()
        err.close()
