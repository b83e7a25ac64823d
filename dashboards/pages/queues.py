"""Queues: how long jobs wait, why the waiting ones wait, and how attempts end.

- Wait-time percentiles (p50, p90, p99) of the attempts that started in the range, by tenant,
  queue, pool or GPU model (the page's own choice).
- The jobs waiting at the range's end (or now, if earlier), longest first, each with why it
  waits: over quota, no free GPU of its model, fragmented, waiting on a reclaim, behind others
  of higher priority (the explanations of ``gpuledger why job``).
- How the attempts that ended in the range ended: failure and preemption rates, the most
  frequent reasons, and the GPU-hours of attempts that ended failed, preempted or evicted.

Durations are in words (``3 h 7 m``); the JSON API keeps seconds.

Who sees what: a ``tenant:`` viewer sees its own job attempts alone, everywhere on the page:
its percentiles are computed from its own waits, its waiting list holds its own jobs, and the
reasons they wait count the other tenants' jobs ahead and borrowed GPUs without naming them
(:func:`warehouse.analytics.explain.waiting_reasons`' ``viewer``). Asking for another tenant
(``?tenant=``) is refused in every callback.
"""

from __future__ import annotations

from typing import Any

import dash
import plotly.graph_objects as go
import polars as pl
from dash import Input, Output, callback, dcc, html
from dash.development.base_component import Component

from dashboards import widgets
from dashboards.answers import queues as answers
from dashboards.context import Forbidden, ask
from gpuledger_errors import InputError
from warehouse.analytics import pending
from warehouse.analytics.queues import GROUPS, QueueReport
from warehouse.times import format_duration

dash.register_page(__name__, path="/queues", name="Queues", title="gpuledger — queues")

LABELS = {"tenant": "Tenant", "queue": "Queue", "pool": "Pool", "gpu_model": "GPU model"}


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.Div(id="queues-status", className="status"),
            dcc.Loading(html.Div(id="queues-kpis", className="kpis")),
            html.H3("Waiting now"),
            dcc.Loading([html.Div(id="queues-reasons"), html.Div(id="queues-pending")]),
            html.H3("Wait times"),
            html.Div(
                [
                    html.Label("By"),
                    dcc.RadioItems(
                        id="queues-by",
                        value="tenant",
                        inline=True,
                        options=[{"label": LABELS[g], "value": g} for g in GROUPS],
                    ),
                ],
                className="controls",
            ),
            dcc.Loading([dcc.Graph(id="queues-waits-figure"), html.Div(id="queues-waits")]),
            html.H3("How attempts ended"),
            dcc.Loading(
                [
                    html.Div(id="queues-outcomes"),
                    html.H4("Most frequent reasons"),
                    html.Div(id="queues-top-reasons"),
                    html.H4("GPU-hours lost to failures and preemptions"),
                    html.Div(id="queues-lost"),
                ]
            ),
        ]
    )


def _waits_columns(by: str) -> dict[str, str]:
    return {
        by: LABELS[by],
        "attempts": "Attempts started",
        "p50_s": "Median wait",
        "p90_s": "p90",
        "p99_s": "p99",
        "max_s": "Longest",
        "unknown_wait": "Queue entry unknown",
    }


def _outcome_columns(by: str) -> dict[str, str]:
    return {
        by: LABELS[by],
        "ended": "Ended",
        "finished": "Finished",
        "failed": "Failed",
        "preempted": "Preempted",
        "evicted": "Evicted",
        "cancelled": "Cancelled",
        "failure_rate": "Failure rate",
        "preemption_rate": "Preemption rate",
        "cancelled_waiting": "Cancelled while waiting",
    }


