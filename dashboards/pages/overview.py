"""Fleet overview: capacity, allocated and used GPUs over time, and the inventory now.

Every number comes from ``warehouse.queries``; this page holds layout and callbacks only.
"""

from __future__ import annotations

import datetime as dt

import dash
import plotly.graph_objects as go
import polars as pl
from dash import Input, Output, callback, dcc, html
from dash.development.base_component import Component

from dashboards import context
from warehouse.analytics import fleet

dash.register_page(__name__, path="/", name="Overview", title="gpuledger — fleet overview")

RANGES = {"24h": 1, "7d": 7, "30d": 30}


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    html.Label("Cluster"),
                    dcc.Dropdown(id="overview-cluster", clearable=False, style={"width": "14rem"}),
                    html.Label("Range"),
                    dcc.RadioItems(
                        id="overview-range",
                        value="7d",
                        inline=True,
                        options=[{"label": k, "value": k} for k in RANGES],
                    ),
                ],
                className="controls",
            ),
            html.Div(id="overview-kpis", className="kpis"),
            dcc.Graph(id="overview-timeseries"),
            html.H3("Inventory now"),
            html.Div(id="overview-inventory"),
            dcc.Interval(id="overview-refresh", interval=30_000),
        ]
    )


@callback(
    Output("overview-cluster", "options"),
    Output("overview-cluster", "value"),
    Input("overview-refresh", "n_intervals"),
    Input("overview-cluster", "value"),
)
def _clusters(_n: int | None, current: str | None) -> tuple[list[str], str | None]:
    # every cluster the warehouse knows (an imported trace has inventory and jobs, no samples)
    names = fleet.known_clusters(context.get().wh)
    return names, current if current in names else (names[0] if names else None)


def _mean(frame: pl.DataFrame, column: str) -> float:
    value = frame[column].cast(pl.Float64).mean()
    return float(value) if isinstance(value, int | float) else 0.0


def _kpi(label: str, value: str) -> html.Div:
    return html.Div(
        [html.Div(value, className="value"), html.Div(label, className="label")], className="kpi"
    )


@callback(
    Output("overview-kpis", "children"),
    Output("overview-timeseries", "figure"),
    Output("overview-inventory", "children"),
    Input("overview-cluster", "value"),
    Input("overview-range", "value"),
    Input("overview-refresh", "n_intervals"),
)
def _refresh(
    cluster: str | None, range_key: str, _n: int | None
) -> tuple[list[Component], go.Figure, html.Table | html.P]:
    figure = go.Figure(
        layout={
            "template": "plotly_white",
            "height": 380,
            "margin": {"l": 50, "r": 20, "t": 30, "b": 40},
            "yaxis": {"title": "GPUs"},
        }
    )
    if not cluster:
        return [html.P("No data in the warehouse yet.", className="empty")], figure, html.P("")
    wh = context.get().wh
    end = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    start = end - dt.timedelta(days=RANGES.get(range_key, 7))
    hourly = fleet.fleet_hourly(wh, cluster, start, end)
    for column, name in (
        ("capacity_gpus", "Capacity"),
        ("allocated_gpus", "Allocated"),
        ("used_gpus", "Used"),
    ):
        figure.add_scatter(
            x=hourly["ts"].to_list(),
            y=hourly[column].to_list(),
            name=name,
            mode="lines",
            line={"shape": "hv"} if column == "capacity_gpus" else {},
        )
    inventory = fleet.fleet_summary(wh, cluster)
    if hourly.height:
        cap, alloc, used = (
            _mean(hourly, c) for c in ("capacity_gpus", "allocated_gpus", "used_gpus")
        )
        kpis: list[Component] = [
            _kpi("GPUs reporting (mean)", f"{cap:,.1f}"),
            _kpi("GPUs allocated (mean)", f"{alloc:,.1f} ({alloc / cap:.0%})" if cap else "0"),
            _kpi("GPUs' worth used (mean)", f"{used:,.1f} ({used / cap:.0%})" if cap else "0"),
            _kpi("Used ÷ allocated", f"{used / alloc:.0%}" if alloc else "–"),
        ]
    else:
        kpis = [html.P("No samples in this range.", className="empty")]
    table = html.Table(
        [html.Tr([html.Th(h) for h in ("GPU model", "Health", "GPUs")])]
        + [
            html.Tr([html.Td(r["gpu_model"]), html.Td(r["health"]), html.Td(f"{r['gpus']}")])
            for r in inventory.iter_rows(named=True)
        ],
        className="inventory",
        id="overview-inventory-table",
    )
    return kpis, figure, table
