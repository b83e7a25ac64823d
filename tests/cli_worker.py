"""Runs ``gpuledger`` command lines for the tests (tests/cli_runner.py), one after another in
this one process, each as the ``gpuledger`` entry point runs it.

    python tests/cli_worker.py REQUEST_FD REPLY_FD

Each request is a line of JSON, ``{"argv": [...], "stdout": PATH, "stderr": PATH}``, with
optionally ``"stdin": PATH``, ``"env": {...}`` and ``"cwd": PATH``. The worker points file
descriptors 0, 1 and 2 at those files (so what the engine's own code writes there is caught
too; stdin is empty when none is given), sets the environment and working directory the command
would have had as a process, calls ``gpuledger.cli.main(argv)`` and answers with a line
``{"status": N}``: what ``sys.exit(main())`` would have exited with. An exception that escapes
``main`` is printed as the interpreter prints it (a traceback on stderr, status 1). The
environment, working directory and stdin are put back after each command.

Why a worker: a fresh ``python -m gpuledger.cli`` costs one to two seconds of start-up per
command line, and the embedded engine lets a process open one data directory at a time, while
the pytest process may hold the session's (tests/conftest.py ``engine``). The worker starts
once and keeps the engine's code loaded; a command's warehouse is closed when the command's
objects are collected, after each command line, so the next one opens its own.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import traceback
from typing import Any

#: Loggers the CLI sets a level on; each command line starts from the levels a fresh process has.
_TUNED = ("urllib3", "clickhouse_connect", "collector.dcgm")


def _exit_status(code: Any) -> int:
    """The status ``sys.exit(code)`` ends a process with (a text is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _fresh_logging() -> None:
    """As in a new process: no handler on the root (so ``logging.basicConfig`` in ``main``
    takes effect, with the levels it is given), and no level left by an earlier command."""
    root = logging.getLogger()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    for name in _TUNED:
        logging.getLogger(name).setLevel(logging.NOTSET)


def run(
    argv: list[str],
    stdout: str,
    stderr: str,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> int:
    from gpuledger.cli import main

    sys.stdout.flush()
    sys.stderr.flush()
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    with open(stdin or os.devnull, "rb") as source:
        os.dup2(source.fileno(), 0)
    # a new reader of fd 0: nothing an earlier command left in the old one's buffer
    kept_stdin, sys.stdin = sys.stdin, open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    kept_env, kept_cwd = dict(os.environ), os.getcwd()
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    _fresh_logging()
    try:
        status = _exit_status(main(argv))
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:  # what the interpreter does with an exception that escapes main
        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # the interpreter says so at exit, too
                traceback.print_exc(file=sys.__stderr__)
        sys.stdin.close()
        sys.stdin = kept_stdin
        os.environ.clear()
        os.environ.update(kept_env)
        os.chdir(kept_cwd)
    gc.collect()  # closes the command's warehouse, so that the next command can open one
    return status


def serve(requests: int, replies: int) -> None:
    inbox = os.fdopen(requests, "r", encoding="utf-8")
    outbox = os.fdopen(replies, "w", encoding="utf-8")
    with inbox, outbox:
        for line in inbox:
            ask = json.loads(line)
            status = run(
                ask["argv"],
                ask["stdout"],
                ask["stderr"],
                ask.get("stdin"),
                ask.get("env"),
                ask.get("cwd"),
            )
            outbox.write(json.dumps({"status": status}) + "\n")
            outbox.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
