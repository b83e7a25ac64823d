"""A warehouse per thread (what serve gives the pages): each thread queries through a client of
its own, so one thread's slow query does not hold up another's, as it does through one client."""

from __future__ import annotations

import threading
from typing import Any

from warehouse.client import Warehouse

#: A query that takes about 2 s in the engine (4 rows, half a second each).
SLOW = "SELECT sum(sleepEachRow(0.5)) FROM numbers(4) SETTINGS max_block_size = 1"


def _quick_one_during_a_slow_one(slow_wh: Warehouse, quick_wh: Warehouse) -> bool:
    """Whether a quick query sent while another thread's slow one runs comes back first."""
    started, finished = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        slow_wh.rows(SLOW)
        finished.set()

    thread = threading.Thread(target=slow)
    thread.start()
    started.wait()
    # the slow query is in the engine well before its 2 s are up
    finished.wait(0.5)
    quick_wh.rows("SELECT 1")
    first = not finished.is_set()
    thread.join()
    return first


def test_each_thread_queries_through_a_client_of_its_own(wh: Warehouse) -> None:
    pages = wh.per_thread()
    assert pages.client is wh.client  # the maker's thread keeps the client it came with
    seen: list[Any] = []

    def ask() -> None:
        assert pages.rows("SELECT 1") == [(1,)]
        seen.append(pages.client)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in [wh.client, *seen]}) == 4
    # through one client, the quick query waits for the slow one; through two, it does not
    assert not _quick_one_during_a_slow_one(wh, wh)
    assert _quick_one_during_a_slow_one(pages, pages)
    pages.close()
    assert wh.rows("SELECT 1") == [(1,)]  # the maker's client is not closed with it
