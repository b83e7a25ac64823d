"""Dash's answers written by orjson in one pass (dashboards.answer_json) read exactly as
plotly's own writer writes them."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import dash_ag_grid as dag
import numpy as np
import plotly.graph_objects as go
import pytest
from dash import dcc, html

from dashboards import answer_json


def _plotly(value: object) -> str:
    return str(answer_json._PLOTLY(value))


def test_an_answer_of_components_figures_and_grids_is_written_as_plotly_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    when = dt.datetime(2026, 12, 7, 20, 15, 3, 250000, tzinfo=dt.UTC)
    figure = go.Figure(go.Scatter(x=[when, when + dt.timedelta(minutes=1)], y=[0.25, None]))
    answer = {
        "response": {
            "kpis": {
                "children": html.Div(
                    [
                        html.Div("12.5 GPU-h idle", className="value"),
                        html.Span(["team-x </script>", html.B("\u2028 line")]),
                        dcc.Link("GPU-1", href="/gpu/GPU-1?from=2026-11-08&to=2026-12-07"),
                    ]
                )
            },
            "chart": {"figure": figure},
            "grid": {
                "children": dag.AgGrid(
                    rowData=[{"cost": Decimal("12.34"), "day": dt.date(2026, 12, 1)}],
                    columnDefs=[{"field": "cost"}, {"field": "day"}],
                )
            },
            "plain": {"data": {"ratio": np.float64(0.5), "ints": np.arange(3), "n": None}},
        },
        "multi": True,
    }
    want = _plotly(answer)
    monkeypatch.setattr(answer_json, "_PLOTLY", None)  # written in one pass, never handed on
    fast = answer_json.to_json(answer)
    assert fast == want
    assert "\\u003c\\u002fscript\\u003e" in fast and "\\u2028" in fast  # escaped as plotly does


def test_what_orjson_cannot_write_falls_back_to_plotly() -> None:
    answer = {
        "labels": np.array(["a", "b"]),
        "div": html.Div("x"),
        "when": np.datetime64("2026-12-07"),
    }
    assert answer_json.to_json(answer) == _plotly(answer)
    assert answer_json.to_json(answer, pretty=True) == str(answer_json._PLOTLY(answer, pretty=True))
