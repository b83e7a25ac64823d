"""The pages' answer cache: kept for its time and no longer, computed once for concurrent
askers, refreshed ahead for what was asked lately, never keeping a refusal, and keyed by the
tenant a viewer is limited to, so that a tenant never reads a manager's kept answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import moment_fixture as m
import pytest
from conftest import fresh_database
from dash_helpers import OVERVIEW, page

from dashboards.app import create_app
from dashboards.cache import AnswerCache
from dashboards.context import Viewer
from warehouse.client import Warehouse


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Counter:
    """A compute that counts its calls and answers the count (or raises, when told to)."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail: Exception | None = None

    def __call__(self) -> int:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return self.calls


def test_an_answer_is_kept_for_its_time_and_no_longer() -> None:
    clock, compute = Clock(), Counter()
    cache = AnswerCache(60, clock=clock)
    assert cache.get("k", compute) == 1
    clock.t += 59
    assert cache.get("k", compute) == 1 and compute.calls == 1
    clock.t += 2
    assert cache.get("k", compute) == 2
    assert cache.get("other", compute) == 3  # another key, another answer
    assert (cache.hits, cache.misses) == (1, 3)


def test_askers_at_the_same_moment_get_one_computation() -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        started.set()
        release.wait(10)
        return 42

    cache = AnswerCache(60)
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("k", slow))) for _ in range(4)]
    threads[0].start()
    assert started.wait(10)
    for t in threads[1:]:
        t.start()
    time.sleep(0.2)  # the others are waiting on the first one's computation
    release.set()
    for t in threads:
        t.join(10)
    assert got == [42] * 4 and len(calls) == 1


def test_a_failure_is_never_kept() -> None:
    compute = Counter()
    compute.fail = PermissionError("not yours")
    cache = AnswerCache(60)
    with pytest.raises(PermissionError):
        cache.get("k", compute)
    assert len(cache) == 0
    compute.fail = None
    assert cache.get("k", compute) == 2  # computed again, not an empty kept answer


def test_refresh_recomputes_what_was_asked_lately_and_forgets_the_rest() -> None:
    clock, a, b = Clock(), Counter(), Counter()
    cache = AnswerCache(60, keep_s=300, clock=clock)
    cache.get("a", a)
    cache.get("b", b)
    clock.t += 20
    assert cache.refresh() == 0  # both younger than three quarters of their time
    clock.t += 30
    cache.get("a", a)  # asked again: kept
    assert cache.refresh() == 2 and (a.calls, b.calls) == (2, 2)
    clock.t += 290  # b was last asked 340 s ago, a 290 s ago
    assert cache.refresh() == 1 and len(cache) == 1
    assert cache.get("a", a) == 3 and a.calls == 3  # the refreshed answer, no computation
    a.fail = RuntimeError("warehouse gone")
    clock.t += 50
    assert cache.refresh() == 0 and len(cache) == 0  # a failed refresh is dropped, not kept


def test_refresh_stops_when_its_time_is_spent_most_recently_asked_first() -> None:
    clock = Clock()
    cache = AnswerCache(60, clock=clock)
    order: list[str] = []

    def slow(name: str) -> Any:
        def compute() -> str:
            order.append(name)
            clock.t += 10  # each answer takes 10 s
            return name

        return compute

    for name in ("a", "b", "c"):
        cache.get(name, slow(name))
        clock.t += 1
    order.clear()
    clock.t += 100
    assert cache.refresh(budget_s=15) == 2 and order == ["c", "b"]
    assert cache.refresh(budget_s=15) == 1 and order == ["c", "b", "a"]


def test_the_least_recently_asked_goes_first() -> None:
    cache = AnswerCache(60, max_entries=2)
    for key in ("a", "b"):
        cache.get(key, Counter())
    cache.get("a", Counter())  # a asked again: b is now the oldest
    cache.get("c", Counter())
    again = Counter()
    assert cache.get("a", again) == 1 and again.calls == 0
    assert cache.get("b", again) == 1 and again.calls == 1  # b was dropped


@pytest.fixture(scope="module")
def moment(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield m.write(wh)


def test_a_tenant_never_reads_a_managers_kept_answer(moment: Warehouse) -> None:
    asking = [Viewer("boss", "manager")]
    cache = AnswerCache(600)
    app = create_app(moment, viewer=lambda: asking[0], now=lambda: m.NOW, answers=cache)
    client = app.server.test_client()
    state = f"?from={m.DAY}&to={m.DAY}"

    def load() -> Any:
        return page(client, OVERVIEW, state)

    manager = load()
    assert "GPUs in inventory now" in json.dumps(manager["overview-kpis"])
    computed = cache.misses
    assert load() == manager and cache.misses == computed  # the second load is kept answers
    asking[0] = Viewer("lead", "tenant:team-x")
    tenant = json.dumps(load())
    assert "GPUs in inventory now" not in tenant and "team-y" not in tenant
    assert cache.misses > computed  # the tenant's scope is answered anew
    computed = cache.misses
    asking[0] = Viewer("other lead", "tenant:team-x")
    assert json.dumps(load()) == tenant and cache.misses == computed  # one answer per scope
    # a tenant asking for another tenant's figures is refused, and nothing is kept for it
    kept = len(cache)
    refused = page(client, OVERVIEW, state + "&tenant=team-y")
    assert "may see the figures of tenant team-x alone" in json.dumps(refused)
    assert len(cache) == kept
