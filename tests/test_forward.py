"""Read commands while `gpuledger demo` (or `serve`) owns the data directory: they are sent to
it over ``<data_dir>/gpuledger.sock`` and print what they print when run directly.

The socket's two ends are tested with a plain answering function; the whole path with a real
`gpuledger demo` in a subprocess and the CLI run as the user runs it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import TextIO

import pytest
import requests

from gpuledger.forward import (
    FORWARDED,
    SOCKET_NAME,
    ForwardError,
    ForwardServer,
    ask,
    is_forwarded,
    without_local_options,
)
from gpuledger.parser import parse
from gpuledger.serve_commands import READ_COMMANDS
from gpuledger_errors import InputError


def test_only_read_commands_are_forwarded() -> None:
    assert set(FORWARDED) == set(READ_COMMANDS)
    forwarded = [
        ["ledger", "--from", "2026-11-01", "--to", "2026-11-30"],
        ["why", "cost", "--month", "2026-11"],
        ["queues", "--from", "2026-11-01", "--to", "2026-11-30"],
        ["fragmentation"],
        ["sql", "SELECT 1"],
        ["audit", "--action", "sql"],
        ["quarantine", "list"],
        ["db", "status"],
    ]
    kept_here = [
        ["sql", "DROP TABLE t", "--write"],
        ["seal"],
        ["quarantine", "replay"],
        ["db", "migrate"],
        ["import", "alibaba-v2025", "f.csv", "--start", "2026-01-01T00:00:00+00:00"],
        ["serve"],
        ["demo"],
        ["agent"],
    ]
    assert all(is_forwarded(parse(argv)) for argv in forwarded)
    assert not any(is_forwarded(parse(argv)) for argv in kept_here)


def test_the_clients_own_options_are_not_sent() -> None:
    argv = ["--data-dir", "D", "sql", "SELECT 1", "--dsn=chdb:///x", "--config", "c.toml", "-v"]
    assert without_local_options(argv) == ["sql", "SELECT 1", "-v"]


def _echo(argv: list[str], out: TextIO) -> int:
    out.write(" ".join(argv) + "\n")
    return 3


def test_the_socket_is_its_users_alone_and_goes_with_its_server(tmp_path: Path) -> None:
    path = tmp_path / SOCKET_NAME
    path.write_text("left by an owner that was killed")
    server = ForwardServer(tmp_path, _echo)
    try:
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert ask(tmp_path, "1", ["ledger", "é"], 30) == ("ledger é\n", "", 3)
        other = server.reply_to(b'{"version": 1, "argv": ["sql", "SELECT 1"]}\n', os.getuid() + 1)
        assert other.status == 1 and "runs as another user" in other.stderr
    finally:
        server.close()
    assert not path.exists()


def test_errors_come_back_as_one_line_and_the_server_goes_on(tmp_path: Path) -> None:
    def answer(argv: list[str], out: TextIO) -> int:
        out.write("partial\n")
        if argv == ["bad"]:
            raise InputError("--at 'x' is not an ISO time\nuse 2026-11-30T12:00")
        if argv == ["bug"]:
            raise RuntimeError("a bug")
        return 0

    server = ForwardServer(tmp_path, answer)
    try:
        assert ask(tmp_path, "1", ["bad"], 30) == (
            "partial\n",
            "gpuledger: --at 'x' is not an ISO time use 2026-11-30T12:00\n",
            2,
        )
        bug = ask(tmp_path, "1", ["bug"], 30)
        assert bug.status == 1 and "a bug: that process's log has the traceback" in bug.stderr
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(tmp_path / SOCKET_NAME))
            raw.sendall(b'["not", "a", "request"]\n')
            refused = json.loads(raw.makefile("rb").read())
        assert refused["status"] == 1 and "same gpuledger version" in refused["stderr"]
        assert ask(tmp_path, "1", ["fine"], 30) == ("partial\n", "", 0)
    finally:
        server.close()


def test_an_owner_that_does_not_answer_in_time_is_one_line(tmp_path: Path) -> None:
    release = threading.Event()

    def answer(argv: list[str], out: TextIO) -> int:
        release.wait(30)
        return 0

    server = ForwardServer(tmp_path, answer)
    try:
        with pytest.raises(ForwardError, match=r"PID 42\) did not answer within 0.2 s"):
            ask(tmp_path, "42", ["ledger"], 0.2)
    finally:
        release.set()
        server.close()


def test_an_owner_without_the_socket_is_named(tmp_path: Path) -> None:
    with pytest.raises(ForwardError) as caught:
        ask(tmp_path, "42", ["sql", "SELECT 1"], 30)
    message = str(caught.value)
    assert f"data directory {tmp_path} is in use by another process (PID 42)" in message
    assert "answers no commands sent to it" in message and "--data-dir" in message


# -- the whole path: a real demo, the CLI as the user runs it -------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthz(port: int) -> int:
    for _ in range(100):  # the dashboard's URL is printed just before its server binds
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code
        except requests.ConnectionError:
            time.sleep(0.1)
    raise AssertionError("the demo does not serve its page")


def _run(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_read_commands_are_answered_by_the_running_demo(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data, port = tmp_path / "d", _free_port()
    where = ("--data-dir", str(data))
    # two days backfilled: yesterday is whole, and its ledger does not move with the clock
    demo = subprocess.Popen(
        [*gpuledger_cmd, "demo", "--days", "2", "--gpus", "8", "--port", str(port), *where],
        # the chargeback the demo writes as it starts: CSV alone, no Chromium beside the reads
        env={**cli_env, "GPULEDGER_REPORTS__FORMATS": "csv"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert demo.stdout is not None
    day = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).date().isoformat()
    reads = {
        "ledger": ["ledger", "--from", day, "--to", day, "--by", "project", "--energy"],
        "sql": [
            "sql",
            f"SELECT gpu_uuid, count(), round(sum(gpu_util_ratio), 3) FROM gpu_samples "
            f"WHERE toDate(ts) = '{day}' GROUP BY gpu_uuid ORDER BY gpu_uuid",
            "--format",
            "csv",
        ],
        "fragmentation": ["fragmentation", "--at", f"{day}T12:00", "--format", "json"],
    }
    sent: dict[str, str] = {}
    try:
        for line in demo.stdout:  # the socket is up before the dashboard's line
            if line.startswith("gpuledger dashboard: "):
                break
        else:
            raise AssertionError("the demo stopped before it served")
        sock = data / SOCKET_NAME
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600

        for name, argv in reads.items():
            got = _run(gpuledger_cmd, cli_env, *argv, *where)
            assert got.returncode == 0 and got.stderr == "", (name, got.stderr)
            sent[name] = got.stdout
        assert sent["sql"].count("\n") == 1 + 8  # the header and each GPU's line

        create = ("sql", "CREATE TABLE t (a Int8) ENGINE = Memory")
        write = _run(gpuledger_cmd, cli_env, *create, *where)
        assert write.returncode == 2 and write.stdout == ""
        assert write.stderr.count("\n") == 1 and "the SQL console is read-only" in write.stderr
        for argv in (["seal"], [*create, "--write", "--user", "admin"]):  # not sent: they write
            refused = _run(gpuledger_cmd, cli_env, *argv, *where)
            assert refused.returncode == 1 and refused.stderr.count("\n") == 1
            assert f"is in use by another process (PID {demo.pid})" in refused.stderr
            assert "answered there: ledger, why, queues" in refused.stderr
        audit = _run(gpuledger_cmd, cli_env, "audit", "--action", "demo", *where)
        assert audit.returncode == 0 and "demo.start" in audit.stdout

        # still serving, both ways
        assert _healthz(port) == 200
        again = _run(gpuledger_cmd, cli_env, *reads["sql"], *where)
        assert again.returncode == 0 and again.stdout == sent["sql"]
        assert demo.poll() is None
    finally:
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=60) == 0
        demo.stdout.close()
    assert not (data / SOCKET_NAME).exists()

    created = _run(gpuledger_cmd, cli_env, "sql", "EXISTS TABLE t", "--format", "csv", *where)
    assert created.stdout.splitlines()[1:] == ["0"]  # the refused CREATE wrote nothing
    for name, argv in reads.items():  # the owner gone, the same commands run here
        direct = _run(gpuledger_cmd, cli_env, *argv, *where)
        assert direct.returncode == 0, direct.stderr
        assert direct.stdout == sent[name], name
