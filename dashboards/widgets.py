"""Pieces the pages share: reading who asks and what (the shell's filters), and rendering
tables, figures, KPI tiles, money, durations and messages in one look. No data of its own:
every figure a page shows comes from :mod:`dashboards.answers` or the warehouse's analytics."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import dash_ag_grid as dag

# Whole before any figure: plotly takes pandas from sys.modules without importing it, and finds
# it half-imported while a periodic job's thread is importing it (seen: serve failed to start).
import pandas  # noqa: F401
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from dash import html

from dashboards import context
from dashboards.context import Viewer
from dashboards.filters import Filters
from warehouse.times import format_duration


def asked(state: str | None) -> tuple[Filters, Viewer]:
    """The shared filters (from the ``filters-state`` store) and who asks; raises
    :class:`~dashboards.context.Forbidden` or :class:`~gpuledger_errors.InputError`, which a
    callback renders with :func:`message`."""
    filters = Filters.parse(state or "", today=context.get().now().date())
    return filters, context.viewer()


def message(text: str, kind: str = "empty") -> html.P:
    """A short sentence in place of figures: an empty state, or a refusal (``kind="error"``)."""
    return html.P(text, className=kind)


def when(ts: dt.datetime | None) -> str:
    """An instant as people read it on a page (UTC)."""
    return f"{ts:%Y-%m-%d %H:%M} UTC" if ts is not None else ""


def _cell(value: Any, name: str) -> Any:
    if name.endswith("_s") and isinstance(value, int | float):
        return format_duration(value)
    if isinstance(value, dt.datetime):
        return when(value)
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return value


def table(
    component_id: str,
    frame: pl.DataFrame,
    columns: Mapping[str, str],
    *,
    empty: str,
    height: int | None = None,
    pick: bool = False,
) -> dag.AgGrid | html.P:
    """``frame``'s ``columns`` (name → header) as a sortable grid, durations (``_s``) in
    words and times in UTC; ``empty`` in its place when it has no rows. With ``pick``, a click
    selects one row (its ``selectedRows``)."""
    if not frame.height:
        return message(empty)
    names = [c for c in columns if c in frame.columns]
    rows = [{n: _cell(r[n], n) for n in names} for r in frame.select(names).iter_rows(named=True)]
    style = {"height": f"{height}px"} if height else {}
    options: dict[str, Any] = {"domLayout": "autoHeight"} if not height else {}
    if pick:
        options["rowSelection"] = {
            "mode": "singleRow",
            "checkboxes": False,
            "enableClickSelection": True,
        }
    return dag.AgGrid(
        id=component_id,
        rowData=rows,
        columnDefs=[{"field": n, "headerName": columns[n]} for n in names],
        defaultColDef={"sortable": True, "resizable": True, "filter": True},
        columnSize="responsiveSizeToFit",
        dashGridOptions=options,
        style=style,
    )


#: plotly_white's layout alone: the whole template (every trace type's defaults) is copied into
#: each figure, some 60 ms a figure.
LOOK = go.layout.Template(layout=pio.templates["plotly_white"].layout)
_MARGIN = {"l": 60, "r": 20, "t": 30, "b": 40}


def figure(height: int = 360, **layout: Any) -> go.Figure:
    """An empty figure in the house look."""
    return go.Figure(layout=_layout(height, layout))


def chart(traces: list[dict[str, Any]], height: int = 360, **layout: Any) -> dict[str, Any]:
    """A figure as the dictionary plotly.js reads, in the house look of :func:`figure`: for
    traces of many points, which a ``go.Figure`` copies and validates one by one (hundreds of
    milliseconds for a month of hourly series). Each trace names its ``type``, and titles are
    ``{"text": …}`` (plotly.js 3 reads no bare string there; a ``go.Figure`` converts it)."""
    return {"data": traces, "layout": _layout(height, layout)}


def _layout(height: int, layout: dict[str, Any]) -> dict[str, Any]:
    return {"template": LOOK, "height": height, "margin": _MARGIN, **layout}


def blank(text: str, height: int = 360) -> go.Figure:
    """A figure with no data that says why, instead of empty axes."""
    fig = figure(height, xaxis={"visible": False}, yaxis={"visible": False})
    fig.add_annotation(text=text, showarrow=False, font={"size": 14, "color": "#5b6478"})
    return fig


def kpi(label: str, value: str, note: str = "") -> html.Div:
    parts = [html.Div(value, className="value"), html.Div(label, className="label")]
    if note:
        parts.append(html.Div(note, className="note"))
    return html.Div(parts, className="kpi")


def words(seconds: Sequence[float | None]) -> list[str]:
    """Durations in words (see :func:`warehouse.times.format_duration`)."""
    return [format_duration(s) for s in seconds]


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


def refusal(exc: Exception) -> html.P:
    """What a page shows instead of figures it may not or cannot show."""
    return message(str(exc), "error")
