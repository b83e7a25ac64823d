"""Refused requests into the audit log, without letting a flood of them flood the log."""

from __future__ import annotations

import logging
import threading
import time

import flask

from warehouse.client import Warehouse, WarehouseError

log = logging.getLogger(__name__)


class Refusals:
    """Audit entries for refused requests (``action``, outcome ``denied``): at most one per
    address and reason every 10 s. Best effort: a refusal stands when its record cannot be
    written (the warehouse is down), and is logged instead."""

    def __init__(self, wh: Warehouse, action: str, every_s: float = 10.0):
        self.wh = wh
        self.action = action
        self.every_s = every_s
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def note(self, actor: str, why: str) -> None:
        """Record that the current request by ``actor`` ('' when unknown) was refused."""
        addr = flask.request.remote_addr or ""
        now = time.monotonic()
        with self._lock:
            if now - self._last.get((addr, why), float("-inf")) < self.every_s:
                return
            self._last[(addr, why)] = now
            if len(self._last) > 10_000:  # forget old ones rather than grow for ever
                self._last = {k: t for k, t in self._last.items() if now - t < self.every_s}
        try:
            self.wh.audit(actor or "anonymous", self.action, addr, why, outcome="denied")
        except WarehouseError as exc:
            log.warning("cannot audit a refused request (%s): %s", why, exc)
