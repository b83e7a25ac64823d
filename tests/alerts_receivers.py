"""Real receivers for the notifiers: an HTTP server in a thread (webhook and Slack) and an SMTP
server (aiosmtpd's Controller), both on 127.0.0.1, each able to go down and come back."""

from __future__ import annotations

import email
import email.message
import email.policy
import http.server
import json
import socket
import threading
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpReceiver:
    """Takes JSON POSTs on any path; answers 500 while ``down``. ``got``: (path, body) of the
    POSTs it accepted; ``refused``: how many it answered 500."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Any]] = []
        self.refused = 0
        self.down = False
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if receiver.down:
                    receiver.refused += 1
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"down for maintenance")
                    return
                receiver.got.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def bodies(self, path: str) -> list[Any]:
        return [b for p, b in self.got if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpReceiver:
    """An SMTP server that keeps each message it is sent; :meth:`stop` and :meth:`start` take
    it down (connections refused) and bring it back on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.messages: list[email.message.EmailMessage] = []
        self.controller: Controller | None = None
        self.start()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(msg, email.message.EmailMessage)
        self.messages.append(msg)
        return "250 Message accepted for delivery"

    def start(self) -> None:
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
