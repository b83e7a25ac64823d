"""The HTTP server of ``gpuledger serve``: cheroot (threads, never forking: the embedded engine
must not be forked once opened), with one change.

An answer given before the request's body was read (a batch refused on its headers: 401, 503
busy, 415) closes the connection. cheroot would keep it open for the client's next request,
and to do so it first reads the rest of the body into memory, however large, at whatever pace
the client sends it, before it sends the answer: a refused 64 MiB batch would be read whole,
and a client that sends slowly would hold a thread and never hear the refusal. Instead the
answer goes out at once, and what the client still sends is read and dropped for at most
:data:`LINGER_S` (so that a client still sending gets to read the answer, as a web server's
lingering close does) before the connection is closed.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

from cheroot import server, wsgi

#: How long a connection whose request body was left unread is drained after the answer.
LINGER_S = 2.0
_CHUNK = 1 << 16


def _unread(rfile: Any) -> bool:
    """Whether the request body behind ``rfile`` (cheroot's wsgi.input) was not read to its end."""
    if isinstance(rfile, server.KnownLengthRFile):
        return rfile.remaining > 0
    if isinstance(rfile, server.ChunkedRFile):
        return not rfile.closed
    return False


class _Request(server.HTTPRequest):
    def send_headers(self) -> None:
        if _unread(self.rfile):
            self.close_connection = True  # cheroot closes, and the connection lingers first
            self.conn.unread_body = True
        super().send_headers()


class _Connection(server.HTTPConnection):
    RequestHandlerClass = _Request
    unread_body = False

    def close(self) -> None:
        if self.unread_body:
            self._drain()
        super().close()

    def _drain(self) -> None:
        """Send FIN, then read and drop what the client still sends, for at most LINGER_S."""
        sock = self.socket
        deadline = time.monotonic() + LINGER_S
        with contextlib.suppress(OSError):  # the client has gone: nothing to wait for
            sock.shutdown(socket.SHUT_WR)
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                if not sock.recv(_CHUNK):
                    break


def make_server(host: str, port: int, app: Any, threads: int) -> wsgi.Server:
    """A cheroot WSGI server of ``threads`` threads for ``app`` on ``host:port`` (not bound
    yet: :meth:`prepare` binds)."""
    made = wsgi.Server((host, port), app, numthreads=threads, shutdown_timeout=5)
    made.ConnectionClass = _Connection
    return made
