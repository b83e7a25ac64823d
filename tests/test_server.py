"""`gpuledger serve` as a real process, SIGKILLed again and again while agents send batches —
each time while a group's manifest is on disk, between its fsync and the end of its write —
then restarted: every sample is written once, rollups included."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import polars as pl
import pytest
import requests
from cli_runner import Cli
from conftest import SqlRows, make_token

from collector.records import SAMPLE_SCHEMA, Batch, GpuInventory, GpuSample
from collector.spool import dump_batch

pytestmark = pytest.mark.integration

GPUS = 8


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def poll(agent: int, i: int, start: dt.datetime) -> bytes:
    """Agent ``agent``'s ``i``-th poll: 8 GPUs, one sample each; the first poll also carries
    their inventory, as the real agent's does."""
    ts = start + dt.timedelta(seconds=i)
    rows = [
        GpuSample(ts, "c1", f"n{agent}", f"GPU-{agent}-{g}", g, "H100", gpu_util_ratio=0.5)
        for g in range(GPUS)
    ]
    frame = pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")
    gpus = [GpuInventory(ts, "c1", "", s.node, s.gpu_uuid, s.gpu_index, "H100") for s in rows]
    return dump_batch(Batch(samples=frame, gpus=gpus if i == 0 else ()))


class Agent(threading.Thread):
    """Sends its polls one after another; each is re-sent (same id) until a 2xx, as the real
    agent does from its spool."""

    def __init__(self, n: int, url: str, start: dt.datetime, stop: threading.Event, token: str):
        super().__init__(daemon=True)
        self.n, self.url, self.begin, self.stop = n, url, start, stop
        self.headers = {"Authorization": f"Bearer {token}"}
        self.delivered = 0
        self.duplicates = 0

    def run(self) -> None:
        with requests.Session() as session:
            i = 0
            while not self.stop.is_set():
                body, batch_id = poll(self.n, i, self.begin), f"n{self.n}:nvml:{i}"
                while True:
                    try:
                        reply = session.post(
                            self.url,
                            data=body,
                            headers={**self.headers, "X-Batch-Id": batch_id},
                            timeout=10,
                        )
                        if reply.status_code < 300:
                            self.duplicates += reply.status_code == 200
                            break
                    except requests.RequestException:
                        pass
                    time.sleep(0.05)
                self.delivered += 1
                i += 1
                time.sleep(0.01)


def test_a_server_killed_mid_group_writes_every_sample_once(
    tmp_path: Path,
    gpuledger_cmd: list[str],
    run_cli: Cli,
    cli_env: dict[str, str],
    sql_rows: SqlRows,
) -> None:
    data, port = tmp_path / "data", _port()
    groups = data / "ingest-spool" / "groups"
    env = {**cli_env, "GPULEDGER_SERVER__COALESCE_MAX_MS": "50"}
    server_cmd = [*gpuledger_cmd, "serve", "--port", str(port), "--data-dir", str(data)]
    log = open(tmp_path / "server.err", "wb")  # noqa: SIM115 - closed at the end
    base = f"http://127.0.0.1:{port}"

    def start_server() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(server_cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                    return proc
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, (tmp_path / "server.err").read_text()[-2000:]
            time.sleep(0.1)
        raise AssertionError("the server did not start")

    server = start_server()
    stop = threading.Event()
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=2)
    token = make_token(run_cli, cli_env, data, "c1")
    agents = [Agent(n, f"{base}/api/v1/ingest", start, stop, token) for n in range(4)]
    for agent in agents:
        agent.start()
    hits = 0
    try:
        for _cycle in range(3):
            floor = sum(a.delivered for a in agents) + 20
            deadline = time.monotonic() + 60
            while sum(a.delivered for a in agents) < floor and time.monotonic() < deadline:
                time.sleep(0.05)
            while time.monotonic() < deadline and not any(groups.glob("*.json")):
                time.sleep(0.001)
            os.kill(server.pid, signal.SIGKILL)  # a manifest is on disk: mid-group
            server.wait()
            hits += any(groups.glob("*.json"))  # still there: the group was not forgotten
            time.sleep(0.3)  # agents meet a dead server, and keep their batches
            server = start_server()
        time.sleep(1)
    finally:
        stop.set()
        for agent in agents:
            agent.join(timeout=60)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=90)
        log.close()
    assert server.returncode == 0, (tmp_path / "server.err").read_text()[-2000:]
    assert hits >= 1, "no kill landed while a manifest was on disk"
    assert "writing it again under token" in (tmp_path / "server.err").read_text()
    assert not list(groups.glob("*.json")) and not list(groups.parent.glob("*.batch"))
    delivered = sum(a.delivered for a in agents)
    query = (
        "SELECT count(), uniqExact(gpu_uuid, ts), "
        "(SELECT sum(samples) FROM gpuledger.gpu_samples_1h) FROM gpuledger.gpu_samples"
    )
    count, unique, hourly = map(int, sql_rows(query, data)[0])
    assert count == unique == hourly == GPUS * delivered  # every sample once, none lost
    assert delivered > 60
