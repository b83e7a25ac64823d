"""Server-side coalescing: agents' batches go through a write-ahead spool, then many at a
time into the warehouse with one insert per table, each written exactly once.

Why: an insert costs about the same whatever its size (~45 ms in the embedded engine), so one
insert per agent batch caps a server at ~20 batches/s, and a fleet of 1,000 agents sending
every 10 s needs 100.

The steps, and what each guarantees:

1. Accept. A batch is acknowledged (202) only once its file in the spool is fsync'd (the
   ``collector.spool`` format and helpers). An id that is still in the spool, or was written
   within ``dedup_window_s`` (:class:`AcceptedIds`), is answered "duplicate" and not kept
   again: an agent that re-sends after a lost reply writes once. A full spool refuses the
   batch (503 with Retry-After), so the agent keeps it in its own spool.
2. Group. One flusher thread takes spooled batches oldest first until the group holds
   ``max_rows`` rows (a larger batch forms a group alone) or its oldest batch has waited
   ``max_ms``. Before inserting it fsyncs a manifest naming the members, the clock the checks
   use, and the group's deduplication token (a hash of the member ids).
3. Write. ``Ingestor.write_group``: one insert per table, each under that token; quarantine
   and allocation re-derivation as if each batch had been written alone. Samples of GPUs with
   no inventory are quarantined; when there are any, the manifest keeps which GPUs those were
   (fsync'd before the first insert), so that a group written again after a crash is checked
   against the same answer even if the inventory came meanwhile.
4. Forget. The member ids are appended (fsync'd) to the accepted-ids log; then the member
   files and the manifest are removed.

When a group's write fails and the warehouse does not answer, the group is retried, with
backoff, until it is written: batches wait in the spool meanwhile, and ``/healthz`` reports
the error. When the warehouse answers, a member's data may be at fault: the group is *split*
(its manifest keeps the step that failed; the steps before it were written for every member)
and its members are written one by one from that step, each under a token of its own. A member
that fails for its data (a value the driver or the engine cannot take), or alone while others
are written (three passes in a row), is moved to ``rejected/`` with the error (``gpuledger
quarantine rejected`` lists it, ``/healthz`` counts it), and the rest of the group is written;
when every member fails alike, the failure is the warehouse's and the group is retried.

After a crash at any point, the restarted server first replays every manifest left, with the
same members, clock, token and split (ClickHouse's insert deduplication drops a re-insert of
what was written), and only then forms new groups. A manifest with a member whose id is
remembered was written and half forgotten; forgetting it is finished. A member gone from the
spool otherwise (removed by hand) is lost: it is logged, and never remembered as written, so
its agent's copy is taken if sent again; the others are written. A member that cannot be read
is moved to ``rejected/``. One process owns a spool directory (a lock file).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any, Literal

import polars as pl

from collector.records import Batch
from collector.spool import REJECTED, Spool, SpooledBatch, fsync_dir, write_durably
from gpuledger_errors import ConfigError
from warehouse.client import Warehouse
from warehouse.ingest.accepted_ids import AcceptedIds
from warehouse.ingest.group_steps import GroupWriteError
from warehouse.ingest.metrics import ServerMetrics
from warehouse.ingest.writer import Ingestor, IngestResult, content_id

log = logging.getLogger(__name__)

Outcome = Literal["accepted", "duplicate", "full"]
#: A member of a split group that fails this many passes in a row while others are written is
#: set aside (a failure that is the data's by its error is set aside at once).
_FAILED_ALONE = 3
#: Parsed batches are kept in memory for the flusher up to this many (serialised) bytes;
#: beyond it they are read back from the spool.
_MEMORY_BYTES = 64 << 20


class CoalesceError(ConfigError):
    """The spool directory cannot be used (another process owns it, or it is not writable)."""


def group_token(batch_ids: Iterable[str]) -> str:
    """The deduplication token of a group: the same member ids, in the same order, give the
    same token (a replayed group is recognised), different ones a different token."""
    return "grp:" + content_id(*(b.encode() + b"\n" for b in batch_ids))


@dataclasses.dataclass
class _Item:
    """A spooled batch waiting to be grouped: ``batch`` is None when it must be read back
    (``rows`` is -1 until it is), ``held`` the bytes it counts against the memory budget."""

    spooled: SpooledBatch
    rows: int
    held: int
    batch: Batch | None
    received: float  # time.monotonic()


@dataclasses.dataclass
class Group:
    """A group whose manifest is on disk: written under ``token``, checked against ``now``."""

    manifest: Path
    token: str
    now: dt.datetime
    members: list[SpooledBatch]
    batches: list[Batch]
    received: float  # time.monotonic() when its oldest batch arrived (or the server started)
    #: (cluster, gpu_uuid) pairs checked as having no inventory; None: not asked yet
    unknown_gpus: list[tuple[str, str]] | None = None
    #: Set once the group's write failed at this step while the warehouse answered: the group
    #: is then written member by member from that step (see :meth:`Coalescer._split`).
    resume_at: str | None = None
    #: Passes in a row in which a member failed while others were written, by batch id.
    failed_alone: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    @property
    def rows(self) -> int:
        return sum(len(b) for b in self.batches)

    @property
    def batch_ids(self) -> list[str]:
        return [m.batch_id for m in self.members]


class Coalescer:
    """The server's ingest spool and its flusher thread (see the module docstring).

    ``now`` is the clock the ingest checks use (retention, future skew); it is read once per
    group and kept in the manifest, so a replayed group is checked exactly as the first time.
    """

    def __init__(
        self,
        wh: Warehouse,
        raw_retention_days: int,
        directory: str | os.PathLike[str],
        *,
        max_rows: int = 50_000,
        max_ms: float = 1000,
        max_bytes: int = 1 << 30,
        dedup_window_s: float = 86_400,
        metrics: ServerMetrics | None = None,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ):
        self.directory = Path(directory)
        self._owner = _own(self.directory)
        self.max_rows = max_rows
        self.max_s = max_ms / 1000
        self.now = now
        self.metrics = metrics or ServerMetrics()
        self.spool = Spool(self.directory, max_bytes)
        self.groups_dir = self.directory / "groups"
        self.groups_dir.mkdir(exist_ok=True)
        for stale in self.groups_dir.glob("*.tmp"):
            stale.unlink()
        self.accepted = AcceptedIds(self.directory / "accepted", dedup_window_s)
        self._clock = now()
        self._retention_days = raw_retention_days
        self._ingestor = Ingestor(wh, raw_retention_days, now=lambda: self._clock)
        self._started = time.monotonic()
        self._cond = threading.Condition()
        self._queue: collections.deque[_Item] = collections.deque()
        self._queued_rows = 0
        self._memory = 0
        self._pending: set[str] = set()  # ids in the spool: queued, in a manifest, or new
        self._replay = sorted(self.groups_dir.glob("*.json"))
        self._group_seq = int(self._replay[-1].stem) + 1 if self._replay else 0
        claimed = {name for path in self._replay for name, _id in _read_manifest(path)[2]}
        overdue = self._started - self.max_s  # left from before a crash or stop: write now
        for spooled in self.spool.pending():
            self._pending.add(spooled.batch_id)
            if spooled.path.name not in claimed:
                self._queue.append(_Item(spooled, -1, 0, None, overdue))
        self._stopping = False
        self._give_up_at = float("inf")
        self._in_flight: Group | None = None
        self.last_error: str | None = None
        self.groups_written = 0
        self._thread: threading.Thread | None = None
        self.metrics.watch(
            lambda: self.spool.depth, lambda: self.spool.size_bytes, self.oldest_pending_s
        )

    # -- accepting ----------------------------------------------------------------------------
    def accept(self, batch_id: str, data: bytes, batch: Batch) -> Outcome:
        """Keep a batch (``data`` is its ``dump_batch`` form) durably, unless it is known."""
        with self._cond:
            if batch_id in self._pending or batch_id in self.accepted:
                return "duplicate"
            self._pending.add(batch_id)  # a twin arriving meanwhile is a duplicate
        try:
            spooled = self.spool.put_bytes(data, batch_id)
        except BaseException:
            with self._cond:
                self._pending.discard(batch_id)
            raise
        with self._cond:
            if spooled is None:
                self._pending.discard(batch_id)
                return "full"
            held = len(data) if self._memory + len(data) <= _MEMORY_BYTES else 0
            self._memory += held
            item = _Item(spooled, len(batch), held, batch if held else None, time.monotonic())
            self._queue.append(item)
            self._queued_rows += item.rows
            self._cond.notify_all()
        return "accepted"

    # -- the flusher --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ingest-flusher", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Write what is spooled (for up to ``timeout_s``), then stop the flusher. True when
        the spool is empty; what is left is written on the next start."""
        with self._cond:
            self._stopping = True
            self._give_up_at = time.monotonic() + timeout_s
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s + 5)
        left = self.spool.depth
        if left:
            log.warning(
                "stopping with %d batch(es) in the ingest spool %s: they are written on the "
                "next start",
                left,
                self.directory,
            )
        self._owner.close()
        return left == 0

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait until every accepted batch is written (for tests and benchmarks)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._cond:
                if not self._pending:
                    return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        for path in self._replay:
            group = self._load_group(path)
            if group is not None and not self._write_until_done(group):
                return
        self._replay = []
        while True:
            group = self._next_group()
            if group is None or not self._write_until_done(group):
                return

    def _next_group(self) -> Group | None:
        """Wait for a group's worth of batches (or ``max_ms``); fsync its manifest."""
        with self._cond:
            while True:
                if self._stopping and (not self._queue or time.monotonic() > self._give_up_at):
                    return None
                if self._queue:
                    wait = self._queue[0].received + self.max_s - time.monotonic()
                    if self._stopping or self._queued_rows >= self.max_rows or wait <= 0:
                        break
                    self._cond.wait(wait)
                else:
                    self._cond.wait()
        return self.form_group()

    def form_group(self) -> Group | None:
        """Take the batches queued now (oldest first, up to ``max_rows`` rows) and fsync the
        group's manifest; None when nothing is queued. The flusher calls this, then
        :meth:`write`; tests call them to stop in between, as a crash would."""
        items = self._take()
        return self._write_manifest(items) if items else None

    def _take(self) -> list[_Item]:
        """Batches from the head of the queue, up to ``max_rows`` rows (at least one)."""
        taken: list[_Item] = []
        rows = 0
        while True:
            with self._cond:
                if not self._queue:
                    break
                head = self._queue[0]
                if taken and head.rows >= 0 and rows + head.rows > self.max_rows:
                    break
                self._queue.popleft()
                self._queued_rows -= max(head.rows, 0)
            if head.batch is None:
                batch = self._read(head.spooled)
                if batch is None:
                    continue
                head.batch, head.rows = batch, len(batch)
                if taken and rows + head.rows > self.max_rows:
                    with self._cond:  # unknown until read: it opens the next group
                        self._queue.appendleft(head)
                        self._queued_rows += head.rows
                    break
            else:
                with self._cond:
                    self._memory -= head.held
                head.held = 0
            taken.append(head)
            rows += head.rows
            if rows >= self.max_rows:
                break
        return taken

    def _read(self, spooled: SpooledBatch) -> Batch | None:
        """A spooled batch read back; one that cannot be read is moved to ``rejected/``."""
        try:
            return spooled.load()
        except FileNotFoundError:
            self._lost(spooled, "")
        except (OSError, ValueError) as exc:  # a BatchFormatError is a ValueError
            self._set_aside(spooled, f"the spooled batch cannot be read: {exc}")
        return None

    def _set_aside(self, spooled: SpooledBatch, reason: str) -> None:
        """Move a batch that cannot be written to ``rejected/`` with ``reason`` (what
        ``gpuledger quarantine rejected`` lists), durably, then take it out of the spool. Its
        id is not remembered as written: the agent may send it again."""
        folder = self.directory / REJECTED
        target = folder / spooled.path.name
        try:
            folder.mkdir(exist_ok=True)
            write_durably(target, spooled.path.read_bytes())
            write_durably(target.with_suffix(".reason"), f"{reason}\n".encode())
        except OSError as exc:
            log.error("cannot keep batch %s in %s: %s", spooled.batch_id, folder, exc)
        self.spool.forget([spooled])
        with self._cond:
            self._pending.discard(spooled.batch_id)
        self.metrics.batches.labels("rejected").inc()
        log.error(
            "batch %s cannot be written and was moved to %s for an operator "
            "(`gpuledger quarantine rejected` lists it): %s",
            spooled.batch_id,
            target,
            reason,
        )

    def _lost(self, spooled: SpooledBatch, group: str) -> None:
        """A batch accepted and gone from the spool before it was written (removed by hand):
        it is said, and its id is not remembered, so the agent's copy is taken if sent again."""
        with self._cond:
            self._pending.discard(spooled.batch_id)
        log.error(
            "batch %s%s is missing from the spool %s and was never written: it is lost unless "
            "its agent sends it again (its id is not remembered as written)",
            spooled.batch_id,
            f" of group {group}" if group else "",
            self.directory,
        )

    def _write_manifest(self, items: list[_Item]) -> Group:
        members = [i.spooled for i in items]
        token = group_token(m.batch_id for m in members)
        now = self.now()
        path = self.groups_dir / f"{self._group_seq:012d}.json"
        self._group_seq += 1
        body = {
            "token": token,
            "now": now.isoformat(),
            "members": [[m.path.name, m.batch_id] for m in members],
        }
        write_durably(path, json.dumps(body).encode())
        batches = [i.batch for i in items if i.batch is not None]
        return Group(path, token, now, members, batches, items[0].received)

    def _load_group(self, path: Path) -> Group | None:
        """A manifest left by a crash, as a group to write again; None when it was written.

        The ids of a written group's members are remembered all at once, before its files
        are removed: a group with a member remembered was written, and forgetting it is
        finished. Otherwise its members are written again, but for those gone from the spool:
        moved to ``rejected/``, or removed by hand (lost: said, and not remembered as written,
        so that the agent's copy is taken if it sends it again).
        """
        token, now, names = _read_manifest(path)
        body = json.loads(path.read_text(encoding="utf-8"))
        unknown = _manifest_unknown_gpus(path)
        members = [SpooledBatch(self.directory / name, bid) for name, bid in names]
        if any(m.batch_id in self.accepted for m in members):
            self._forget(path, [m for m in members if m.path.exists()])
            return None
        kept, batches = [], []
        for member in members:
            if not member.path.exists():
                if not (self.directory / REJECTED / member.path.name).exists():
                    self._lost(member, path.name)
                continue
            batch = self._read(member)
            if batch is not None:
                kept.append(member)
                batches.append(batch)
        if not kept:
            self._forget(path, [])
            return None
        log.warning(
            "group %s (%d batches) was not finished before the last stop: writing it again "
            "under token %s (whatever of it was written is dropped as a duplicate)",
            path.name,
            len(kept),
            token,
        )
        resume_at = body.get("resume_at")
        return Group(path, token, now, kept, batches, self._started, unknown, resume_at)

    def _write_until_done(self, group: Group) -> bool:
        """Write ``group``, retrying with backoff; False when stopping gave up on it."""
        delay = 0.5
        self._in_flight = group
        while True:
            try:
                self.write(group)
                self._in_flight = None
                return True
            except Exception as exc:  # the flusher must outlive any one failure
                self.metrics.flush_failures.inc()
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._ingestor = Ingestor(  # forget cached table metadata
                    self._ingestor.wh, self._retention_days, now=lambda: self._clock
                )
                if self._split(group, exc):
                    continue  # at once, member by member
                log.error(
                    "writing group %s (%d batches) failed, retrying in %.1f s: %s",
                    group.manifest.name,
                    len(group.members),
                    delay,
                    self.last_error,
                )
            with self._cond:
                if self._stopping and time.monotonic() + delay > self._give_up_at:
                    return False
                self._cond.wait(delay)
            delay = min(delay * 2, 30.0)

    def write(self, group: Group) -> None:
        """Write ``group`` (one insert per table, under its token), then forget it."""
        self._clock = group.now
        started = time.perf_counter()
        pairs = [(m.batch_id, b) for m, b in zip(group.members, group.batches, strict=True)]
        if group.unknown_gpus is None:
            unknown = sorted(self._ingestor.unknown_gpus(pairs))
            if unknown:  # an empty answer cannot change: inventory only ever arrives
                _keep_unknown_gpus(group.manifest, unknown)
            group.unknown_gpus = unknown
        if group.resume_at is None:
            result = self._ingestor.write_group(pairs, group.token, group.unknown_gpus)
        else:
            result = self._write_members(group)
        self.metrics.seconds.observe(time.perf_counter() - started)
        self.metrics.group_batches.observe(len(group.members))
        self.metrics.group_rows.observe(group.rows)
        # rows first: a scrape that sees the batches written sees their rows too
        self.metrics.record(result, _newest_sample(group.batches))
        self.metrics.batches.labels("written").inc(len(group.members))
        self._forget(group.manifest, group.members)
        self.groups_written += 1
        self.last_error = None

    # -- a group that fails while the warehouse answers -----------------------------------------
    def _split(self, group: Group, exc: Exception) -> bool:
        """After ``group``'s write failed: when the warehouse answers, a member's data may be at
        fault, so the group is to be written member by member from the step that failed (kept
        in its manifest, so a restart does the same); True when it was split now.

        The steps before the one that failed were written for every member under the group's
        token; each member then writes the rest under a token of its own. Splitting a group
        whose failure was the warehouse's (a missing table, memory) costs nothing but inserts.
        """
        if group.resume_at is not None or not isinstance(exc, GroupWriteError):
            return False
        if not self._warehouse_answers():
            return False
        _update_manifest(group.manifest, resume_at=exc.step)
        group.resume_at = exc.step
        log.warning(
            "group %s (%d batches) failed at %s while the warehouse answers: writing its "
            "batches one by one from there, to set aside any that cannot be written (%s)",
            group.manifest.name,
            len(group.members),
            exc.step,
            exc,
        )
        return True

    def _write_members(self, group: Group) -> IngestResult:
        """Write a split group member by member from ``group.resume_at``.

        A member that fails for its data (a value the driver or the engine cannot take) is set
        aside in ``rejected/`` with the error. One that fails otherwise while others of the
        group are written is retried with the group (the others are dropped as duplicates),
        and set aside once that has happened ``_FAILED_ALONE`` passes in a row: the failure is
        its own. When every member fails so, the failure is the warehouse's: the group is
        retried. A warehouse that stops answering stops the pass (the group is retried)."""
        result = IngestResult()
        faults: list[tuple[SpooledBatch, Exception]] = []
        written = 0
        for member, batch in list(zip(group.members, group.batches, strict=True)):
            try:
                result += self._ingestor.write_group(
                    [(member.batch_id, batch)],
                    f"{group.token}:{member.batch_id}",
                    group.unknown_gpus,
                    resume_at=group.resume_at,
                )
                written += 1
            except Exception as exc:
                if not self._warehouse_answers():
                    raise
                if getattr(exc, "bad_input", False):
                    self._reject(group, member, exc)
                else:
                    faults.append((member, exc))
        if faults and not written:
            raise faults[0][1]
        again: list[Exception] = []
        for member, fault in faults:
            group.failed_alone[member.batch_id] += 1
            if group.failed_alone[member.batch_id] >= _FAILED_ALONE:
                self._reject(group, member, fault)
            else:
                again.append(fault)
        if again:
            raise again[0]
        return result

    def _reject(self, group: Group, member: SpooledBatch, exc: Exception) -> None:
        """Set ``member`` aside, then take it out of ``group`` and of its manifest."""
        self._set_aside(member, f"writing it failed: {type(exc).__name__}: {exc}")
        at = group.members.index(member)
        del group.members[at], group.batches[at]
        _update_manifest(group.manifest, members=[[m.path.name, m.batch_id] for m in group.members])

    def _warehouse_answers(self) -> bool:
        try:
            self._ingestor.wh.rows("SELECT 1")
        except Exception:  # any failure to answer is the warehouse's
            return False
        return True

    def _forget(self, manifest: Path, members: list[SpooledBatch]) -> None:
        ids = [m.batch_id for m in members]
        self.accepted.add(ids)
        self.spool.forget(members)
        manifest.unlink(missing_ok=True)
        fsync_dir(self.groups_dir)
        with self._cond:
            self._pending.difference_update(ids)

    # -- state, for /healthz and /metrics -----------------------------------------------------
    def oldest_pending_s(self) -> float:
        """How long the oldest batch not yet written has waited, in seconds (0 when none;
        batches from before a restart count from the start)."""
        group = self._in_flight
        with self._cond:
            oldest = [self._queue[0].received] if self._queue else []
        if group is not None:
            oldest.append(group.received)
        if not oldest:
            return 0.0
        return max(0.0, time.monotonic() - max(min(oldest), self._started))

    def status(self) -> dict[str, Any]:
        alive = self._thread is not None and self._thread.is_alive()
        return {
            "spool_batches": self.spool.depth,
            "spool_bytes": self.spool.size_bytes,
            "groups_written": self.groups_written,
            "oldest_pending_s": round(self.oldest_pending_s(), 3),
            "flusher": "running" if alive else "stopped",
            "last_error": self.last_error,
            "rejected_batches": sum(1 for _ in (self.directory / REJECTED).glob("*.batch")),
        }


