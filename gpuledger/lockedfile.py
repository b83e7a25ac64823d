"""Small JSON files of credentials beside the warehouse (ingest tokens, users), changed by the
command line while ``gpuledger serve`` reads them: one change at a time under an exclusive lock,
written to a temporary file (mode 0600) and renamed, so that a reader never sees half a file."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from gpuledger_errors import ConfigError

T = TypeVar("T")


class CredentialsFileError(ConfigError):
    """A credentials file cannot be read or written."""


def read_list(path: Path, key: str) -> list[dict[str, Any]]:
    """The entries under ``key`` in ``path`` (none when the file does not exist)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CredentialsFileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        entries = json.loads(text)[key]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TypeError(f"{key} is not a list of objects")
        return entries
    except (ValueError, KeyError, TypeError) as exc:
        raise CredentialsFileError(
            f"{path} is damaged ({exc}): restore it from a backup, or move it away and make "
            "the entries again"
        ) from None


@contextlib.contextmanager
def changing(path: Path, key: str, *, remove_empty: bool = False) -> Iterator[list[dict[str, Any]]]:
    """The entries of ``path`` to change in place; written back when the block ends (the file
    removed instead, with ``remove_empty``, when none are left)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "a")  # noqa: SIM115 - closed by the with
    except OSError as exc:
        raise CredentialsFileError(f"cannot write beside {path}: {exc.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = read_list(path, key)
        yield entries
        if remove_empty and not entries:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({key: entries}, indent=1) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def entry_as(cls: type[T], entry: dict[str, Any], path: Path, what: str) -> T:
    """One entry of a credentials file as its record type."""
    try:
        return cls(**entry)
    except TypeError as exc:
        raise CredentialsFileError(f"{path} has an entry that is not {what}: {exc}") from None


class WatchedIndex(Generic[T]):
    """A credentials file's entries by key, as ``load`` reads them, read again when the file
    changes (looked at no more than once a second); thread-safe."""

    def __init__(self, path: Path, load: Callable[[], dict[str, T]], clock: Any):
        self._load = load
        self._watch = _Watched(path, clock)
        self._lock = threading.Lock()
        self._index: dict[str, T] = {}

    def current(self) -> dict[str, T]:
        with self._lock:
            if self._watch.changed():
                self._index = self._load()
            return self._index


class _Watched:
    """A file read again when it changes, looked at no more than once a second."""

    def __init__(self, path: Path, clock: Any):
        self.path = path
        self._clock = clock
        self._seen: tuple[float, int] | None = None
        self._checked = float("-inf")

    def changed(self) -> bool:
        now = self._clock()
        if now - self._checked < 1.0:
            return False
        self._checked = now
        try:
            st = self.path.stat()
            seen: tuple[float, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            seen = None
        if seen == self._seen:
            return False
        self._seen = seen
        return True
