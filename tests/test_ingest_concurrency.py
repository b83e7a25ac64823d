"""A real `gpuledger serve` reads at most server.max_concurrent_bodies ingest bodies at once:
with that many slow uploads under way, one more request is answered 503 with Retry-After
before its body is read, and counted; once an upload ends, batches are taken again. A request
refused on its headers is answered at once, however slowly its body comes."""

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
from cli_runner import Cli
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


def _reply(conn: socket.socket) -> bytes:
    """All the server says to a request before it closes the connection (within 30 s)."""
    said = b""
    with conn, suppress(TimeoutError):
        conn.settimeout(30)
        while chunk := conn.recv(65536):
            said += chunk
    return said


def _metric(url: str, pattern: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=30).text
    found = re.search(rf"^{pattern} (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


def _busy_count(url: str) -> float:
    return _metric(url, r'gpuledger_ingest_batches_total\{outcome="busy"\}')


def test_one_body_more_than_the_slots_is_told_to_come_back(
    tmp_path: Path, gpuledger_cmd: list[str], run_cli: Cli, cli_env: dict[str, str]
) -> None:
    data = tmp_path / "d"
    token = make_token(run_cli, cli_env, data, "c1")
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
                deadline = time.monotonic() + 60  # nothing else is sent until both hold one
                while _metric(url, "gpuledger_ingest_bodies_reading") < SLOTS:
                    assert time.monotonic() < deadline, [_answered(conn) for conn in slow]
                    time.sleep(0.1)
                reply = post("during")
                assert reply.status_code == 503
                assert reply.headers["Retry-After"] == "30"
                assert reply.json()["error"] == (
                    f"the server is reading {SLOTS} other batches (server.max_concurrent_bodies): "
                    "send this one again later"
                )
                # a client still sending a large body reads the answer: it is not cut off
                large = requests.post(
                    f"{url}/api/v1/ingest",
                    data=bytes(16 << 20),
                    headers={**headers, "X-Batch-Id": "large"},
                    timeout=30,
                )
                assert large.status_code == 503 and large.headers["Retry-After"] == "30"
                # refused on its headers, a slow body hears so at once, not once it has all come
                late = _reply(_slow_upload(url, token, SLOTS))
                assert late.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 30\r\n" in late, late
                assert _busy_count(url) == 3
                stranger = _reply(_slow_upload(url, "gl_not_a_token", SLOTS + 1))
                assert stranger.startswith(b"HTTP/1.1 401 "), stranger
                assert requests.get(f"{url}/healthz", timeout=30).status_code == 200
                assert [_answered(conn) for conn in slow] == [b""] * SLOTS  # still reading
        finally:
            for conn in slow:
                conn.close()  # the server's read fails, and its slot is given back
        deadline = time.monotonic() + 30
        while (after := post("after")).status_code == 503:
            assert time.monotonic() < deadline, "the slots were not given back"
            time.sleep(0.1)
        assert after.status_code == 202, after.text
