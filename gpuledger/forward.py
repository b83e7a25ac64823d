"""Read commands while `gpuledger serve` or `gpuledger demo` owns the data directory.

The embedded engine lets one process own a data directory, so while `serve` (or `demo`, which
serves too) runs, another `gpuledger` cannot open it. The owner therefore answers the read
commands of others: it listens on a Unix socket in the data directory, ``gpuledger.sock``,
with mode 0600 (only its user can connect; a peer of another uid is refused as well, by
``SO_PEERCRED``). A read command typed meanwhile sends its argv there; the owner runs the same
command function in-process, against its own open warehouse and with its own settings (the
client's ``--config``, ``--data-dir`` and ``--dsn`` are not sent), and sends back what the
command printed and its exit status, which the client prints and exits with. Only the read
commands in :data:`FORWARDED` are answered (``sql`` without ``--write``, so on the engine's
read-only client, :meth:`warehouse.client.Warehouse.read_only`): nothing sent this way writes.

It also takes the audit entries of the commands that change the files beside the warehouse
while it runs (``token create`` and ``revoke``, ``user add`` and ``remove``: :data:`AUDITED`),
and writes them into its audit log (:mod:`gpuledger.audit_trail`); no other entry.

The protocol: one request line ``{"version": 1, "argv": [...]}`` or ``{"version": 1, "audit":
{entry}}`` (at most 1 MiB), one reply ``{"stdout": "...", "stderr": "...", "status": N}``, then
the owner closes the connection.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from gpuledger.output import exit_status, one_line
from gpuledger_errors import GpuledgerError

if TYPE_CHECKING:
    from gpuledger.settings import Settings
    from warehouse.audit import AuditEntry

log = logging.getLogger(__name__)

#: The socket's name in the data directory.
SOCKET_NAME = "gpuledger.sock"
#: The commands the owner answers, each with the actions it answers (None: all of them).
FORWARDED: dict[str, tuple[str, ...] | None] = {
    "ledger": None,
    "why": None,
    "queues": None,
    "fragmentation": None,
    "sql": None,  # but not `sql --write`
    "audit": None,
    "quarantine": ("list",),
    "db": ("status",),
    "alerts": ("list",),
}
#: The audit entries the owner writes for other processes: the changes to the files beside
#: the warehouse, which work while it runs.
AUDITED = frozenset({"token.create", "token.revoke", "user.add", "user.remove"})
#: The same, as the messages name them.
FORWARDED_TEXT = (
    "ledger, why, queues, fragmentation, sql (without --write), audit, quarantine list, db "
    "status, alerts list"
)
#: Said after "data directory ... is in use by another process" to a command not forwarded.
IN_USE_NOTE = (
    "While `gpuledger serve` or `gpuledger demo` owns it, these commands are sent to it and "
    f"answered there: {FORWARDED_TEXT}; any other needs it stopped"
)
_VERSION = 1
_MAX_REQUEST_BYTES = 1 << 20
_MAX_ANSWER_CHARS = 256 << 20  # of stdout: past this, narrow the query or stop the owner
_CONNECT_TIMEOUT_S = 10.0
_REQUEST_TIMEOUT_S = 30.0  # for the owner to read a request and write its reply, per step
_SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (Linux: 108 with the NUL)
_LOCAL_OPTIONS = ("--config", "--data-dir", "--dsn")  # the client's own, not sent


class ForwardError(GpuledgerError):
    """A read command could not be sent to the process that owns the data directory, or its
    answer did not come back."""


class Reply(NamedTuple):
    """What a command printed and its exit status."""

    stdout: str
    stderr: str
    status: int


def is_forwarded(args: argparse.Namespace) -> bool:
    """Whether the owner of the data directory answers this command (it only reads)."""
    if args.command not in FORWARDED or getattr(args, "write", False):
        return False
    actions = FORWARDED[args.command]
    return actions is None or getattr(args, "action", None) in actions


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


# -- the client: a read command typed while another process owns the data directory ---------
def ask_owner(settings: Settings, args: argparse.Namespace, argv: Sequence[str]) -> Reply | None:
    """Send a read command to the process that owns the embedded data directory and return
    its answer; None when the command is not one it answers, or no other process owns the
    directory (then run it here). Raises :class:`ForwardError` when the owner does not
    answer (it is not `serve` or `demo`, is stopping, or takes too long)."""
    from warehouse.client import embedded_path, lock_holder

    data_dir = embedded_path(settings.warehouse.resolved_dsn)
    if data_dir is None or not is_forwarded(args):
        return None
    pid = lock_holder(data_dir)
    if pid is None:
        return None
    return ask(data_dir, pid, without_local_options(argv), settings.server.forward_timeout_s)


def without_local_options(argv: Sequence[str]) -> list[str]:
    """``argv`` less ``--config``, ``--data-dir`` and ``--dsn`` and their values: the owner
    answers from its own settings and data directory (and ignores them anyway)."""
    kept: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in _LOCAL_OPTIONS:
            skip = True
        elif not token.startswith(tuple(f"{o}=" for o in _LOCAL_OPTIONS)):
            kept.append(token)
    return kept


def ask(data_dir: Path, pid: str, argv: Sequence[str], timeout_s: float) -> Reply:
    """Send ``argv`` to the owner of ``data_dir`` (PID ``pid``) and wait up to ``timeout_s``
    for its answer."""
    return _exchange(data_dir, pid, {"argv": list(argv)}, timeout_s)


def tell(data_dir: Path, pid: str, entry: AuditEntry, timeout_s: float) -> None:
    """Have the owner of ``data_dir`` (PID ``pid``) write ``entry`` into its audit log;
    :class:`ForwardError` when it did not say it did."""
    from gpuledger.audit_pending import as_json

    reply = _exchange(data_dir, pid, {"audit": as_json(entry)}, timeout_s)
    if reply.status != 0:
        said = reply.stderr.strip().removeprefix("gpuledger: ") or f"status {reply.status}"
        raise ForwardError(f"the process that owns {data_dir} (PID {pid}) did not take it: {said}")


def _exchange(data_dir: Path, pid: str, request: dict[str, Any], timeout_s: float) -> Reply:
    path = socket_path(data_dir)
    owner = f"the gpuledger process that owns {data_dir} (PID {pid})"
    if len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        raise ForwardError(
            f"data directory {data_dir} is in use by another process (PID {pid}), and its path "
            f"is too long for the socket commands are sent to it on ({_SOCKET_PATH_MAX} bytes "
            "at most): stop that process, or use a data directory with a shorter path"
        )
    line = json.dumps({"version": _VERSION, **request}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(_CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise ForwardError(
                f"data directory {data_dir} is in use by another process (PID {pid}), which "
                "answers no commands sent to it (`gpuledger serve` and `gpuledger demo` do, "
                f"on {path}): wait for it to finish or stop it, or use another --data-dir"
            ) from None
        except PermissionError:
            raise ForwardError(
                f"{owner} runs as another user: only its own user may send it commands "
                f"({path} is theirs, mode 0600)"
            ) from None
        except OSError as exc:
            raise ForwardError(f"cannot reach {owner} on {path}: {exc.strerror or exc}") from None
        deadline = time.monotonic() + timeout_s
        try:
            sock.sendall(line)
            body = _read_all(sock, deadline)
        except TimeoutError:
            raise ForwardError(
                f"{owner} did not answer within {timeout_s:g} s (server.forward_timeout_s); it "
                "may still be working on it: give it longer, or ask for less"
            ) from None
        except OSError as exc:
            raise ForwardError(
                f"{owner} broke off its answer ({exc.strerror or exc}): it may be stopping; "
                "run the command again"
            ) from None
    return _reply(body, owner)


def _read_all(sock: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _reply(body: bytes, owner: str) -> Reply:
    try:
        doc = json.loads(body)
        reply = Reply(doc["stdout"], doc["stderr"], doc["status"])
    except (ValueError, TypeError, KeyError):
        reply = None
    if (
        reply is None
        or not isinstance(reply.stdout, str)
        or not isinstance(reply.stderr, str)
        or not isinstance(reply.status, int)
    ):
        raise ForwardError(
            f"{owner} sent no answer{'' if body else ' (it may be stopping)'}: run the command "
            "again; if it persists, run the same gpuledger version as the server"
        )
    return reply


# -- the owner: answers on the socket while it serves --------------------------------------
#: Runs one parsed-and-allowed command: ``(argv, out) -> exit status``; may raise
#: :class:`GpuledgerError`.
Answer = Callable[[list[str], TextIO], int]
#: Writes one audit entry of :data:`AUDITED`; may raise :class:`GpuledgerError`.
Record = Callable[["AuditEntry"], None]


class ForwardServer:
    """The owner's side: answers on ``<data_dir>/gpuledger.sock`` in threads until closed.

    Commands are answered one at a time: the engine's client runs one query at a time anyway,
    and this bounds the memory that answers being built hold. Each writes to its own buffer
    (no redirect of the process's stdout, which the other threads share).
    """

    def __init__(self, data_dir: Path, answer: Answer, record: Record | None = None):
        self.path = socket_path(data_dir)
        self._answer = answer
        self._record = record
        self._one_at_a_time = threading.Lock()
        server = _Server(str(self.path), _Handler, bind_and_activate=False)
        server.forwarder = self
        try:
            self.path.unlink(missing_ok=True)  # a dead owner's: this process holds the lock
            server.server_bind()
            # before listen: nobody can connect while the mode is still the umask's
            os.chmod(self.path, 0o600)
            server.server_activate()
        except OSError:
            server.server_close()
            self.path.unlink(missing_ok=True)
            raise
        self._identity = _identity(self.path)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="forward-server", daemon=True
        )
        self._thread.start()

    @classmethod
    def start(
        cls, data_dir: Path, answer: Answer, record: Record | None = None
    ) -> ForwardServer | None:
        """Serve, or log why read commands will not be answered (best effort: the dashboard
        and the ingest API serve either way) and return None."""
        if len(os.fsencode(socket_path(data_dir))) > _SOCKET_PATH_MAX:
            log.warning(
                "read commands of other processes will not be answered: the socket path in "
                "%s would be longer than %d bytes",
                data_dir,
                _SOCKET_PATH_MAX,
            )
            return None
        try:
            return cls(data_dir, answer, record)
        except OSError as exc:
            log.warning("read commands of other processes will not be answered: %s", exc)
            return None

    def close(self) -> None:
        """Stop answering and remove the socket (if it is still this server's)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        if _identity(self.path) == self._identity:
            self.path.unlink(missing_ok=True)

    def reply_to(self, line: bytes, peer_uid: int | None) -> Reply:
        """The reply to one request line from a peer of uid ``peer_uid`` (None: unknown)."""
        if peer_uid is not None and peer_uid != os.getuid():
            log.warning("refused a command from uid %d on %s", peer_uid, self.path)
            return _refusal(
                "the gpuledger process that owns this data directory runs as another user: "
                "only its own user may send it commands"
            )
        argv = _request(line)
        if isinstance(argv, Reply):
            return argv
        if not isinstance(argv, list):
            return self._recorded(argv)
        out = io.StringIO()
        with self._one_at_a_time:
            try:
                status = self._answer(argv, out)
            except GpuledgerError as exc:
                return Reply(out.getvalue(), f"gpuledger: {one_line(exc)}\n", exit_status(exc))
            except Exception:  # a bug: keep serving, and say where its traceback is
                log.exception("a command sent to this process failed: %s", argv)
                return _refusal(
                    "the command failed in the gpuledger process that owns the data directory "
                    "(a bug: that process's log has the traceback)"
                )
        if out.tell() > _MAX_ANSWER_CHARS:
            return _refusal(
                f"the answer is longer than the {_MAX_ANSWER_CHARS >> 20} MiB that the process "
                "owning the data directory sends back: ask for less (a LIMIT, a shorter window), "
                "or stop that process and run the command here"
            )
        return Reply(out.getvalue(), "", status)

    def _recorded(self, entry: AuditEntry) -> Reply:
        if self._record is None or entry.action not in AUDITED:
            return _refusal(
                f"audit entries of {entry.action!r} are not taken from other processes (only "
                f"{', '.join(sorted(AUDITED))} are, by `gpuledger serve` and `demo`)"
            )
        with self._one_at_a_time:
            try:
                self._record(entry)
            except GpuledgerError as exc:
                return _refusal(f"the audit log did not take it: {one_line(exc)}")
        return Reply("", "", 0)


def _refusal(message: str) -> Reply:
    return Reply("", f"gpuledger: {message}\n", 1)


def _request(line: bytes) -> list[str] | AuditEntry | Reply:
    """The argv or the audit entry a request line carries, or the reply that refuses it."""
    if len(line) > _MAX_REQUEST_BYTES or not line.endswith(b"\n"):
        return _refusal(f"the request is cut short or longer than {_MAX_REQUEST_BYTES} bytes")
    try:
        doc = json.loads(line)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("version") != _VERSION:
        return _refusal(
            "the request is not one this gpuledger understands: run the same gpuledger "
            "version as the process that owns the data directory"
        )
    if "audit" in doc:
        from gpuledger.audit_pending import from_json

        try:
            return from_json(doc["audit"])
        except ValueError as exc:
            return _refusal(f"the request's audit entry is not one: {exc}")
    argv = doc.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return _refusal("the request's argv is not a list of strings")
    return argv


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _peer_uid(sock: socket.socket) -> int | None:
    """The connecting process's uid (Linux ``SO_PEERCRED``); None where the platform has no
    way to ask (the socket's mode 0600 is then the only check)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("=iII"))
    return int(struct.unpack("=iII", creds)[1])


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True  # a command still running does not hold the process at exit
    block_on_close = False
    forwarder: ForwardServer


class _Handler(socketserver.StreamRequestHandler):
    timeout = _REQUEST_TIMEOUT_S
    server: _Server

    def handle(self) -> None:
        try:
            uid = _peer_uid(self.connection)
            mine = uid is None or uid == os.getuid()
            line = self.rfile.readline(_MAX_REQUEST_BYTES + 1) if mine else b""
            reply = self.server.forwarder.reply_to(line, uid)
            self.wfile.write(json.dumps(reply._asdict()).encode())
        except OSError as exc:  # the client gave up (Ctrl-C, its timeout) or never sent
            log.info("a command's client went away: %s", exc)
