"""A real `gpuledger serve` reads at most server.max_concurrent_bodies ingest bodies at once:
with that many slow uploads under way, one more request is answered 503 with Retry-After
before its body is read, and counted; once an upload ends, batches are taken again."""

from __future__ import annotations

import datetime as dt
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit

import polars as pl
import pytest
import requests
from conftest import make_token, serving

from collector.records import SAMPLE_SCHEMA, Batch, GpuInventory, GpuSample
from collector.spool import dump_batch

pytestmark = pytest.mark.integration

SLOTS = 2


def _batch() -> bytes:
    ts = dt.datetime.now(dt.UTC).replace(microsecond=0)
    sample = GpuSample(ts, "c1", "n1", "GPU-1", 0, "H100", gpu_util_ratio=0.5)
    gpu = GpuInventory(ts, "c1", "", "n1", "GPU-1", 0, "H100")
    frame = pl.DataFrame([sample], schema=SAMPLE_SCHEMA, orient="row")
    return dump_batch(Batch(samples=frame, gpus=[gpu]))


def _slow_upload(url: str, token: str, n: int) -> socket.socket:
    """A request whose 1 MB body has not come yet: it holds a slot while the server waits."""
    parts = urlsplit(url)
    conn = socket.create_connection((parts.hostname, parts.port), timeout=30)
    conn.sendall(
        (
            "POST /api/v1/ingest HTTP/1.1\r\n"
            f"Host: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\n"
            f"X-Batch-Id: slow-{n}\r\n"
            "Content-Length: 1000000\r\n\r\n"
        ).encode()
        + b"x" * 1000
    )
    return conn


@contextmanager
def _trickling(conns: list[socket.socket]) -> Iterator[None]:
    """A byte of each body every half second, so that the server's read of it never times
    out (its socket timeout would give the slot back while a loaded machine is slow)."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.5):
            for conn in conns:
                with suppress(OSError):  # the server gave up on it: the assertions below tell
                    conn.sendall(b"x")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _answered(conn: socket.socket) -> bytes:
    """What the server said to a slow upload so far (nothing, while it holds its slot)."""
    conn.setblocking(False)
    try:
        return conn.recv(1000)
    except BlockingIOError:
        return b""
    finally:
        conn.setblocking(True)


def _busy_count(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=30).text
    found = re.search(r'^gpuledger_ingest_batches_total\{outcome="busy"\} (\S+)$', text, re.M)
    return float(found[1]) if found else 0.0


def test_one_body_more_than_the_slots_is_told_to_come_back(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = tmp_path / "d"
    token = make_token(gpuledger_cmd, cli_env, data, "c1")
    env = {**cli_env, "GPULEDGER_SERVER__MAX_CONCURRENT_BODIES": str(SLOTS)}
    body, headers = _batch(), {"Authorization": f"Bearer {token}"}

    def post(batch_id: str) -> requests.Response:
        return requests.post(
            f"{url}/api/v1/ingest",
            data=body,
            headers={**headers, "X-Batch-Id": batch_id},
            timeout=30,
        )

    with serving(gpuledger_cmd, env, data) as url:
        assert post("before").status_code == 202
        slow = [_slow_upload(url, token, n) for n in range(SLOTS)]
        try:
            with _trickling(slow):
                deadline = time.monotonic() + 60
                tries = 0
                while (reply := post(f"during-{tries}")).status_code == 202:  # until both hold one
                    tries += 1
                    assert time.monotonic() < deadline, [_answered(conn) for conn in slow]
                    time.sleep(0.05)
                assert reply.status_code == 503
                assert reply.headers["Retry-After"] == "30"
                assert reply.json()["error"] == (
                    f"the server is reading {SLOTS} other batches (server.max_concurrent_bodies): "
                    "send this one again later"
                )
                assert _busy_count(url) == 1
                assert requests.get(f"{url}/healthz", timeout=30).status_code == 200
        finally:
            for conn in slow:
                conn.close()  # the server's read fails, and its slot is given back
        deadline = time.monotonic() + 30
        while (after := post("after")).status_code == 503:
            assert time.monotonic() < deadline, "the slots were not given back"
            time.sleep(0.1)
        assert after.status_code == 202, after.text
