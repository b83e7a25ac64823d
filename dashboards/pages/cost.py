"""Cost and chargeback: the ledger of the range by any grouping and idle policy (the shared
filters ``by`` and ``idle_policy``), its totals and whether it adds up to capacity cost, why
the month's cost changed from the month before, and the ledger as CSV or XLSX.

Figures come from :mod:`dashboards.answers` (the ledger, why_cost), limited to the viewer's
tenant in every callback; the downloads (:mod:`dashboards.downloads`) check it again.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import dash
import dash_ag_grid as dag
import plotly.graph_objects as go
from dash import Input, Output, callback, dcc, html
from dash.development.base_component import Component

from dashboards import grids, widgets
from dashboards.answers import cost as cost_answers
from dashboards.answers import ledger as ledger_answers
from dashboards.context import Forbidden, ask
from dashboards.downloads import table
from gpuledger_errors import InputError
from warehouse.ledger import CostChange, Ledger

dash.register_page(__name__, path="/cost", name="Cost", title="gpuledger — cost and chargeback")

_TOP = 25  # bars shown; the table holds every row
_MARGIN = {"l": 50, "r": 20, "t": 30, "b": 80}


def _columns(by: str, currency: str) -> list[dict[str, Any]]:
    return [
        grids.column(by, by.replace("_", " ").capitalize(), pinned="left", minWidth=200),
        grids.number("allocated_gpu_hours", "Allocated GPU-h"),
        grids.number("used_gpu_hours", "Used GPU-h"),
        grids.number("idle_gpu_hours", "Idle GPU-h"),
        grids.number("unmeasured_gpu_hours", "Unmeasured GPU-h"),
        grids.money("direct_cost", f"Direct ({currency})"),
        grids.money("shared_cost", f"Unallocated share ({currency})"),
        grids.money("total_cost", f"Total ({currency})"),
    ]


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.H2("Cost and chargeback"),
            html.Div(
                [
                    html.A("Download CSV", id="cost-csv", href="/download/ledger.csv"),
                    html.A("Download XLSX", id="cost-xlsx", href="/download/ledger.xlsx"),
                ],
                className="controls",
            ),
            dcc.Loading(
                [
                    html.Div(id="cost-kpis", className="kpis"),
                    html.Div(id="cost-conservation"),
                    dcc.Graph(id="cost-bars", figure=_figure()),
                    dag.AgGrid(
                        id="cost-ledger",
                        columnDefs=_columns("tenant", ""),
                        rowData=[],
                        defaultColDef={"resizable": True, "sortable": True, "filter": True},
                        columnSize="autoSize",
                        style={"height": "460px"},
                    ),
                ]
            ),
            html.H3("Month over month"),
            dcc.Loading(
                [
                    html.Div(id="cost-change-text"),
                    dcc.Graph(id="cost-change-waterfall", figure=_figure()),
                ]
            ),
        ]
    )


def _figure(**layout: Any) -> go.Figure:
    return go.Figure(layout={"template": widgets.LOOK, "height": 360, "margin": _MARGIN, **layout})


def _kpi(label: str, value: str) -> html.Div:
    return html.Div(
        [html.Div(value, className="value"), html.Div(label, className="label")], className="kpi"
    )


@callback(
    Output("cost-csv", "href"),
    Output("cost-xlsx", "href"),
    Input("filters-state", "data"),
)
def _links(state: str | None) -> tuple[str, str]:
    """The download links carry the filters the viewer may ask for (the route checks the
    viewer again itself); none when the filters ask for what the viewer may not see."""
    try:
        filters, who = widgets.asked(state)
        query = filters.query(tenant=who.scope(filters.tenant) or "")
    except (Forbidden, InputError):
        return "", ""
    return "/download/ledger.csv" + query, "/download/ledger.xlsx" + query


def _kpis(ledger: Ledger) -> list[Component]:
    t, cur = ledger.totals, ledger.currency
    kpis: list[Component] = [_kpi(f"Total cost ({cur})", f"{t.total_cost:,.2f}")]
    if t.capacity_cost is not None:
        kpis.append(_kpi(f"Capacity cost ({cur})", f"{t.capacity_cost:,.2f}"))
    kpis.append(_kpi("Allocated GPU-hours", f"{t.allocated_gpu_hours:,.1f}"))
    if t.used_gpu_hours is not None and t.allocated_gpu_hours:
        share = t.used_gpu_hours / t.allocated_gpu_hours
        kpis.append(_kpi("Used GPU-hours", f"{t.used_gpu_hours:,.1f} ({share:.0%})"))
    if t.idle_gpu_hours is not None:
        kpis.append(_kpi("Idle allocated GPU-hours", f"{t.idle_gpu_hours:,.1f}"))
    if t.unallocated_gpu_hours is not None:
        kpis.append(_kpi("Unallocated GPU-hours", f"{t.unallocated_gpu_hours:,.1f}"))
    return kpis


def _bars(ledger: Ledger) -> go.Figure:
    rows = sorted(ledger.rows, key=lambda r: r.total_cost, reverse=True)[:_TOP]
    figure = _figure(yaxis={"title": f"cost ({ledger.currency})"}, barmode="stack")
    keys = [r.key for r in rows]
    figure.add_bar(x=keys, y=[float(r.direct_cost) for r in rows], name="direct")
    figure.add_bar(x=keys, y=[float(r.shared_cost) for r in rows], name="unallocated share")
    if ledger.unallocated is not None:
        figure.add_bar(x=["unallocated"], y=[float(ledger.unallocated.cost)], name="unallocated")
    return figure


@callback(
    Output("cost-kpis", "children"),
    Output("cost-conservation", "children"),
    Output("cost-bars", "figure"),
    Output("cost-ledger", "columnDefs"),
    Output("cost-ledger", "rowData"),
    Output("cost-ledger", "dashGridOptions"),
    Input("filters-state", "data"),
)
def _ledger(state: str | None) -> tuple[Any, ...]:
    """The ledger of the range for the viewer, by the filters' grouping and idle policy."""
    try:
        filters, who = widgets.asked(state)
        ledger = ask(ledger_answers.shown, filters, who)
    except (Forbidden, InputError) as exc:
        return [], widgets.message(str(exc)), _figure(), dash.no_update, [], {}
    columns = _columns(ledger.group_by, ledger.currency)
    if not ledger.rows and ledger.unallocated is None:
        empty = f"No GPU-hours from {filters.first} to {filters.last} in these filters."
        return [], widgets.message(empty), _figure(), columns, [], {}
    header, cells = table(ledger)
    rows = [
        {h: float(v) if isinstance(v, Decimal) else v for h, v in zip(header, r, strict=True)}
        for r in cells
    ]
    t = ledger.totals
    direct = sum((r.direct_cost for r in ledger.rows), Decimal(0))
    total = {
        ledger.group_by: "total",
        "allocated_gpu_hours": t.allocated_gpu_hours,
        "used_gpu_hours": t.used_gpu_hours,
        "idle_gpu_hours": t.idle_gpu_hours,
        "unmeasured_gpu_hours": t.unmeasured_gpu_hours,
        "direct_cost": float(direct),
        "shared_cost": float(t.total_cost - direct),
        "total_cost": float(t.total_cost),
    }
    note = html.P(ledger.conservation_note(), className="caption", id="cost-conservation-note")
    return (
        _kpis(ledger),
        note,
        _bars(ledger),
        columns,
        rows,
        {"pinnedBottomRowData": [total]},
    )


