"""The agent and the server as real processes: NVML through the stand-in library, batches over
HTTP, the server killed mid-stream and restarted — every sample arrives, none twice."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests
from cli_runner import Cli
from conftest import SqlRows, make_token

from tests import nvml_stub

pytestmark = pytest.mark.integration


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, ok: callable, timeout: float = 120) -> requests.Response:  # type: ignore[valid-type]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reply = requests.get(url, timeout=5)
            if ok(reply):
                return reply
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not become ready")


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


def test_agent_survives_a_server_kill(
    tmp_path: Path,
    gpuledger_cmd: list[str],
    run_cli: Cli,
    cli_env: dict[str, str],
    sql_rows: SqlRows,
) -> None:
    lib = nvml_stub.build(tmp_path)
    if lib is None:
        pytest.skip("no C compiler to build the NVML stand-in")
    config = nvml_stub.default_config().write(tmp_path / "stub.cfg")
    data, port, status_port = tmp_path / "data", _port(), _port()
    server_cmd = [*gpuledger_cmd, "serve", "--port", str(port), "--data-dir", str(data)]
    env = {
        **cli_env,
        "NVML_STUB_CONFIG": str(config),
        "GPULEDGER_AGENT__SERVER_URL": f"http://127.0.0.1:{port}",
        "GPULEDGER_AGENT__NVML_LIBRARY": str(lib),
        "GPULEDGER_AGENT__INTERVAL_S": "0.5",
        "GPULEDGER_AGENT__MAX_BACKOFF_S": "1",  # back soon after the restart
        "GPULEDGER_AGENT__SPOOL_DIR": str(tmp_path / "spool"),
        "GPULEDGER_AGENT__STATUS_HOST": "127.0.0.1",
        "GPULEDGER_AGENT__STATUS_PORT": str(status_port),
        "GPULEDGER_AGENT__NODE": "node-1",
        "GPULEDGER_AGENT__CLUSTER": "c1",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    server_log = open(logs / "server.err", "wb")  # noqa: SIM115 - closed at the end
    agent_log = open(logs / "agent.err", "wb")  # noqa: SIM115 - closed at the end

    def start_server() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            server_cmd, env=cli_env, stdout=subprocess.DEVNULL, stderr=server_log
        )
        _wait(f"http://127.0.0.1:{port}/healthz", lambda r: r.status_code == 200)
        return proc

    env["GPULEDGER_AGENT__TOKEN"] = make_token(run_cli, cli_env, data, "c1", "--node", "node-1")
    server = start_server()
    agent = subprocess.Popen(
        [*gpuledger_cmd, "agent"], env=env, stdout=subprocess.PIPE, stderr=agent_log, text=True
    )
    metrics = f"http://127.0.0.1:{status_port}/metrics"
    try:
        _wait(metrics, lambda r: _metric(r.text, "gpuledger_agent_batches_sent_total") >= 2)
        os.kill(server.pid, signal.SIGKILL)  # no goodbye: mid-batch if it was writing
        server.wait()
        _wait(metrics, lambda r: _metric(r.text, "gpuledger_agent_spool_batches") >= 4)
        health = requests.get(f"http://127.0.0.1:{status_port}/healthz", timeout=5)
        assert health.status_code == 503 and health.json()["spool_batches"] >= 4
        server = start_server()
        _wait(metrics, lambda r: _metric(r.text, "gpuledger_agent_spool_batches") == 0)
        # and two polls delivered live after the backlog, whatever the machine's speed
        drained = _metric(
            requests.get(metrics, timeout=5).text, "gpuledger_agent_batches_sent_total"
        )
        _wait(
            metrics, lambda r: _metric(r.text, "gpuledger_agent_batches_sent_total") >= drained + 2
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=60)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        server_log.close()
        agent_log.close()
    assert agent.returncode == 0, (logs / "agent.err").read_text()[-2000:]
    summary = out.strip().splitlines()[-1]
    collected = int(summary.split("collected ")[1].split()[0])
    assert summary.endswith("0 still spooled")
    query = (
        "SELECT count(), uniqExact(gpu_uuid, mig_instance, ts), uniqExact(ts), "
        "(SELECT count() FROM gpuledger.gpu_processes), "
        "(SELECT uniqExact(gpu_uuid, pid, ts) FROM gpuledger.gpu_processes), "
        "(SELECT count() FROM gpuledger.gpu_health), "
        "(SELECT uniqExact(gpu_uuid, ts) FROM gpuledger.gpu_health) "
        "FROM gpuledger.gpu_samples"
    )
    count, unique, instants, procs, unique_procs, health, unique_health = map(
        int, sql_rows(query, data)[0]
    )
    assert count == unique == collected  # every sample once, none lost, none twice
    # polls counted, not timed: 2 before the kill, 4 spooled while it was down, 2 after the
    # backlog (one poll, one instant; a test that waited on the clock failed on a fast machine)
    assert instants >= 8
    # processes and health travel in the same batches: 6 processes and 3 GPUs a poll
    assert procs == unique_procs == 6 * instants
    assert health == unique_health == 3 * instants


def test_serve_runs_collectors_in_process(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str], sql_rows: SqlRows
) -> None:
    """Embedded mode: one process owns the data directory, so `serve` hosts the collectors."""
    lib = nvml_stub.build(tmp_path)
    if lib is None:
        pytest.skip("no C compiler to build the NVML stand-in")
    config = nvml_stub.default_config().write(tmp_path / "stub.cfg")
    data, port = tmp_path / "data", _port()
    env = {
        **cli_env,
        "NVML_STUB_CONFIG": str(config),
        "GPULEDGER_SERVER__COLLECTORS": "nvml",
        "GPULEDGER_AGENT__NVML_LIBRARY": str(lib),
        "GPULEDGER_AGENT__INTERVAL_S": "0.5",
        "GPULEDGER_AGENT__SPOOL_DIR": str(tmp_path / "spool"),
        "GPULEDGER_AGENT__CLUSTER": "c1",
        "GPULEDGER_AGENT__NODE": "node-1",
    }
    server = subprocess.Popen(
        [*gpuledger_cmd, "serve", "--port", str(port), "--data-dir", str(data)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        _wait(f"http://127.0.0.1:{port}/metrics", lambda r: "gpuledger_warehouse_up" in r.text)
        time.sleep(3)  # a few collection steps
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=60)
    assert server.returncode == 0
    assert "collecting nvml in-process" in out
    ((count, gpus, node),) = sql_rows(
        "SELECT count(), uniqExact(gpu_uuid, mig_instance), max(node) FROM gpuledger.gpu_samples",
        data,
    )
    assert int(count) >= 2 * int(gpus) and int(gpus) >= 3 and node == "node-1"
    # inventory, and the processes and health counters the stand-in reports (6 and 3 a poll)
    ((gpus, pids, healthy, quarantined),) = (
        map(int, row)
        for row in sql_rows(
            "SELECT (SELECT count() FROM gpuledger.gpus FINAL), "
            "(SELECT uniqExact(pid) FROM gpuledger.gpu_processes WHERE node = 'node-1'), "
            "(SELECT uniqExact(gpu_uuid) FROM gpuledger.gpu_health WHERE cluster = 'c1'), "
            "(SELECT count() FROM gpuledger.quarantine "
            "WHERE kind IN ('gpu_process', 'gpu_health'))",
            data,
        )
    )
    assert gpus >= 3 and pids == 6 and healthy == 3 and quarantined == 0
