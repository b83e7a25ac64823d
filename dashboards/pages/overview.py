"""Overview: the findings of the moment in words, GPUs (capacity, allocated, used, idle) now
and over the range, cost this month against the same days of last month, and the inventory.

It reads the shared filters (``filters-state``). A tenant viewer sees its own figures alone:
no capacity, no inventory, no other tenant (:mod:`dashboards.answers.overview`). Each part
has its own callback, so the browser asks for them side by side and each shows when ready.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import dash
import plotly.graph_objects as go
import polars as pl
from dash import Input, Output, callback, dcc, html

from dashboards import widgets
from dashboards.answers import idle as idle_answers
from dashboards.answers.findings import CostToDate, Finding, top_findings
from dashboards.answers.overview import Now, Range, cost_to_date, now, over_range
from dashboards.answers.overview import inventory as fleet_inventory
from dashboards.context import Forbidden, Viewer, ask
from dashboards.filters import Filters
from gpuledger_errors import InputError

T = TypeVar("T")

dash.register_page(__name__, path="/", name="Overview", title="gpuledger — fleet overview")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.Div(id="overview-message"),
            html.H3("What stands out"),
            dcc.Loading(html.Ol(id="overview-findings", className="findings")),
            dcc.Loading(html.Div(id="overview-kpis", className="kpis")),
            dcc.Loading(html.Div(id="overview-cost", className="kpis")),
            dcc.Loading(html.Div(id="overview-range", className="kpis")),
            dcc.Loading(dcc.Graph(id="overview-timeseries")),
            dcc.Loading(html.Div(id="overview-inventory")),
        ]
    )


def kpis(n: Now) -> list[html.Div]:
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
            "GPUs allocated now", widgets.gpus(n.allocated_gpus), f"as of {widgets.when(n.at)}"
        ),
        widgets.kpi("GPUs' worth used now", widgets.gpus(n.used_gpus), "last 10 min"),
        widgets.kpi(
            "GPUs idle in jobs now", widgets.gpus(n.idle_gpus),
            f"{widgets.money(n.idle_cost, n.currency)} so far",
        ),
    ]  # fmt: skip
    return tiles


def range_kpis(r: Range) -> list[html.Div]:
    held = sum(d.allocated_gpu_hours for d in r.days)
    used = sum(d.used_gpu_hours or 0.0 for d in r.days)
    idle = sum(d.idle_gpu_hours or 0.0 for d in r.days)
    return [
        widgets.kpi("GPU-hours held in range", f"{held:,.1f}"),
        widgets.kpi("used", f"{used:,.1f}", f"{used / held:.0%} of held" if held else ""),
        widgets.kpi("idle", f"{idle:,.1f}", f"{idle / held:.0%} of held" if held else ""),
    ]


def cost(c: CostToDate) -> list[html.Div]:
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


def timeseries(o: Range) -> dict[str, Any]:
    """The whole cluster hour by hour (for those who see it), or the viewer's own GPUs day by
    day; idle is per day (the ledger's days)."""
    days = [d.day for d in o.days]
    traces: list[dict[str, Any]] = []
    if o.hourly is not None:
        x = o.hourly["ts"].to_list()
        for column, name in (
            ("capacity_gpus", "Capacity"),
            ("allocated_gpus", "Allocated"),
            ("used_gpus", "Used"),
        ):
            shape = {"shape": "hv"} if column == "capacity_gpus" else {}
            traces.append(
                {
                    "type": "scatter",
                    "x": x,
                    "y": o.hourly[column].to_list(),
                    "name": name,
                    "mode": "lines",
                    "line": shape,
                }
            )
    else:
        traces += [
            {"type": "scatter", "x": days, "y": [d.allocated_gpu_hours / 24 for d in o.days],
             "name": "Allocated"},
            {"type": "scatter", "x": days, "y": [(d.used_gpu_hours or 0) / 24 for d in o.days],
             "name": "Used"},
        ]  # fmt: skip
    traces.append(
        {
            "type": "scatter",
            "x": days,
            "y": [(d.idle_gpu_hours or 0) / 24 for d in o.days],
            "name": "Idle (mean of the day)",
            "line": {"shape": "hv", "dash": "dot", "color": "#d9534f"},
        }
    )
    return widgets.chart(traces, 380, yaxis={"title": {"text": "GPUs"}})


def inventory(fleet_now: pl.DataFrame | None) -> Any:
    if fleet_now is None:
        return ""
    return html.Div(
        [
            html.H3("Inventory now"),
            html.Table(
                [html.Tr([html.Th(h) for h in ("GPU model", "Health", "GPUs")])]
                + [
                    html.Tr([html.Td(r["gpu_model"]), html.Td(r["health"]), html.Td(r["gpus"])])
                    for r in fleet_now.iter_rows(named=True)
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


def _findings(filters: Filters, who: Viewer) -> list[Finding]:
    """The findings of the moment; the GPUs idle now and the month's cost as the tiles have
    them (one answer each, computed once when the server keeps answers)."""
    idle_now = ask(idle_answers.now, filters, who)
    return top_findings(filters, who, idle_now=idle_now, cost=ask(cost_to_date, filters, who))


@callback(
    Output("overview-message", "children"),
    Output("overview-kpis", "children"),
    Input("filters-state", "data"),
)
def _now(state: str | None) -> tuple[Any, Any]:
    """The GPUs now; a refusal of the filters is said here, once for the page."""
    try:
        filters, who = widgets.asked(state)
        n = ask(now, filters, who)
    except (Forbidden, InputError) as exc:
        return widgets.refusal(exc), []
    return "", kpis(n)


@callback(
    Output("overview-range", "children"),
    Output("overview-timeseries", "figure"),
    Input("filters-state", "data"),
)
def _range(state: str | None) -> tuple[Any, go.Figure | dict[str, Any]]:
    """The range's GPU-hours and the chart of them."""
    try:
        filters, who = widgets.asked(state)
        r = ask(over_range, filters, who)
    except (Forbidden, InputError) as exc:
        return [], widgets.blank(str(exc))
    return range_kpis(r), timeseries(r)


def _part(
    state: str | None, answer: Callable[[Filters, Viewer], T], show: Callable[[T], Any]
) -> Any:
    """One part of the page shown from its answer; a refused request shows nothing here (the
    GPUs-now callback says why)."""
    try:
        filters, who = widgets.asked(state)
        return show(ask(answer, filters, who))
    except (Forbidden, InputError):
        return []


@callback(Output("overview-cost", "children"), Input("filters-state", "data"))
def _cost(state: str | None) -> Any:
    """This month's cost so far against the same days of the month before."""
    return _part(state, cost_to_date, cost)


@callback(Output("overview-findings", "children"), Input("filters-state", "data"))
def _found(state: str | None) -> Any:
    """The top findings of the moment in words."""
    return _part(state, _findings, findings)


@callback(Output("overview-inventory", "children"), Input("filters-state", "data"))
def _inventory(state: str | None) -> Any:
    """The inventory now, for those who see the cluster."""
    return _part(state, fleet_inventory, inventory)