@callback(
    Output("cost-change-text", "children"),
    Output("cost-change-waterfall", "figure"),
    Input("filters-state", "data"),
)
def _change(state: str | None) -> tuple[Any, go.Figure]:
    """Why the cost of the range's last month differs from the month before."""
    try:
        filters, who = widgets.asked(state)
        change = ask(cost_answers.change, filters, who)
    except (Forbidden, InputError) as exc:
        return widgets.message(str(exc)), _figure()
    lines = change.to_text().splitlines()
    text = html.Div([html.P(lines[0]), html.Ul([html.Li(x.strip()) for x in lines[1:]])])
    return text, _waterfall(change)


def _waterfall(change: CostChange) -> go.Figure:
    a, b = change.previous, change.current
    steps = (
        (a.label(), a.total, "absolute"),
        ("volume", change.volume, "relative"),
        ("GPU-model mix", change.mix, "relative"),
        ("price", change.price, "relative"),
        ("unallocated share", change.unallocated_share, "relative"),
        (b.label(), b.total, "total"),
    )
    figure = _figure(yaxis={"title": f"cost ({change.currency})"}, showlegend=False)
    figure.add_trace(
        go.Waterfall(
            x=[s[0] for s in steps],
            y=[float(s[1]) for s in steps],
            measure=[s[2] for s in steps],
            text=[f"{s[1]:,.2f}" for s in steps],
        )
    )
    return figure
