"""The waiting queue as of an instant is read in full for the jobs with an attempt open then
alone (``queues.attempts_waiting``: ``sql/queue_open_jobs.sql``, then ``sql/queue_attempts.sql``
for those jobs),
not for every job of the history: the same attempts, and so the same alert findings, as when
every job was read (``queues.attempts``, the reference), however long the history."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator

import polars as pl
import pytest
from alerts_fixture import BEFORE, Cluster, at
from conftest import fresh_database, recent

from collector.records import JobEvent
from gpuledger.demo import DemoRun
from gpuledger.settings import AlertSettings, load_settings
from reports.alerts.evaluate import evaluate
from reports.alerts.rules import build_rules
from warehouse.analytics import queues
from warehouse.analytics.explain import waiting_at
from warehouse.client import Warehouse
from warehouse.ledger import load_price_book

DAY = dt.timedelta(days=1)


def _reference(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """What ``attempts_waiting`` stands in for: the attempts of [at, at + 1 ms) of every job."""
    return queues.attempts(wh, cluster, at, at + dt.timedelta(milliseconds=1))


def _waiting_by_reference(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    rows = _reference(wh, cluster, at)
    return rows.filter(
        pl.col("queued_ts").is_not_null()
        & (pl.col("queued_ts") <= at)
        & (pl.col("left_queue_ts").is_null() | (pl.col("left_queue_ts") > at))
    )


def _same_waiting(wh: Warehouse, cluster: str, when: dt.datetime) -> list[tuple[str, int]]:
    got, want = waiting_at(wh, cluster, when), _waiting_by_reference(wh, cluster, when)
    assert got.equals(want), f"at {when}:\n{got}\n{want}"
    return list(got.select("job_id", "attempt").iter_rows())


# A hand-made history on GPU-a/GPU-b (H100, pool p1), T + h:mm:
#   old-done    submitted T-20d, started, finished T-19d             never waits after T-20d+
#   old-failed  submitted T-18d, started, failed T-17d, no retry
#   requeued    started T-10d, preempted at T-9d and resubmitted as attempt 1 at that same
#               instant (the simulator's way), still waiting            waits from T-9d
#   ancient     submitted T-15d, never started                          waits from T-15d
#   cancelled   submitted T-5d, cancelled while queued at T-4d
#   later       submitted T+0:10, started T+2:00 (after the instants asked about)
#   retried     failed at T+0:30 and resubmitted, attempt 1 started T+0:40
def _event(job: str, event: str, ts: dt.datetime, attempt: int = 0, **kw: object) -> JobEvent:
    return JobEvent(
        ts, "c1", job, event, attempt, tenant="ml/a", org="ml", project="a", pool="p1",
        gpu_model="H100", gpus_requested=1.0, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.fixture
def history(wh: Warehouse) -> Cluster:
    c = Cluster(wh)
    c.gpus("GPU-a", "GPU-b", ts=BEFORE - 30 * DAY)
    gpu = {"node": "n1", "gpu_uuids": ("GPU-a",)}
    t = at(0)
    events = [
        _event("old-done", "submitted", t - 20 * DAY),
        _event("old-done", "started", t - 20 * DAY + dt.timedelta(hours=1), **gpu),
        _event("old-done", "finished", t - 19 * DAY, started_at=t - 20 * DAY, **gpu),
        _event("old-failed", "submitted", t - 18 * DAY),
        _event("old-failed", "started", t - 18 * DAY, **gpu),
        _event("old-failed", "failed", t - 17 * DAY, started_at=t - 18 * DAY, **gpu),
        _event("requeued", "submitted", t - 10 * DAY),
        _event("requeued", "started", t - 10 * DAY, **gpu),
        _event("requeued", "preempted", t - 9 * DAY, started_at=t - 10 * DAY, **gpu),
        _event("requeued", "submitted", t - 9 * DAY, attempt=1),
        _event("ancient", "submitted", t - 15 * DAY),
        _event("cancelled", "submitted", t - 5 * DAY),
        _event("cancelled", "cancelled", t - 4 * DAY),
        _event("later", "submitted", at(0, 10)),
        _event("later", "started", at(2), **gpu),
        _event("retried", "submitted", at(0)),
        _event("retried", "started", at(0), **gpu),
        _event("retried", "failed", at(0, 30), started_at=at(0), **gpu),
        _event("retried", "submitted", at(0, 30), attempt=1),
        _event("retried", "started", at(0, 40), attempt=1, **gpu),
    ]
    assert c.ing.write_job_events(events).quarantined_total == 0
    return c


@pytest.mark.parametrize(
    ("hours", "truth"),
    [
        (-24 * 16, []),  # before `ancient`: old-done, old-failed are no longer waiting
        (-24 * 9.5, [("ancient", 0)]),
        (-24 * 4.5, [("ancient", 0), ("requeued", 1), ("cancelled", 0)]),
        (0.25, [("ancient", 0), ("requeued", 1), ("later", 0)]),
        (0.6, [("ancient", 0), ("requeued", 1), ("later", 0), ("retried", 1)]),
        (1.0, [("ancient", 0), ("requeued", 1), ("later", 0)]),
        (3.0, [("ancient", 0), ("requeued", 1)]),
    ],
)
def test_the_waiting_attempts_are_those_every_event_gives(
    history: Cluster, hours: float, truth: list[tuple[str, int]]
) -> None:
    got = _same_waiting(history.wh, "c1", at(hours))
    assert sorted(got) == sorted(truth)


def test_an_instant_with_events_after_it_reads_as_of_then(history: Cluster) -> None:
    # `later` has started by T+2:00; as of T+1:59:59.999 it still waits
    when = at(2) - dt.timedelta(milliseconds=1)
    assert ("later", 0) in _same_waiting(history.wh, "c1", when)
    assert ("later", 0) not in _same_waiting(history.wh, "c1", at(2))


# -- a simulated cluster with days of history: the findings do not change -------------------
NOW = recent(dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC))


@pytest.fixture(scope="module")
def simulated(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        settings = load_settings(
            env={},
            overrides={
                "simulator": {"days": 4, "gpus": 16, "seed": 5, "cluster": "sim", "interval_s": 60},
                "warehouse": {"database": wh.database},
            },
        )
        DemoRun.start(wh, settings, now=NOW)
        yield wh


def test_the_queue_is_the_same_at_every_hour_of_a_long_history(simulated: Warehouse) -> None:
    waited = 0
    for hours in range(2, 4 * 24, 5):
        waited += len(_same_waiting(simulated, "sim", NOW - 4 * DAY + dt.timedelta(hours=hours)))
    assert waited > 0  # the simulated jobs do wait


def test_the_findings_are_those_of_reading_every_event(
    simulated: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = dataclasses.asdict(dataclasses.replace(AlertSettings(), waiting_for_s=300))
    rules, prices = build_rules(values), load_price_book(simulated)
    instants = [NOW - dt.timedelta(hours=h, seconds=1) for h in (0, 7, 30)]
    bounded = [evaluate(simulated, rules, t, prices=prices) for t in instants]
    monkeypatch.setattr(queues, "attempts_waiting", _reference)
    every = [evaluate(simulated, rules, t, prices=prices) for t in instants]
    for one, other in zip(bounded, every, strict=True):
        assert one.failed == other.failed == {}
        assert one.findings == other.findings
    fired = {f.rule for ev in bounded for f in ev.findings}
    assert {"waiting", "idle"} <= fired, fired
