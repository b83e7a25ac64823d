"""``gpuledger`` command lines run in one long-lived worker process (tests/cli_worker.py).

A fresh ``python -m gpuledger.cli`` spends one to two seconds of CPU starting (the interpreter,
the engine's and the frames' libraries) before its command does anything; the suite runs
hundreds of commands on two cores. The worker starts once and calls ``gpuledger.cli.main`` as
the entry point does, with the command's own environment, working directory, stdin, stdout and
stderr, so a test sees what a user's process would print and exit with. What only a process of
its own shows (a lock held by another process, a signal, a closed pipe, ``serve``) is still
tested with a subprocess.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: int | None  # None: the command line did not finish, or the worker died
    stdout: str
    stderr: str


class Worker:
    """tests/cli_worker.py, started on first use and again after a command kills it or hangs.
    ``env`` is the worker's own environment (a command may bring another); ``cwd`` its
    working directory; a command's stdin, stdout and stderr are files in ``files``."""

    def __init__(self, files: Path, env: dict[str, str], cwd: Path | None = None) -> None:
        self._files, self.env, self.cwd = files, env, cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> None:
        ask_r, self._ask = os.pipe()
        self._reply, reply_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "cli_worker.py"), str(ask_r), str(reply_w)],
            pass_fds=(ask_r, reply_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.cwd,
            env={**self.env, "PYTHONPATH": str(ROOT)},
            start_new_session=True,
        )
        os.close(ask_r)
        os.close(reply_w)
        self._replies = os.fdopen(self._reply, "r", encoding="utf-8")

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self._ask)
        self._replies.close()
        self.proc = None

    def __call__(
        self,
        argv: list[str],
        timeout_s: float = 60,  # longer: it has hung
        *,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> Outcome:
        if self.proc is None:
            self._start()
        out, err, given = (self._files / f"command.{n}" for n in ("stdout", "stderr", "stdin"))
        ask: dict[str, object] = {"argv": argv, "stdout": str(out), "stderr": str(err)}
        if stdin is not None:
            given.write_text(stdin, encoding="utf-8")
            ask["stdin"] = str(given)
        if env is not None:
            ask["env"] = env
        if cwd is not None:
            ask["cwd"] = cwd
        os.write(self._ask, (json.dumps(ask) + "\n").encode())
        ready, _, _ = select.select([self._replies], [], [], timeout_s)
        line = self._replies.readline() if ready else ""
        status = json.loads(line)["status"] if line else None
        if status is None:
            self.stop()  # hung or died: the next command line gets a fresh worker
        text = [p.read_bytes().decode("utf-8", "replace") if p.exists() else "" for p in (out, err)]
        if status is None:
            text[1] += f"\n[the command line did not finish within {timeout_s:g} s, or crashed]"
        return Outcome(status, *text)


class Cli:
    """``gpuledger ARGS`` as :func:`subprocess.run` would give it (text, captured), run by a
    :class:`Worker`: the environment is ``env`` (each call's own, as a child's would be), the
    working directory ``cwd`` or the caller's, stdin the text ``stdin`` or empty."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def __call__(
        self,
        *args: str,
        env: dict[str, str],
        stdin: str | None = None,
        timeout: float = 240,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(a) for a in args]
        got = self.worker(argv, timeout, stdin=stdin, env=env, cwd=str(cwd or os.getcwd()))
        assert got.status is not None, f"gpuledger {argv}: {got.stderr[-2000:]}"
        return subprocess.CompletedProcess(
            ["gpuledger", *argv], got.status, stdout=got.stdout, stderr=got.stderr
        )
