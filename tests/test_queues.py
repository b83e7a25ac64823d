"""Wait times, queue length, outcomes, reasons and lost GPU-hours on hand-computed jobs.

Window [T0, T0+4h), T0 = 2026-03-02 08:00 UTC; times below are offsets from T0 in minutes.

    job   tenant     queue     model GPUs  att  queued  started  ended  how            wait (s)
    a1    ml/vision  vision-q  H100  2     0    0       10       120    finished       600
    a2    ml/vision  vision-q  H100  1     0    5       25       60     failed OOM     1200
    a3    ml/vision  vision-q  H100  1     0    30      90       120    preempted      3600
    a3    ml/vision  vision-q  H100  1     1    120     180      -      (running)      3600
    a4    ml/vision  vision-q  H100  1     0    60      -        -      (waiting)      -
    a5    ml/vision  vision-q  H100  1     0    120     150      180    failed Xid 79  1800
    b1    prod/chat  chat-q    L40S  0.5   0    -60     20       -      (running)      4800
    b2    prod/chat  chat-q    L40S  1     0    60      -        90     cancelled      -
    b3    prod/chat  chat-q    L40S  1     0    120     120      180    evicted        0
    b4    prod/chat  chat-q    L40S  1     0    -180    -120     30     failed OOM     (before)
    c1    ml/nlp     nlp-q     H100  4     0    0       60       90     preempted      3600
    c1    ml/nlp     nlp-q     H100  4     1    (90)    120      180    finished       1800
    (c1's source does not resubmit: attempt 1 re-enters the queue when attempt 0 is preempted)

Wait percentiles (linear interpolation, R7 / numpy's default):
    vision [600, 1200, 1800, 3600, 3600]: p50 1800, p90 3600, p99 3600, mean 2160
    chat   [0, 4800]:                     p50 2400, p90 4320, p99 4752, mean 2400
    nlp    [1800, 3600]:                  p50 2700, p90 3420, p99 3582, mean 2700
Queue length (queued <= t < left):
    T0:    a1, b1, c1/0            3 attempts, 2 + 0.5 + 4 = 6.5 GPUs
    T0+1h: a3/0, a4, b2            3, 3 GPUs      (c1/0 left at T0+1h)
    T0+2h: a3/1, a4, a5            3, 3 GPUs      (b3 waited 0 s; c1/1 left at T0+2h)
    T0+3h: a4                      1, 1 GPU
Outcomes of attempts that ran and ended in the window:
    vision: 4 ended (a1 finished, a2 + a5 failed, a3/0 preempted): failure 1/2, preemption 1/4
    chat:   2 ended (b3 evicted, b4 failed): failure 1/2, preemption 1/2; b2 cancelled waiting
    nlp:    2 ended (c1/0 preempted, c1/1 finished): failure 0, preemption 1/2
Lost GPU-hours (whole attempts that ended failed/preempted/evicted in the window):
    vision: failed a2 35 min + a5 30 min = 1.08333, preempted a3/0 30 min = 0.5  -> 1.58333
    chat:   failed b4 1 GPU x 150 min = 2.5, evicted b3 60 min = 1.0             -> 3.5
    nlp:    preempted c1/0 4 GPUs x 30 min = 2.0                                 -> 2.0
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from collector.records import JobEvent
from warehouse.analytics import queues as qu
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import IdleRule
from warehouse.ledger.tail import LiveTail, kept_attempts

T0 = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.UTC)
END = T0 + dt.timedelta(hours=4)
H100, L40S = "H100", "L40S"


def m(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


JOBS = {  # job: (tenant, model, GPUs, share)
    "a1": ("ml/vision", H100, 2, 1.0),
    "a2": ("ml/vision", H100, 1, 1.0),
    "a3": ("ml/vision", H100, 1, 1.0),
    "a4": ("ml/vision", H100, 1, 1.0),
    "a5": ("ml/vision", H100, 1, 1.0),
    "b1": ("prod/chat", L40S, 1, 0.5),
    "b2": ("prod/chat", L40S, 1, 1.0),
    "b3": ("prod/chat", L40S, 1, 1.0),
    "b4": ("prod/chat", L40S, 1, 1.0),
    "c1": ("ml/nlp", H100, 4, 1.0),
}
TIMELINE = [  # (job, attempt, event, minute, reason)
    ("a1", 0, "submitted", 0, ""),
    ("a1", 0, "started", 10, ""),
    ("a1", 0, "finished", 120, ""),
    ("a2", 0, "submitted", 5, ""),
    ("a2", 0, "started", 25, ""),
    ("a2", 0, "failed", 60, "OOMKilled"),
    ("a3", 0, "submitted", 30, ""),
    ("a3", 0, "started", 90, ""),
    ("a3", 0, "preempted", 120, "preempted by c9-train-000042 (priority class high)"),
    ("a3", 1, "submitted", 120, ""),
    ("a3", 1, "started", 180, ""),
    ("a4", 0, "submitted", 60, ""),
    ("a5", 0, "submitted", 120, ""),
    ("a5", 0, "started", 150, ""),
    ("a5", 0, "failed", 180, "Xid 79: GPU has fallen off the bus"),
    ("b1", 0, "submitted", -60, ""),
    ("b1", 0, "started", 20, ""),
    ("b2", 0, "submitted", 60, ""),
    ("b2", 0, "cancelled", 90, "cancelled by user"),
    ("b3", 0, "submitted", 120, ""),
    ("b3", 0, "started", 120, ""),
    ("b3", 0, "evicted", 180, "Evicted: node n7 drained for retirement"),
    ("b4", 0, "submitted", -180, ""),
    ("b4", 0, "started", -120, ""),
    ("b4", 0, "failed", 30, "OOMKilled"),
    ("c1", 0, "submitted", 0, ""),
    ("c1", 0, "started", 60, ""),
    ("c1", 0, "preempted", 90, "preempted by a9 (priority class high)"),
    ("c1", 1, "started", 120, ""),
    ("c1", 1, "finished", 180, ""),
]


def _event(job: str, attempt: int, event: str, minute: float, reason: str) -> JobEvent:
    tenant, model, gpus, share = JOBS[job]
    org, project = tenant.split("/")
    placed = event != "submitted" and job != "b2"
    starts = [mm for j, a, e, mm, _ in TIMELINE if j == job and a == attempt and e == "started"]
    return JobEvent(
        m(minute),
        "c1",
        job,
        event,
        attempt=attempt,
        tenant=tenant,
        org=org,
        project=project,
        queue=f"{project}-q",
        pool=model.lower(),
        gpu_model=model,
        gpus_requested=gpus * share,
        gpu_fraction=share,
        reason=reason,
        gpu_uuids=tuple(f"{job}-gpu{i}" for i in range(gpus)) if placed else (),
        started_at=m(starts[0]) if starts and event not in ("submitted", "started") else None,
    )


@pytest.fixture
def jobs(wh: Warehouse) -> Warehouse:
    Ingestor(wh, 35, now=lambda: T0 + dt.timedelta(hours=5)).write_job_events(
        [_event(*row) for row in TIMELINE]
    )
    return wh


def _by_tenant(frame: pl.DataFrame, col: str) -> dict[str, float]:
    return {r["tenant"]: round(r[col], 5) for r in frame.iter_rows(named=True)}


def test_attempt_rows_know_when_each_attempt_waited(jobs: Warehouse) -> None:
    rows = qu.attempts(jobs, "c1", T0, END)
    got = {(r["job_id"], r["attempt"]): r for r in rows.iter_rows(named=True)}
    assert got[("c1", 1)]["queued_ts"] == m(90)  # re-entered the queue when preempted
    assert got[("a4", 0)]["left_queue_ts"] is None  # still waiting
    assert got[("b2", 0)]["left_queue_ts"] == m(90) and got[("b2", 0)]["started_ts"] is None
    assert round(got[("a1", 0)]["gpu_hours"], 5) == round(2 * 110 / 60, 5)
    assert got[("a1", 0)]["tenant"] == "ml/vision" and got[("a1", 0)]["queue"] == "vision-q"
    # an attempt still running at the window's end holds GPU-hours up to the end only
    assert round(got[("a3", 1)]["gpu_hours"], 5) == 1.0


def test_wait_percentiles_per_tenant_queue_and_model(jobs: Warehouse) -> None:
    got = qu.wait_times(jobs, "c1", T0, END)
    rows = {(r["tenant"], r["queue"], r["gpu_model"]): r for r in got.iter_rows(named=True)}
    vision = rows[("ml/vision", "vision-q", H100)]
    assert (
        vision["attempts"],
        vision["p50_s"],
        vision["p90_s"],
        vision["p99_s"],
        vision["mean_s"],
        vision["max_s"],
    ) == (5, 1800, 3600, 3600, 2160, 3600)
    chat = rows[("prod/chat", "chat-q", L40S)]
    assert chat["attempts"] == 2 and (chat["p50_s"], chat["p99_s"]) == (2400, 4752)
    assert chat["p90_s"] == pytest.approx(4320)
    nlp = rows[("ml/nlp", "nlp-q", H100)]
    assert (nlp["p50_s"], nlp["p90_s"]) == pytest.approx((2700, 3420))
    assert all(v >= 0 for v in got["p50_s"].to_list() + got["max_s"].to_list())
    overall = qu.wait_times(jobs, "c1", T0, END, by=())
    assert overall["attempts"][0] == 9 and overall["unknown_wait"][0] == 0
    with pytest.raises(qu.QueueError, match="cannot group by"):
        qu.wait_times(jobs, "c1", T0, END, by=("colour",))


def test_queue_length_over_time(jobs: Warehouse) -> None:
    got = qu.queue_length(jobs, "c1", T0, END)
    assert got["ts"].to_list() == [m(0), m(60), m(120), m(180)]
    assert got["waiting_attempts"].to_list() == [3, 3, 3, 1]
    assert got["waiting_gpus"].to_list() == [6.5, 3.0, 3.0, 1.0]
    per_tenant = qu.queue_length(jobs, "c1", T0, END, by=("tenant",))
    at_t0 = per_tenant.filter(pl.col("ts") == T0)
    assert _by_tenant(at_t0, "waiting_gpus") == {"ml/nlp": 4.0, "ml/vision": 2.0, "prod/chat": 0.5}
    assert per_tenant.height == 4 * 3  # every instant for every tenant, zeros included


def test_outcomes_reasons_and_lost_hours(jobs: Warehouse) -> None:
    rates, reasons, lost = qu.failures(jobs, "c1", T0, END)
    r = {row["tenant"]: row for row in rates.iter_rows(named=True)}
    assert (r["ml/vision"]["ended"], r["ml/vision"]["failed"], r["ml/vision"]["preempted"]) == (
        4,
        2,
        1,
    )
    assert (r["ml/vision"]["failure_rate"], r["ml/vision"]["preemption_rate"]) == (0.5, 0.25)
    assert (r["prod/chat"]["failure_rate"], r["prod/chat"]["preemption_rate"]) == (0.5, 0.5)
    assert (r["prod/chat"]["cancelled_waiting"], r["prod/chat"]["cancelled"]) == (1, 0)
    assert (r["ml/nlp"]["failure_rate"], r["ml/nlp"]["preemption_rate"]) == (0.0, 0.5)
    assert _by_tenant(lost, "lost_gpu_hours") == {
        "prod/chat": 3.5,
        "ml/nlp": 2.0,
        "ml/vision": 1.58333,
    }
    assert lost["tenant"].to_list() == ["prod/chat", "ml/nlp", "ml/vision"]  # largest first
    assert _by_tenant(lost, "failed_gpu_hours")["ml/vision"] == 1.08333
    assert _by_tenant(lost, "evicted_gpu_hours")["prod/chat"] == 1.0
    top = {
        (x["tenant"], x["end_event"], x["rank"]): (x["reason"], x["attempts"], x["share"])
        for x in reasons.iter_rows(named=True)
    }
    assert top[("ml/vision", "failed", 1)] == ("OOMKilled", 1, 0.5)  # a tie: by text
    assert top[("ml/vision", "failed", 2)] == ("Xid 79: GPU has fallen off the bus", 1, 0.5)
    assert top[("ml/nlp", "preempted", 1)][0] == "preempted by <job> (priority class high)"
    assert top[("prod/chat", "evicted", 1)][0] == "Evicted: node <node> drained for retirement"
    _, only_first, _ = qu.failures(jobs, "c1", T0, END, top=1)
    assert only_first["rank"].max() == 1


def test_pure_functions_on_empty_input() -> None:
    empty = pl.DataFrame(
        schema={
            "tenant": pl.String,
            "queued_ts": pl.Datetime("ms", "UTC"),
            "left_queue_ts": pl.Datetime("ms", "UTC"),
            "gpus_requested": pl.Float64,
        }
    )
    series = qu.queue_length_series(empty, [T0, m(60)])
    assert series["waiting_attempts"].to_list() == [0, 0]
    assert qu.queue_length_series(empty, [T0], by=("tenant",)).height == 0


def test_bad_windows_are_refused(wh: Warehouse) -> None:
    with pytest.raises(qu.QueueError, match="must be after start"):
        qu.wait_times(wh, "c1", END, T0)
    with pytest.raises(qu.QueueError, match="timezone-aware"):
        qu.queue_length(wh, "c1", T0.replace(tzinfo=None), END)


def test_a_kept_tail_holds_the_attempts_of_a_range_up_to_today(jobs: Warehouse) -> None:
    """The server's live tail keeps every attempt of a window ending at the next midnight: a
    range up to today, from any start, as of its instant, gets the rows asking gives."""
    now = T0 + dt.timedelta(hours=5)
    midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
    kept = LiveTail(jobs, IdleRule(0.05, 1800), every_s=60, clock=lambda: now)
    kept.refresh()
    with kept.offered():
        for start in (T0 - dt.timedelta(days=3), T0, m(60), m(150), m(180)):
            got = kept_attempts(jobs, "c1", start, midnight, now=now)
            assert got is not None
            assert_frame_equal(got, qu.attempts(jobs, "c1", start, midnight))
        assert kept_attempts(jobs, "c1", T0, END, now=now) is None  # another end
        assert kept_attempts(jobs, "c1", T0, midnight, now=now + dt.timedelta(seconds=1)) is None
    assert kept.served == 5
