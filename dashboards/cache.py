"""The pages' answers, kept a short while and refreshed ahead of their age.

A manager's morning look at a 1,024-GPU fleet asks the same few questions (the last days, the
whole cluster or one tenant) of ledgers that take seconds to compute from rollups and sealed
days. :class:`AnswerCache` keeps each answer for ``ttl_s`` seconds (a page's figures are at most
that old, as with Grafana's query cache), computes one answer once however many callbacks ask
for it at the same moment, and :meth:`AnswerCache.refresh` recomputes, in the background, the
answers someone asked for in the last ``keep_s`` seconds before they age out, so that the next
load finds them ready.

Entries are keyed by the answer, the shared filters and the tenant the viewer is limited to
(never the viewer's name): a tenant viewer's answers are computed for its scope and found only
under it. Only the pages use it; the JSON API and the downloads compute afresh each time.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long an answer nobody asked for again is still refreshed, seconds: two of the default
#: 300 s lifetimes, so that one look at a page costs about three computations, not more.
KEEP_S = 600.0
#: An answer is recomputed in the background once it is this share of its lifetime old: late
#: enough to spare work, early enough that a pass every eighth of the lifetime catches it.
REFRESH_AT = 0.75
#: The most answers kept; the least recently used goes first.
MAX_ENTRIES = 256


@dataclasses.dataclass
class _Entry:
    compute: Callable[[], Any]
    value: Any = None
    computed_at: float = -1.0  # monotonic; < 0: not computed yet
    asked_at: float = 0.0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class AnswerCache:
    """Answers by key, each kept ``ttl_s`` seconds (see the module's docstring)."""

    def __init__(
        self,
        ttl_s: float,
        *,
        keep_s: float = KEEP_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"an answer cache keeps answers a positive time, not {ttl_s} s")
        self.ttl_s, self.keep_s, self.max_entries, self.clock = ttl_s, keep_s, max_entries, clock
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # guards the dict; each entry's own lock its computation
        self.hits = self.misses = self.refreshed = 0

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The answer under ``key``: the kept one while fresh, else ``compute()`` (once, however
        many threads ask together; an exception is raised to each and nothing is kept)."""
        now = self.clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(compute)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            self._entries.move_to_end(key)
            entry.asked_at = now
        if self._fresh(entry, now):
            self.hits += 1
            return entry.value  # type: ignore[no-any-return]
        with entry.lock:
            if not self._fresh(entry, self.clock()):  # another thread may have just done it
                self.misses += 1
                try:
                    self._compute(entry)
                except BaseException:
                    self._forget(key, entry)  # a refusal or a failure is never kept
                    raise
            return entry.value  # type: ignore[no-any-return]

    def refresh(self, budget_s: float | None = None) -> int:
        """Recompute the answers asked for within ``keep_s`` that are :data:`REFRESH_AT` of
        their time old, the most recently asked first, until ``budget_s`` seconds are spent;
        forget the others. Returns how many were recomputed. Each failure is logged and its entry
        dropped, so that the next asker computes it and sees the error."""
        now = self.clock()
        with self._lock:
            for key in [k for k, e in self._entries.items() if now - e.asked_at > self.keep_s]:
                del self._entries[key]
            due = sorted(
                (
                    (k, e)
                    for k, e in self._entries.items()
                    if e.computed_at < 0 or now - e.computed_at > self.ttl_s * REFRESH_AT
                ),
                key=lambda item: -item[1].asked_at,
            )
        done = 0
        for key, entry in due:
            if budget_s is not None and self.clock() - now > budget_s:
                break
            if not entry.lock.acquire(blocking=False):
                continue  # a page is computing it right now
            try:
                self._compute(entry)
                done += 1
            except Exception:
                log.warning("refreshing a dashboard answer failed: %r", key, exc_info=True)
                self._forget(key, entry)
            finally:
                entry.lock.release()
        self.refreshed += done
        return done

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _forget(self, key: Hashable, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]

    def _fresh(self, entry: _Entry, now: float) -> bool:
        return entry.computed_at >= 0 and now - entry.computed_at < self.ttl_s

    def _compute(self, entry: _Entry) -> None:
        started = self.clock()  # an answer is as old as the data it read
        entry.value = entry.compute()
        entry.computed_at = started


#: The share of one core the background refresh may take: it pauses three times as long as the
#: process's CPU time in its last pass (the engine's threads included, so a query spread over
#: every core counts in full), so that a large fleet's answers never crowd out the pages and
#: ingest.
REFRESH_DUTY = 0.25


def keep_refreshed(cache: AnswerCache, stop: threading.Event) -> threading.Thread:
    """A daemon thread that refreshes ``cache`` (:meth:`AnswerCache.refresh`) until ``stop``
    is set, working at most :data:`REFRESH_DUTY` of the time; an answer it has no time for
    ages out, and the next page load computes it."""
    every = cache.ttl_s / 8

    def loop() -> None:
        pause = every
        while not stop.wait(pause):
            started = time.process_time()
            cache.refresh(budget_s=every)
            spent = time.process_time() - started  # an upper bound: other threads' work too
            pause = max(every, spent * (1 - REFRESH_DUTY) / REFRESH_DUTY)

    thread = threading.Thread(target=loop, name="dashboard-answers", daemon=True)
    thread.start()
    return thread
