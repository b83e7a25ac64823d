"""The ids of the batches the server has written, remembered for a window, so that an agent
re-sending a batch whose reply was lost is answered "duplicate" (:mod:`warehouse.ingest.coalesce`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from collector.spool import fsync_dir

_HOUR_S = 3600


class AcceptedIds:
    """The ids of the batches written in the last ``window_s`` seconds, on disk and in memory.

    One file per hour (``YYYYmmddHH.ids``, UTC) of 16-byte digests of the ids, appended and
    fsync'd once per group; files older than the window are deleted. In memory each past hour
    is a sorted array (16 bytes an id: a day at 100 batches/s is ~140 MB) and the current
    hour a set. Thread-safe.
    """

    def __init__(
        self,
        directory: Path,
        window_s: float,
        clock: Callable[[], float] = time.time,
    ):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._sealed: dict[int, np.ndarray] = {}
        self._hour = self._hour_of(clock())
        self._current: set[bytes] = set()
        for path in sorted(self.directory.glob("*.ids")):
            hour = _hour_of_name(path.stem)
            if hour is None:
                continue
            if self._expired(hour):
                path.unlink()
                continue
            data = path.read_bytes()
            digests = np.frombuffer(data[: len(data) // 16 * 16], dtype="S16")  # a torn tail
            self._sealed[hour] = np.sort(digests)  # was not acknowledged; its group replays

    @staticmethod
    def _hour_of(seconds: float) -> int:
        return int(seconds // _HOUR_S)

    def _expired(self, hour: int) -> bool:
        return (hour + 1) * _HOUR_S <= self.clock() - self.window_s

    def __contains__(self, batch_id: object) -> bool:
        if not isinstance(batch_id, str):
            return False
        digest = _digest(batch_id)
        with self._lock:
            if digest in self._current:
                return True
            return any(
                np.searchsorted(arr, digest, "left") != np.searchsorted(arr, digest, "right")
                for arr in self._sealed.values()
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._current) + sum(len(a) for a in self._sealed.values())

    def add(self, batch_ids: Iterable[str]) -> None:
        """Remember ``batch_ids`` as written; durable when this returns."""
        digests = [_digest(b) for b in batch_ids]
        with self._lock:
            hour = self._hour_of(self.clock())
            if hour != self._hour:
                self._seal()
                self._hour = hour
            path = self.directory / f"{_hour_name(hour)}.ids"
            new = not path.exists()
            with open(path, "ab") as fh:
                fh.write(b"".join(digests))
                fh.flush()
                os.fsync(fh.fileno())
            if new:
                fsync_dir(self.directory)
            self._current.update(digests)
            for old in [h for h in self._sealed if self._expired(h)]:
                del self._sealed[old]
                (self.directory / f"{_hour_name(old)}.ids").unlink(missing_ok=True)

    def _seal(self) -> None:
        if not self._current:
            return
        fresh = np.array(sorted(self._current), dtype="S16")
        before = self._sealed.get(self._hour)
        self._sealed[self._hour] = fresh if before is None else np.union1d(before, fresh)
        self._current = set()


def _digest(batch_id: str) -> bytes:
    return hashlib.blake2b(batch_id.encode(), digest_size=16).digest()


def _hour_name(hour: int) -> str:
    return dt.datetime.fromtimestamp(hour * _HOUR_S, dt.UTC).strftime("%Y%m%d%H")


def _hour_of_name(stem: str) -> int | None:
    try:
        when = dt.datetime.strptime(stem, "%Y%m%d%H").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return int(when.timestamp()) // _HOUR_S
