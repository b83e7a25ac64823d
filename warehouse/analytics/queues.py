"""Waiting and failure: wait times, queue length, preemption and failure rates, lost GPU-hours.

ClickHouse folds job events into one row per job attempt (``sql/queue_attempts.sql``); small
pure functions turn those rows into the answers. Definitions:

- An attempt waits from ``queued_ts`` (its ``submitted`` event; for a source that does not
  resubmit, the end of the previous attempt when that was preempted, evicted or failed) until
  ``left_queue_ts`` (its start, or a terminal event before any start: a cancel while queued).
- Wait time: ``started_ts - queued_ts`` of the attempts that started in [start, end). Attempts
  with no known queue entry, or whose events contradict each other (start before queue
  entry), have no wait time; they are counted in ``unknown_wait``.
- Queue length at t: attempts with ``queued_ts <= t < left_queue_ts`` (or still waiting).
- Outcomes: the attempts that started and then ended within [start, end), by how they ended;
  ``failure_rate = failed / ended``, ``preemption_rate = (preempted + evicted) / ended``.
  ``cancelled_waiting`` counts attempts cancelled before they started.
- Lost GPU-hours: the allocated GPU-hours of the attempts that ended failed, preempted or
  evicted within [start, end) — the whole attempt, from its start: utilisation alone hides
  them (the GPUs were busy, the work was thrown away). An upper bound on the work lost, since
  a checkpoint may have saved part of it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from collector.records import TERMINAL_EVENTS
from gpuledger_errors import InputError
from warehouse import queries
from warehouse.analytics.tenancy import in_tenant
from warehouse.client import Warehouse

GROUPS = ("tenant", "queue", "pool", "gpu_model")
LOST_EVENTS = ("failed", "preempted", "evicted")
ENDINGS = ("finished", "failed", "preempted", "evicted", "cancelled")
_HOUR = dt.timedelta(hours=1)


class QueueError(InputError):
    """A queue or failure request that cannot be answered as asked (bad window, grouping)."""


def _utc(ts: dt.datetime, name: str) -> dt.datetime:
    if not isinstance(ts, dt.datetime) or ts.tzinfo is None:
        raise QueueError(f"{name} {ts!r} must be a timezone-aware datetime (UTC)")
    return ts.astimezone(dt.UTC)


def _window(start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    start, end = _utc(start, "start"), _utc(end, "end")
    if end <= start:
        raise QueueError(f"end ({end.isoformat()}) must be after start ({start.isoformat()})")
    return start, end


def _by(by: Sequence[str]) -> list[str]:
    unknown = [b for b in by if b not in GROUPS]
    if unknown:
        raise QueueError(f"cannot group by {unknown}: choose from {', '.join(GROUPS)}")
    return list(by)


def attempts(wh: Warehouse, cluster: str, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """One row per job attempt that waited, started or ended in [start, end) (see the SQL).

    Columns: job_id, attempt, tenant, queue, pool, gpu_model, priority, gpus_requested,
    gpu_fraction, queued_ts, started_ts, left_queue_ts, ended_ts, end_event, end_reason,
    gpu_hours.
    """
    start, end = _window(start, end)
    return queries.run(
        wh,
        "queue_attempts",
        cluster=cluster,
        start=start,
        end=end,
        terminal=sorted(TERMINAL_EVENTS),
        all_jobs=True,
        jobs=[],
    )


def attempts_in(rows: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """The rows of :func:`attempts` of [start, end) among those of a window with the same
    ``end`` that starts earlier: every other column depends on ``end`` alone (the condition
    is the SQL's, nulls alike)."""
    start, end = _window(start, end)
    queued, left = pl.col("queued_ts"), pl.col("left_queue_ts")
    waited = (queued < end) & (left.is_null() | (left >= start))
    return rows.filter(waited | (pl.col("started_ts") >= start) | (pl.col("ended_ts") >= start))


#: The events after which an attempt no longer waits.
LEAVING_EVENTS = frozenset({"started"} | TERMINAL_EVENTS)


def attempts_waiting(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """:func:`attempts` of [at, at + 1 ms) for the jobs alone with an attempt still open then,
    among which are all the attempts waiting at ``at``: a narrow pass over the events finds those
    jobs (``sql/queue_open_jobs.sql``), and theirs alone are read in full
    (``sql/queue_attempts.sql`` for those jobs), rather than every job of the history."""
    start, end = _window(at, at + dt.timedelta(milliseconds=1))
    where = {"cluster": cluster, "end": end}
    jobs = queries.run(wh, "queue_open_jobs", **where, leaving=sorted(LEAVING_EVENTS))
    return queries.run(
        wh,
        "queue_attempts",
        **where,
        start=start,
        terminal=sorted(TERMINAL_EVENTS),
        all_jobs=False,
        jobs=jobs["job_id"].to_list(),
    )


# -- pure functions over attempt rows ---------------------------------------------------------
def wait_percentiles(
    rows: pl.DataFrame,
    start: dt.datetime,
    end: dt.datetime,
    by: Sequence[str] = ("tenant", "queue", "gpu_model"),
) -> pl.DataFrame:
    """Wait-time percentiles (seconds, linear interpolation) of attempts started in [start, end).

    Columns: the ``by`` columns, attempts, p50_s, p90_s, p99_s, mean_s, max_s, unknown_wait.
    """
    by = _by(by)
    started = rows.filter(
        pl.col("started_ts").is_not_null()
        & (pl.col("started_ts") >= start)
        & (pl.col("started_ts") < end)
    )
    known = pl.col("queued_ts").is_not_null() & (pl.col("queued_ts") <= pl.col("started_ts"))
    started = started.with_columns(
        pl.when(known)
        .then((pl.col("started_ts") - pl.col("queued_ts")).dt.total_milliseconds() / 1000)
        .alias("wait_s")
    )
    wait = pl.col("wait_s").drop_nulls()
    aggs = [
        wait.count().alias("attempts"),
        *(
            wait.quantile(q, interpolation="linear").alias(f"p{int(q * 100)}_s")
            for q in (0.5, 0.9, 0.99)
        ),
        wait.mean().alias("mean_s"),
        wait.max().alias("max_s"),
        pl.col("wait_s").is_null().sum().alias("unknown_wait"),
    ]
    if not by:
        return started.select(aggs)
    return started.group_by(by).agg(aggs).sort(by)


def queue_length_series(
    rows: pl.DataFrame, instants: Sequence[dt.datetime], by: Sequence[str] = ()
) -> pl.DataFrame:
    """Attempts (and GPUs they ask for) waiting at each instant: queued_ts <= t < left_queue_ts.

    Columns: ts, the ``by`` columns, waiting_attempts, waiting_gpus. Every instant appears for
    every group seen in ``rows`` (zeros included).
    """
    by = _by(by)
    valid = rows.filter(
        pl.col("queued_ts").is_not_null()
        & (pl.col("left_queue_ts").is_null() | (pl.col("left_queue_ts") >= pl.col("queued_ts")))
    )
    t = np.array([_ms(i) for i in instants], dtype=np.int64)
    groups = valid.partition_by(by, as_dict=True) if by else {(): valid}
    out: list[pl.DataFrame] = []
    for key, group in groups.items():
        queued = group["queued_ts"].dt.epoch("ms").to_numpy()
        left = group["left_queue_ts"].dt.epoch("ms").fill_null(np.iinfo(np.int64).max).to_numpy()
        gpus = group["gpus_requested"].fill_null(0.0).to_numpy()
        count, weight = _inside(queued, left, gpus, t)
        frame = pl.DataFrame(
            {"ts": list(instants), "waiting_attempts": count, "waiting_gpus": weight},
            schema={
                "ts": pl.Datetime("ms", "UTC"),
                "waiting_attempts": pl.Int64,
                "waiting_gpus": pl.Float64,
            },
        )
        out.append(
            frame.with_columns(
                *(pl.lit(v, pl.String).alias(c) for c, v in zip(by, key, strict=True))
            )
        )
    if not out:  # grouped, and nothing waited
        return pl.DataFrame(
            schema={
                "ts": pl.Datetime("ms", "UTC"),
                **dict.fromkeys(by, pl.String),
                "waiting_attempts": pl.Int64,
                "waiting_gpus": pl.Float64,
            }
        )
    return pl.concat(out).select("ts", *by, "waiting_attempts", "waiting_gpus").sort("ts", *by)


def _ms(ts: dt.datetime) -> int:
    return int(_utc(ts, "instant").timestamp() * 1000)


def _inside(
    start: np.ndarray, end: np.ndarray, weight: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """How many [start, end) intervals contain each t, and the sum of their weights."""
    s_order, e_order = np.argsort(start, kind="stable"), np.argsort(end, kind="stable")
    s_sorted, e_sorted = start[s_order], end[e_order]
    s_cum = np.concatenate(([0.0], np.cumsum(weight[s_order])))
    e_cum = np.concatenate(([0.0], np.cumsum(weight[e_order])))
    opened = np.searchsorted(s_sorted, t, side="right")
    closed = np.searchsorted(e_sorted, t, side="right")
    return opened - closed, np.round(s_cum[opened] - e_cum[closed], 9)


def outcome_rates(
    rows: pl.DataFrame, start: dt.datetime, end: dt.datetime, by: Sequence[str] = ("tenant",)
) -> pl.DataFrame:
    """How the attempts that ran ended in [start, end), with failure and preemption rates.

    Columns: the ``by`` columns, ended, finished, failed, preempted, evicted, cancelled,
    failure_rate, preemption_rate, cancelled_waiting, and censored: the attempts still running
    or waiting when the source's observation ended (a trace's end), which did not end at all
    as far as anyone knows, so they are in no rate.
    """
    by = _by(by)
    in_window = (pl.col("ended_ts") >= start) & (pl.col("ended_ts") < end)
    ran = pl.col("started_ts").is_not_null()
    counts = [(in_window & ran & (pl.col("end_event") == e)).sum().alias(e) for e in ENDINGS]
    frame = (
        rows.filter(in_window)
        .group_by(by or pl.lit(0).alias("_all"))
        .agg(
            (in_window & ran & pl.col("end_event").is_in(ENDINGS)).sum().alias("ended"),
            *counts,
            (in_window & ~ran & (pl.col("end_event") == "cancelled"))
            .sum()
            .alias("cancelled_waiting"),
            (in_window & (pl.col("end_event") == "censored")).sum().alias("censored"),
        )
    )
    ended = pl.col("ended")
    frame = frame.with_columns(
        pl.when(ended > 0).then(pl.col("failed") / ended).alias("failure_rate"),
        pl.when(ended > 0)
        .then((pl.col("preempted") + pl.col("evicted")) / ended)
        .alias("preemption_rate"),
    )
    cols = [
        *by,
        "ended",
        *ENDINGS,
        "failure_rate",
        "preemption_rate",
        "cancelled_waiting",
        "censored",
    ]
    return frame.select(cols).sort(by) if by else frame.select(cols)


def reason_class(reason: pl.Expr) -> pl.Expr:
    """A reason with the names that make each one unique replaced, so that reasons group.

    "preempted by job-42 (priority class high)" -> "preempted by <job> (priority class high)";
    "Evicted: node n7 drained" -> "Evicted: node <node> drained". Xid numbers are kept.
    """
    return reason.str.replace(r"^preempted by \S+", "preempted by <job>").str.replace_all(
        r"\bnode \S+", "node <node>"
    )


def top_reasons(
    rows: pl.DataFrame,
    start: dt.datetime,
    end: dt.datetime,
    n: int = 5,
    by: Sequence[str] = ("tenant",),
) -> pl.DataFrame:
    """The ``n`` most frequent reasons per group and ending (failed, preempted, evicted).

    Columns: the ``by`` columns, end_event, reason, attempts, share (of that group's attempts
    with that ending), rank (1 = most frequent; ties broken by the reason's text).
    """
    by = _by(by)
    keys = [*by, "end_event"]
    lost = rows.filter(
        (pl.col("ended_ts") >= start)
        & (pl.col("ended_ts") < end)
        & pl.col("end_event").is_in(LOST_EVENTS)
    )
    counted = (
        lost.with_columns(reason_class(pl.col("end_reason")).alias("reason"))
        .group_by(*keys, "reason")
        .agg(pl.len().cast(pl.Int64).alias("attempts"))
        .sort([*keys, "attempts", "reason"], descending=[False] * len(keys) + [True, False])
    )
    return counted.with_columns(
        (pl.col("attempts") / pl.col("attempts").sum().over(keys)).alias("share"),
        pl.int_range(1, pl.len() + 1).over(keys).alias("rank"),
    ).filter(pl.col("rank") <= n)


def lost_hours(
    rows: pl.DataFrame, start: dt.datetime, end: dt.datetime, by: Sequence[str] = ("tenant",)
) -> pl.DataFrame:
    """GPU-hours of attempts that ended failed, preempted or evicted in [start, end).

    Columns: the ``by`` columns, failed_gpu_hours, preempted_gpu_hours, evicted_gpu_hours,
    lost_gpu_hours, lost_attempts.
    """
    by = _by(by)
    lost = rows.filter(
        (pl.col("ended_ts") >= start)
        & (pl.col("ended_ts") < end)
        & pl.col("end_event").is_in(LOST_EVENTS)
        & pl.col("started_ts").is_not_null()
    )
    aggs = [
        *(
            (pl.col("gpu_hours") * (pl.col("end_event") == e)).sum().alias(f"{e}_gpu_hours")
            for e in LOST_EVENTS
        ),
        pl.col("gpu_hours").sum().alias("lost_gpu_hours"),
        pl.len().cast(pl.Int64).alias("lost_attempts"),
    ]
    if not by:
        return lost.select(aggs)
    return (
        lost.group_by(by)
        .agg(aggs)
        .sort("lost_gpu_hours", *by, descending=[True] + [False] * len(by))
    )


# -- the warehouse side -----------------------------------------------------------------------
def wait_times(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    by: Sequence[str] = ("tenant", "queue", "gpu_model"),
) -> pl.DataFrame:
    """Wait-time percentiles per group over [start, end) (see :func:`wait_percentiles`)."""
    start, end = _window(start, end)
    return wait_percentiles(attempts(wh, cluster, start, end), start, end, by)


def queue_length(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta = _HOUR,
    by: Sequence[str] = (),
) -> pl.DataFrame:
    """Attempts waiting at each instant start + i * step in [start, end)."""
    start, end = _window(start, end)
    if step <= dt.timedelta(0):
        raise QueueError(f"step {step} must be positive (e.g. 1 hour)")
    instants = [start + i * step for i in range(-(-(end - start) // step))]
    return queue_length_series(attempts(wh, cluster, start, end), instants, by)


def failures(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    by: Sequence[str] = ("tenant",),
    top: int = 5,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(outcome rates, top reasons, lost GPU-hours) per group over [start, end), from one query."""
    start, end = _window(start, end)
    rows = attempts(wh, cluster, start, end)
    return (
        outcome_rates(rows, start, end, by),
        top_reasons(rows, start, end, top, by),
        lost_hours(rows, start, end, by),
    )


@dataclasses.dataclass(frozen=True)
class QueueReport:
    """Waiting and failure over a window, grouped one way: what ``gpuledger queues`` prints
    and ``/api/v1/queues`` answers. ``tenant`` set: one tenant's view (its own attempts
    alone, so its percentiles are its own)."""

    wait_times: pl.DataFrame
    outcomes: pl.DataFrame
    top_reasons: pl.DataFrame
    lost_gpu_hours: pl.DataFrame
    tenant: str | None = None

    def frames(self) -> dict[str, pl.DataFrame]:
        """The four tables by their names in the JSON document."""
        return {
            "wait_times": self.wait_times,
            "outcomes": self.outcomes,
            "top_reasons": self.top_reasons,
            "lost_gpu_hours": self.lost_gpu_hours,
        }

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """Each table as a list of rows (durations in seconds, in the ``_s`` columns)."""
        return {name: frame.to_dicts() for name, frame in self.frames().items()}


def report(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    by: Sequence[str] = ("tenant",),
    *,
    tenant: str | None = None,
    pool: str = "",
    gpu_model: str = "",
    top: int = 5,
    rows: pl.DataFrame | None = None,
) -> QueueReport:
    """Wait-time percentiles, outcome rates, top reasons and lost GPU-hours per group over
    [start, end), from one query (or from ``rows``, the :func:`attempts` of that window at
    hand); ``tenant`` (an org or org/project), ``pool`` and ``gpu_model`` keep their attempts
    alone."""
    start, end = _window(start, end)
    by = _by(by)
    found = attempts(wh, cluster, start, end) if rows is None else rows
    rows = found.filter(_only(tenant, pool, gpu_model))
    return QueueReport(
        wait_percentiles(rows, start, end, by),
        outcome_rates(rows, start, end, by),
        top_reasons(rows, start, end, top, by),
        lost_hours(rows, start, end, by),
        tenant,
    )


def _only(tenant: str | None, pool: str, gpu_model: str) -> pl.Expr:
    """The attempts of ``tenant`` (None: all), ``pool`` and ``gpu_model`` ("": all)."""
    keep = in_tenant(tenant) if tenant is not None else pl.lit(True)
    for column, value in (("pool", pool), ("gpu_model", gpu_model)):
        if value:
            keep = keep & (pl.col(column) == value)
    return keep
