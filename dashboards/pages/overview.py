"""Overview: the findings of the moment in words, GPUs (capacity, allocated, used, idle) now
and over the range, cost this month against the same days of last month, and the inventory.

It reads the shared filters (``filters-state``). A tenant viewer sees its own figures alone:
no capacity, no inventory, no other tenant (:mod:`dashboards.answers.overview`).
"""

from __future__ import annotations

from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, callback, dcc, html

from dashboards import widgets
from dashboards.answers.findings import Finding, top_findings
from dashboards.answers.overview import Overview, overview
from dashboards.context import Forbidden, Viewer, ask
from dashboards.filters import Filters
from gpuledger_errors import InputError

dash.register_page(__name__, path="/", name="Overview", title="gpuledger — fleet overview")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.Div(id="overview-message"),
            html.H3("What stands out"),
            dcc.Loading(html.Ol(id="overview-findings", className="findings")),
            dcc.Loading(html.Div(id="overview-kpis", className="kpis")),
            html.Div(id="overview-cost", className="kpis"),
            dcc.Loading(dcc.Graph(id="overview-timeseries")),
            html.Div(id="overview-inventory"),
        ]
    )


def kpis(o: Overview) -> list[html.Div]:
    n, days = o.now, o.idle.days
    held = sum(d.allocated_gpu_hours for d in days)
    used = sum(d.used_gpu_hours or 0.0 for d in days)
    idle = sum(d.idle_gpu_hours or 0.0 for d in days)
    tiles = []
    if n.capacity_gpus is not None:
        tiles.append(
            widgets.kpi(
                "GPUs in inventory now", widgets.gpus(n.capacity_gpus),
                f"{widgets.gpus(n.healthy_gpus)} healthy",
            )
        )  # fmt: skip
    tiles += [
        widgets.kpi(
            "GPUs allocated now", widgets.gpus(n.allocated_gpus), f"as of {widgets.when(o.at)}"
        ),
        widgets.kpi("GPUs' worth used now", widgets.gpus(n.used_gpus), "last 10 min"),
        widgets.kpi(
            "GPUs idle in jobs now", widgets.gpus(n.idle_gpus),
            f"{widgets.money(n.idle_cost, o.cost.currency)} so far",
        ),
        widgets.kpi("GPU-hours held in range", f"{held:,.1f}"),
        widgets.kpi("used", f"{used:,.1f}", f"{used / held:.0%} of held" if held else ""),
        widgets.kpi("idle", f"{idle:,.1f}", f"{idle / held:.0%} of held" if held else ""),
    ]  # fmt: skip
    return tiles


def cost(o: Overview) -> list[html.Div]:
    c = o.cost
    change = (
        f"{(c.month_to_date - c.same_days_before) / c.same_days_before:+.0%} against "
        if c.same_days_before
        else "against "
    )
    return [
        widgets.kpi("Cost this month so far", widgets.money(c.month_to_date, c.currency)),
        widgets.kpi(
            "Same days last month", widgets.money(c.same_days_before, c.currency),
            change + "them",
        ),
    ]  # fmt: skip


def timeseries(o: Overview) -> go.Figure:
    """The whole cluster hour by hour (for those who see it), or the viewer's own GPUs day by
    day; idle is per day (the ledger's days)."""
    fig = widgets.figure(height=380, yaxis={"title": "GPUs"})
    days = [d.day for d in o.idle.days]
    if o.hourly is not None:
        x = o.hourly["ts"].to_list()
        for column, name in (
            ("capacity_gpus", "Capacity"),
            ("allocated_gpus", "Allocated"),
            ("used_gpus", "Used"),
        ):
            shape = {"shape": "hv"} if column == "capacity_gpus" else {}
            fig.add_scatter(x=x, y=o.hourly[column].to_list(), name=name, mode="lines", line=shape)
    else:
        fig.add_scatter(
            x=days, y=[d.allocated_gpu_hours / 24 for d in o.idle.days], name="Allocated"
        )
        fig.add_scatter(x=days, y=[(d.used_gpu_hours or 0) / 24 for d in o.idle.days], name="Used")
    fig.add_scatter(
        x=days,
        y=[(d.idle_gpu_hours or 0) / 24 for d in o.idle.days],
        name="Idle (mean of the day)",
        line={"shape": "hv", "dash": "dot", "color": "#d9534f"},
    )
    return fig


def inventory(o: Overview) -> Any:
    if o.inventory is None:
        return ""
    return html.Div(
        [
            html.H3("Inventory now"),
            html.Table(
                [html.Tr([html.Th(h) for h in ("GPU model", "Health", "GPUs")])]
                + [
                    html.Tr([html.Td(r["gpu_model"]), html.Td(r["health"]), html.Td(r["gpus"])])
                    for r in o.inventory.iter_rows(named=True)
                ],
                className="inventory",
                id="overview-inventory-table",
            ),
        ]
    )


def findings(found: list[Finding]) -> list[html.Li]:
    if not found:
        return [html.Li("Nothing stands out: no GPU idle for long, no job waiting long, no "
                        "GPU out of service.", className="empty")]  # fmt: skip
    return [html.Li(f.text, className=f"finding finding-{f.kind}") for f in found]


def _answers(filters: Filters, who: Viewer) -> tuple[Overview, list[Finding]]:
    """The overview and its findings, one answer (the findings read the overview's idle GPUs)."""
    o = overview(filters, who)
    return o, top_findings(filters, who, idle_now=o.idle.now, cost=o.cost)


@callback(
    Output("overview-message", "children"),
    Output("overview-findings", "children"),
    Output("overview-kpis", "children"),
    Output("overview-cost", "children"),
    Output("overview-timeseries", "figure"),
    Output("overview-inventory", "children"),
    Input("filters-state", "data"),
)
def _refresh(state: str | None) -> tuple[Any, ...]:
    """The overview for the viewer and the shared filters."""
    try:
        filters, who = widgets.asked(state)
        o, found = ask(_answers, filters, who)
    except (Forbidden, InputError) as exc:
        return widgets.refusal(exc), [], [], [], widgets.blank(str(exc)), ""
    return "", findings(found), kpis(o), cost(o), timeseries(o), inventory(o)
