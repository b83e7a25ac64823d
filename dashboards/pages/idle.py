"""Idle and waste: the GPUs idle in a job's hands now (since when, for how long, what that has
cost so far), the idle GPU-hours of each day of the range, and the jobs that left the most
idle. Figures come from :mod:`dashboards.answers.idle` (as ``GET /api/v1/idle``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from urllib.parse import quote

import dash
import plotly.graph_objects as go
from dash import Input, Output, callback, dcc, html

from dashboards import context, widgets
from dashboards.answers import idle as idle_answers
from dashboards.context import Forbidden, ask
from gpuledger_errors import InputError
from warehouse.ledger import IdleReport

dash.register_page(__name__, path="/idle", name="Idle", title="gpuledger — idle and waste")

_NOW_COLUMNS: list[dict[str, Any]] = [
    {"field": "gpu", "headerName": "GPU", "cellRenderer": "markdown"},
    {"field": "node", "headerName": "Node"},
    {"field": "gpu_model", "headerName": "Model"},
    {"field": "job_id", "headerName": "Job"},
    {"field": "tenant", "headerName": "Tenant"},
    {"field": "fraction", "headerName": "Share"},
    {"field": "since", "headerName": "Idle since (UTC)"},
    {"field": "idle_for", "headerName": "Idle for"},
    {"field": "idle_hours", "headerName": "Hours", "hide": True, "sort": "desc"},
    {"field": "cost", "headerName": "Cost so far"},
]
_WORST_COLUMNS: list[dict[str, Any]] = [
    {"field": "job_id", "headerName": "Job"},
    {"field": "tenant", "headerName": "Tenant"},
    {"field": "cluster", "headerName": "Cluster"},
    {"field": "gpu_model", "headerName": "Model"},
    {"field": "gpus", "headerName": "GPUs"},
    {"field": "idle_gpu_hours", "headerName": "Idle GPU-h"},
    {"field": "allocated_gpu_hours", "headerName": "Held GPU-h"},
    {"field": "idle_share", "headerName": "Idle share"},
    {"field": "idle_cost", "headerName": "Cost of idle"},
]


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.H2("Idle and waste"),
            html.P(id="idle-rule", className="note"),
            html.Div(id="idle-message"),
            dcc.Loading(html.Div(id="idle-kpis", className="kpis")),
            html.H3("Idle in a job's hands now"),
            widgets.grid("idle-now", _NOW_COLUMNS),
            html.H3("Idle GPU-hours per day"),
            dcc.Loading(dcc.Graph(id="idle-trend")),
            html.H3("Jobs that left the most idle in the range"),
            widgets.grid("idle-worst", _WORST_COLUMNS),
        ]
    )


def gpu_link(gpu_uuid: str, mig_instance: str, state: str) -> str:
    """A markdown link to the GPU's page, keeping the filters."""
    label = gpu_uuid + (f" / {mig_instance}" if mig_instance else "")
    label = label.replace("[", "(").replace("]", ")")
    return f"[{label}](/gpu/{quote(gpu_uuid, safe='')}{state})"


def now_rows(report: IdleReport, state: str) -> list[dict[str, Any]]:
    return [
        {
            "gpu": gpu_link(r.gpu_uuid, r.mig_instance, state),
            "node": r.node,
            "gpu_model": r.gpu_model,
            "job_id": r.job_id,
            "tenant": r.tenant,
            "fraction": r.fraction,
            "since": widgets.when(r.since),
            "idle_for": widgets.duration((r.until - r.since).total_seconds()),
            "idle_hours": round(r.idle_hours, 4),
            "cost": widgets.money(r.cost, report.currency),
        }
        for r in report.now
    ]


def worst_rows(report: IdleReport) -> list[dict[str, Any]]:
    return [
        {
            "job_id": j.job_id,
            "tenant": j.tenant,
            "cluster": j.cluster,
            "gpu_model": j.gpu_model,
            "gpus": j.gpus,
            "idle_gpu_hours": round(j.idle_gpu_hours, 2),
            "allocated_gpu_hours": round(j.allocated_gpu_hours, 2),
            "idle_share": f"{j.idle_share:.0%}",
            "idle_cost": widgets.money(j.idle_cost, report.currency),
        }
        for j in report.worst_jobs
    ]


def trend(report: IdleReport) -> go.Figure | dict[str, Any]:
    if not report.days:
        return widgets.blank("No day of this range has begun yet.")
    days = [d.day.isoformat() for d in report.days]
    held = {
        "type": "bar",
        "x": days,
        "y": [d.allocated_gpu_hours for d in report.days],
        "name": "Held",
        "marker": {"color": "#c7d7ee"},
    }
    idle = {
        "type": "bar",
        "x": days,
        "y": [d.idle_gpu_hours or 0.0 for d in report.days],
        "name": "Idle",
        "marker": {"color": "#d9534f"},
        "customdata": [widgets.money(d.idle_cost, report.currency) for d in report.days],
        "hovertemplate": "%{x}: %{y:.1f} idle GPU-h, %{customdata}<extra></extra>",
    }
    return widgets.chart(
        [held, idle], 320, yaxis={"title": {"text": "GPU-hours"}}, barmode="overlay"
    )


def kpis(report: IdleReport) -> list[html.Div]:
    held = report.allocated_gpu_hours
    share = f"{report.idle_gpu_hours / held:.0%} of held" if held else ""
    cost_now = sum((r.cost or Decimal(0) for r in report.now), Decimal(0))
    return [
        widgets.kpi("GPUs idle in jobs now", widgets.gpus(sum(r.fraction for r in report.now))),
        widgets.kpi("Their idle so far", widgets.money(cost_now, report.currency)),
        widgets.kpi("Idle GPU-hours in range", f"{report.idle_gpu_hours:,.1f}", share),
        widgets.kpi("Cost of idle in range", widgets.money(report.idle_cost, report.currency)),
    ]


@callback(
    Output("idle-message", "children"),
    Output("idle-rule", "children"),
    Output("idle-kpis", "children"),
    Output("idle-now", "rowData"),
    Output("idle-trend", "figure"),
    Output("idle-worst", "rowData"),
    Input("filters-state", "data"),
)
def _refresh(state: str | None) -> tuple[Any, ...]:
    """The page's figures for the viewer and the shared filters."""
    rule = context.get().idle
    told = (
        f"Idle: allocated while every utilisation sample stayed under "
        f"{rule.threshold_ratio:.0%} for at least {widgets.duration(rule.min_duration_s)}."
    )
    try:
        filters, who = widgets.asked(state)
        report = ask(idle_answers.report, filters, who)
    except (Forbidden, InputError) as exc:
        return widgets.refusal(exc), told, [], [], widgets.blank(str(exc)), []
    empty = (
        ""
        if report.now or report.worst_jobs
        else html.P(
            "No idle allocated GPU in this range: every job kept its GPUs busy.", className="empty"
        )
    )
    return (
        empty,
        told,
        kpis(report),
        now_rows(report, state or ""),
        trend(report),
        worst_rows(report),
    )
