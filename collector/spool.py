"""A bounded, fsync'd disk spool of batches, replayed oldest-first.

While the warehouse is unreachable the agent puts each batch here; once it is back the
batches are sent in the order they were taken, each under the id it was given when it was
made, so a batch that reached the warehouse before the connection broke (the reply was lost)
is recognised there by its deduplication token and not written twice.

A batch file is written to a temporary name, fsync'd, renamed, and the directory fsync'd
(:func:`write_durably`): after a crash a batch is either whole or absent. Its name holds a
sequence number and the batch id, percent-encoded so that the id read back is the id given.
When the spool is full a new batch is refused (the oldest data, from the start of the outage,
is kept), counted in ``dropped_batches`` and logged as a warning that says how to make room.

A batch file holds the batch frame (:mod:`collector.frame`). The server's ingest spool
(``warehouse.ingest.coalesce``) keeps agents' batches in the same format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import quote, unquote

from collector.frame import UNBOUNDED, dump_batch, load_batch
from collector.records import Batch

log = logging.getLogger(__name__)

#: The folder of a spool where batches that cannot be sent or written are kept, each as
#: ``NAME.batch`` with ``NAME.reason`` beside it.
REJECTED = "rejected"


@dataclasses.dataclass(frozen=True)
class SpooledBatch:
    path: Path
    batch_id: str

    def load(self) -> Batch:
        """The batch; a spool holds what its writer made or accepted, so its samples are not
        held to a decompressed size again (``gpuledger serve`` bounds them as they arrive)."""
        return load_batch(self.path.read_bytes(), max_decoded_bytes=UNBOUNDED)


class Spool:
    """Batches on disk under ``directory``, at most ``max_bytes`` in all.

    Thread-safe. The depth and the bytes used are counted in memory (read from the directory
    once, at start), so a deep spool costs nothing per batch.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = 1 << 30):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.dropped_batches = 0
        self._lock = threading.Lock()
        for stale in self.directory.glob("*.tmp"):  # a crash mid-write leaves only these
            stale.unlink()
        existing = self._files()
        self._seq = int(existing[-1].name.split("-", 1)[0]) + 1 if existing else 0
        self._depth = len(existing)
        self._used = sum(p.stat().st_size for p in existing)
        self._warned_full = False

    def _files(self) -> list[Path]:
        return sorted(self.directory.glob("*.batch"))

    @property
    def depth(self) -> int:
        """Batches waiting."""
        return self._depth

    @property
    def size_bytes(self) -> int:
        return self._used

    def put(self, batch: Batch, batch_id: str) -> bool:
        """Keep ``batch`` until it is acknowledged; False (and a warning) when the spool is full."""
        data = dump_batch(batch)
        if self.put_bytes(data, batch_id) is not None:
            return True
        self.dropped_batches += 1
        log.warning(
            "spool %s is full (%d of %d bytes): batch %s (%d rows) is NOT kept; %d "
            "batch(es) dropped so far. Bring the warehouse back, or raise the agent's "
            "spool size",
            self.directory,
            self.size_bytes,
            self.max_bytes,
            batch_id,
            len(batch),
            self.dropped_batches,
        )
        return False

    def put_bytes(self, data: bytes, batch_id: str) -> SpooledBatch | None:
        """Keep a batch already serialised by :func:`dump_batch`; None when the spool is full.

        Durable when it returns: the file and the directory are fsync'd. Concurrent callers
        fsync in parallel; only the reservation of a name and of the space is serialised.
        """
        with self._lock:
            if self._used + len(data) > self.max_bytes:
                return None
            self._used += len(data)
            self._depth += 1
            if not self._warned_full and self._used > 0.8 * self.max_bytes:
                self._warned_full = True
                log.warning(
                    "spool %s is over 80%% full (%d of %d bytes)",
                    self.directory,
                    self._used,
                    self.max_bytes,
                )
            name = f"{self._seq:012d}-{_encode_id(batch_id)}.batch"
            self._seq += 1
        path = self.directory / name
        try:
            write_durably(path, data)
        except BaseException:
            with self._lock:
                self._used -= len(data)
                self._depth -= 1
            raise
        return SpooledBatch(path, batch_id)

    def pending(self) -> Iterator[SpooledBatch]:
        """The waiting batches, oldest first."""
        for path in self._files():
            yield SpooledBatch(path, _decode_id(path.stem.split("-", 1)[1]))

    def set_aside(self, batch: Batch, batch_id: str, reason: str) -> Path:
        """Keep a batch the sink refused in ``rejected/`` with the reason, for an operator."""
        folder = self.directory / REJECTED
        folder.mkdir(exist_ok=True)
        path = folder / f"{_safe(batch_id)}.batch"
        path.write_bytes(dump_batch(batch))
        path.with_suffix(".reason").write_text(reason + "\n", encoding="utf-8")
        log.error("batch %s was refused by the sink and kept in %s: %s", batch_id, path, reason)
        return path

    def ack(self, item: SpooledBatch) -> None:
        """The batch reached the warehouse: forget it."""
        self.forget([item])

    def forget(self, items: Iterable[SpooledBatch]) -> None:
        """Remove several acknowledged batches with one directory fsync."""
        with self._lock:
            for item in items:
                try:
                    size = item.path.stat().st_size
                    item.path.unlink()
                except FileNotFoundError:
                    continue
                self._used -= size
                self._depth -= 1
            fsync_dir(self.directory)
            if self._used < 0.8 * self.max_bytes:
                self._warned_full = False