def _read_manifest(path: Path) -> tuple[str, dt.datetime, list[tuple[str, str]]]:
    body = json.loads(path.read_text(encoding="utf-8"))
    members = [(str(name), str(bid)) for name, bid in body["members"]]
    return str(body["token"]), dt.datetime.fromisoformat(body["now"]), members


def _manifest_unknown_gpus(path: Path) -> list[tuple[str, str]] | None:
    body = json.loads(path.read_text(encoding="utf-8"))
    if "unknown_gpus" not in body:
        return None
    return [(str(c), str(u)) for c, u in body["unknown_gpus"]]


def _keep_unknown_gpus(path: Path, unknown: list[tuple[str, str]]) -> None:
    """Add the GPUs a group's check found without inventory to its manifest (fsync'd)."""
    _update_manifest(path, unknown_gpus=[list(k) for k in unknown])


def _update_manifest(path: Path, **changes: Any) -> None:
    """Change fields of a group's manifest, durably."""
    body = json.loads(path.read_text(encoding="utf-8"))
    body.update(changes)
    write_durably(path, json.dumps(body).encode())


def _newest_sample(batches: list[Batch]) -> dt.datetime | None:
    newest: list[dt.datetime] = []
    for batch in batches:
        if isinstance(batch.samples, pl.DataFrame) and batch.samples.height:
            value = batch.samples["ts"].max()
            if isinstance(value, dt.datetime):
                newest.append(value)
    return max(newest) if newest else None


def _own(directory: Path) -> IO[str]:
    """Lock ``directory`` for this process (released when it exits, even by SIGKILL)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / "lock", "a+", encoding="utf-8")  # noqa: SIM115 - held open
    except OSError as exc:
        raise CoalesceError(
            f"cannot use {directory} as the ingest spool: {exc.strerror}; "
            "choose a writable server.spool_dir"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise CoalesceError(
            f"the ingest spool {directory} is in use by another gpuledger server (PID "
            f"{holder}): one process owns a spool; stop it, or give this one another "
            "server.spool_dir"
        ) from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle
