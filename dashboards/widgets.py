"""What the pages share: who asks and with which filters, and how figures are shown (KPI
tiles, tables, money, durations, empty states and refusals)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import dash_ag_grid as dag
import plotly.graph_objects as go
from dash import html

from dashboards import context
from dashboards.context import Viewer
from dashboards.filters import Filters


def asking(state: str | None) -> tuple[Filters, Viewer]:
    """The shared filters (``filters-state``) and the viewer of the request being answered;
    raises :class:`~dashboards.context.Forbidden` or :class:`~gpuledger_errors.InputError`."""
    filters = Filters.parse(state or "", today=context.get().now().date())
    return filters, context.viewer()


def kpi(label: str, value: str, note: str = "") -> html.Div:
    parts = [html.Div(value, className="value"), html.Div(label, className="label")]
    if note:
        parts.append(html.Div(note, className="note"))
    return html.Div(parts, className="kpi")


def money(amount: Decimal | None, currency: str) -> str:
    return "–" if amount is None else f"{amount:,.2f} {currency}"


def gpus(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}".removesuffix(".0")


def duration(seconds: float) -> str:
    """3 h 05 min, 42 min, 2 d 4 h."""
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {rest:02d} min"
    return f"{hours // 24} d {hours % 24} h"


def when(t: dt.datetime | None) -> str:
    return "" if t is None else f"{t:%Y-%m-%d %H:%M}"


def grid(id_: str, columns: Sequence[dict[str, Any]], **kw: Any) -> dag.AgGrid:
    """An empty table (its rows come from a callback) with sortable, filterable columns."""
    return dag.AgGrid(
        id=id_,
        columnDefs=list(columns),
        rowData=[],
        defaultColDef={"sortable": True, "filter": True, "resizable": True},
        columnSize="responsiveSizeToFit",
        dashGridOptions={"domLayout": "autoHeight", "overlayNoRowsTemplate": "Nothing here"},
        **kw,
    )


def figure(**layout: Any) -> go.Figure:
    base = {"template": "plotly_white", "margin": {"l": 50, "r": 20, "t": 30, "b": 40}}
    return go.Figure(layout=base | layout)


def empty_figure(message: str) -> go.Figure:
    """A blank chart saying why it is blank."""
    fig = figure(height=220, xaxis={"visible": False}, yaxis={"visible": False})
    fig.add_annotation(text=message, showarrow=False, font={"size": 14})
    return fig


def refusal(exc: Exception) -> html.P:
    """What a page shows instead of figures it may not or cannot show."""
    return html.P(str(exc), className="error")