@dataclasses.dataclass(frozen=True)
class RejectedBatch:
    """A batch kept in a spool's ``rejected/`` folder, and why."""

    path: Path
    batch_id: str
    reason: str
    size_bytes: int
    kept_at: dt.datetime


def rejected_batches(directory: str | os.PathLike[str]) -> list[RejectedBatch]:
    """The batches kept in ``directory``'s ``rejected/`` folder (an agent's spool or the
    server's), oldest first; their reasons are ``NAME.reason`` (or ``NAME.batch.reason``)."""
    found = []
    for path in (Path(directory) / REJECTED).glob("*.batch"):
        reason = ""
        for candidate in (path.with_suffix(".reason"), path.with_name(path.name + ".reason")):
            with contextlib.suppress(OSError):
                reason = candidate.read_text(encoding="utf-8", errors="replace").strip()
                break
        try:
            stat = path.stat()
        except OSError:  # removed meanwhile
            continue
        seq, _, encoded = path.stem.partition("-")
        batch_id = _decode_id(encoded) if seq.isdigit() and encoded else path.stem
        kept_at = dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC)
        found.append(RejectedBatch(path, batch_id, reason, stat.st_size, kept_at))
    return sorted(found, key=lambda r: (r.kept_at, r.path.name))


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that after a crash the file is whole or absent: a
    temporary name, fsync, rename, then the directory fsync'd."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


#: The longest encoded batch id a spool file name holds whole (longer ones are cut).
MAX_ENCODED_ID_CHARS = 200


def _encode_id(batch_id: str) -> str:
    """The batch id as a file-name part that decodes back to it (percent-encoding); names
    written before this encoding (other characters replaced by ``_``) decode unchanged."""
    return quote(batch_id, safe="_.:")[:MAX_ENCODED_ID_CHARS]


def id_fits(batch_id: str) -> bool:
    """Whether a spool file name keeps ``batch_id`` whole (it reads back as given)."""
    return 0 < len(quote(batch_id, safe="_.:")) <= MAX_ENCODED_ID_CHARS


def _decode_id(part: str) -> str:
    return unquote(part)


def _safe(batch_id: str) -> str:
    return "".join(c if c.isalnum() or c in "_.:" else "_" for c in batch_id)[:120]


def fsync_dir(directory: Path) -> None:
    """Make the renames and removals in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