@callback(
    Output("queues-status", "children"),
    Output("queues-kpis", "children"),
    Output("queues-waits-figure", "figure"),
    Output("queues-waits", "children"),
    Output("queues-outcomes", "children"),
    Output("queues-top-reasons", "children"),
    Output("queues-lost", "children"),
    Input("filters-state", "data"),
    Input("queues-by", "value"),
)
def _waits(state: str | None, by: str | None) -> tuple[Any, ...]:
    """Wait percentiles, outcomes and lost GPU-hours over the range, grouped by ``by``."""
    by = by if by in GROUPS else "tenant"
    try:
        filters, who = widgets.asked(state)
        found = ask(answers.report, filters, who, by)
    except (Forbidden, InputError) as exc:
        error = widgets.message(str(exc), "error")
        return error, [], widgets.blank(""), "", "", "", ""
    status = f"{filters.first} to {filters.last} (UTC days, both included)" + (
        f"; the job attempts of tenant {found.tenant}" if found.tenant else ""
    )
    reasons = found.top_reasons.with_columns(pl.col("share").round(3))
    return (
        status,
        _kpis(found),
        _waits_figure(found.wait_times, by),
        widgets.table(
            "queues-waits-grid",
            found.wait_times,
            _waits_columns(by),
            empty="No job attempt started in this range.",
        ),
        widgets.table(
            "queues-outcomes-grid",
            found.outcomes,
            _outcome_columns(by),
            empty="No job attempt ended in this range.",
        ),
        widgets.table(
            "queues-top-reasons-grid",
            reasons,
            {
                by: LABELS[by],
                "end_event": "Ended",
                "reason": "Reason",
                "attempts": "Attempts",
                "share": "Share",
            },
            empty="No attempt failed, was preempted or evicted in this range.",
        ),
        widgets.table(
            "queues-lost-grid",
            found.lost_gpu_hours,
            {
                by: LABELS[by],
                "lost_attempts": "Attempts",
                "failed_gpu_hours": "Failed (GPU-h)",
                "preempted_gpu_hours": "Preempted (GPU-h)",
                "evicted_gpu_hours": "Evicted (GPU-h)",
                "lost_gpu_hours": "Lost (GPU-h)",
            },
            empty="No GPU-hours lost in this range.",
        ),
    )


def _kpis(found: QueueReport) -> list[Component]:
    outcomes = found.outcomes
    ended = int(outcomes["ended"].sum()) if outcomes.height else 0

    def share(*columns: str) -> str:
        return f"{sum(outcomes[c].sum() for c in columns) / ended:.1%}" if ended else "–"

    longest = found.wait_times["max_s"].max()
    lost = float(found.lost_gpu_hours["lost_gpu_hours"].sum())
    return [
        widgets.kpi("Attempts started", f"{int(found.wait_times['attempts'].sum()):,}"),
        widgets.kpi(
            "Longest wait",
            format_duration(float(longest)) if isinstance(longest, int | float) else "–",
        ),
        widgets.kpi("Failed (of ended)", share("failed")),
        widgets.kpi("Preempted or evicted", share("preempted", "evicted")),
        widgets.kpi("GPU-hours lost", f"{lost:,.1f}"),
    ]


def _waits_figure(waits: pl.DataFrame, by: str) -> go.Figure:
    known = waits.filter(pl.col("attempts") > 0)
    if not known.height:
        return widgets.blank("No job attempt started in this range.")
    fig = widgets.figure(320, yaxis={"title": "wait (hours)"}, barmode="group")
    names = [str(v) or "(none)" for v in known[by].to_list()]
    for column, label in (("p50_s", "median"), ("p90_s", "p90"), ("p99_s", "p99")):
        seconds = known[column].to_list()
        fig.add_bar(
            x=names,
            y=[(s or 0) / 3600 for s in seconds],
            name=label,
            customdata=widgets.words(seconds),
            hovertemplate="%{x}: %{customdata}<extra>" + label + "</extra>",
        )
    return fig


PENDING = {
    "job_id": "Job",
    "tenant": "Tenant",
    "queue": "Queue",
    "gpu_model": "GPU model",
    "gpus_requested": "GPUs",
    "priority": "Priority",
    "waited_s": "Waiting for",
    "why": "Why",
    "detail": "In detail",
}


@callback(
    Output("queues-reasons", "children"),
    Output("queues-pending", "children"),
    Input("filters-state", "data"),
)
def _pending(state: str | None) -> tuple[Component, Component]:
    """The jobs waiting at the range's end, with why each waits."""
    try:
        filters, who = widgets.asked(state)
        jobs = ask(answers.waiting, filters, who)
    except (Forbidden, InputError) as exc:
        return widgets.message(str(exc), "error"), html.Div()
    if not jobs:
        return widgets.message("No job is waiting."), html.Div()
    counts = pending.reason_counts(jobs)
    summary = "; ".join(
        f"{r['jobs']} held back by {r['reason'].replace('_', ' ')} ({r['gpus']:g} GPUs)"
        for r in counts.iter_rows(named=True)
    )
    rows = pl.DataFrame(
        [
            {
                "job_id": j.job_id,
                "tenant": j.tenant,
                "queue": j.queue,
                "gpu_model": j.gpu_model,
                "gpus_requested": j.gpus_requested,
                "priority": j.priority,
                "waited_s": j.waited_s,
                "why": ", ".join(c.replace("_", " ") for c in j.codes),
                "detail": " · ".join(r.message for r in j.reasons),
            }
            for j in jobs
        ]
    )
    return (
        widgets.message(f"{len(jobs)} job(s) waiting: {summary}.", "note"),
        widgets.table("queues-pending-grid", rows, PENDING, empty=""),
    )
