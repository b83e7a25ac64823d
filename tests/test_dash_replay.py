"""The page-load replay (``benchmarks/dash_replay.py``) on a small Dash app of its own: callbacks
fire after those that feed them, with what they returned; components a callback adds get
their callbacks called; pattern-matching ids; clicks; pinned props (a forged filters state).
The page tests and the dashboard bench trust it to fire what a browser would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dash_ag_grid as dag
from dash import ALL, MATCH, Dash, Input, Output, State, dcc, html

from benchmarks.dash_replay import Replay


def _app() -> Dash:
    app = Dash(__name__)
    app.layout = html.Div(
        [
            dcc.Input(id="toy-a", value=2),
            html.Div(id="toy-b"),
            html.Div(id="toy-c"),
            html.Button(id="toy-button"),
            html.Div(id="toy-clicked"),
            html.Div(id="toy-holder"),
            html.Div(id="toy-late-out"),
            *(html.Div(id={"type": "toy-item", "i": i}) for i in range(3)),
            *(dcc.Input(id={"type": "toy-row-in", "i": i}, value=i * 10) for i in range(2)),
            *(html.Div(id={"type": "toy-row", "i": i}) for i in range(2)),
        ]
    )

    @app.callback(Output("toy-c", "children"), Input("toy-b", "children"))
    def c(b: Any) -> Any:  # registered before what feeds it: the order must come from the graph
        return None if b is None else f"c of {b}"

    @app.callback(Output("toy-b", "children"), Input("toy-a", "value"))
    def b(a: Any) -> Any:
        return int(a) * 2

    @app.callback(
        Output("toy-clicked", "children"),
        Input("toy-button", "n_clicks"),
        State("toy-a", "value"),
        prevent_initial_call=True,
    )
    def clicked(n: Any, a: Any) -> str:
        return f"clicked {n} with {a}"

    @app.callback(Output("toy-holder", "children"), Input("toy-a", "value"))
    def holder(a: Any) -> Any:
        return dcc.Input(id="toy-late", value=f"late {a}")

    @app.callback(Output("toy-late-out", "children"), Input("toy-late", "value"))
    def late(value: Any) -> Any:
        return f"saw {value}"

    @app.callback(Output({"type": "toy-item", "i": ALL}, "children"), Input("toy-a", "value"))
    def items(a: Any) -> list[Any]:
        return [f"{a}-{i}" for i in range(3)]

    @app.callback(
        Output({"type": "toy-row", "i": MATCH}, "children"),
        Input({"type": "toy-row-in", "i": MATCH}, "value"),
    )
    def row(value: Any) -> Any:
        return value + 1

    return app


class _Flask:
    """The replay's transport over Flask's test client (no server needed)."""

    def __init__(self, app: Dash) -> None:
        self.client = app.server.test_client()

    def get(self, path: str) -> tuple[int, str]:
        got = self.client.get(path)
        return got.status_code, got.get_data(as_text=True)

    def post(self, path: str, body: Mapping[str, Any]) -> tuple[int, str]:
        got = self.client.post(path, json=dict(body))
        return got.status_code, got.get_data(as_text=True)


def test_a_load_fires_what_the_renderer_would() -> None:
    replay = Replay(_Flask(_app()))
    load = replay.load("/")
    assert not [c for c in load.calls if c.failed]
    props = load.props
    assert props["toy-b"]["children"] == 4
    assert props["toy-c"]["children"] == "c of 4"  # after b, from b's answer
    assert props["toy-late-out"]["children"] == "saw late 2"  # a component a callback added
    items = [props[f'{{"i":{i},"type":"toy-item"}}']["children"] for i in range(3)]
    assert items == ["2-0", "2-1", "2-2"]
    rows = [props[f'{{"i":{i},"type":"toy-row"}}']["children"] for i in range(2)]
    assert rows == [1, 11]  # one call per MATCH
    fired = [c.callback for c in load.calls]
    assert "toy-clicked.children" not in fired  # no click, no call
    assert fired.index("toy-b.children") < fired.index("toy-c.children")
    assert len(fired) == len(set(fired)) + 1  # each once, the MATCH one twice


def test_clicks_and_pinned_props() -> None:
    replay = Replay(_Flask(_app()))
    load = replay.load("/", force={("toy-a", "value"): 5}, actions=True)
    assert load.props["toy-b"]["children"] == 10
    assert load.props["toy-clicked"]["children"] == "clicked 1 with 5"
    assert [c.callback for c in load.calls if c.action] == ["toy-clicked.children"]


def test_an_infinite_grid_asks_for_its_first_block_when_acted() -> None:
    """An infinite grid asks for its rows itself (a browser's grid, once shown): acted, the
    replay asks for its first block, of the grid's block size, with the state read then."""
    app = Dash(__name__)
    app.layout = html.Div(
        [
            dcc.Input(id="toy-a", value=3),
            dag.AgGrid(
                id="toy-grid",
                rowModelType="infinite",
                columnDefs=[{"field": "n"}],
                dashGridOptions={"cacheBlockSize": 7},
            ),
            dag.AgGrid(id="toy-plain", columnDefs=[{"field": "n"}], rowData=[]),
        ]
    )

    @app.callback(
        Output("toy-grid", "getRowsResponse"),
        Input("toy-grid", "getRowsRequest"),
        State("toy-a", "value"),
        prevent_initial_call=True,
    )
    def rows(asked: Any, a: Any) -> dict[str, Any]:
        first, last = asked["startRow"], asked["endRow"]
        return {"rowData": [{"n": int(a) * i} for i in range(first, last)], "rowCount": 99}

    @app.callback(
        Output("toy-a", "value"), Input("toy-plain", "getRowsRequest"), prevent_initial_call=True
    )
    def never(asked: Any) -> Any:  # a grid of the client-side model asks for nothing
        raise AssertionError(asked)

    load = Replay(_Flask(app)).load("/", actions=True)
    assert not [c for c in load.calls if c.failed]
    [asked] = [c for c in load.calls if c.action]
    assert asked.callback == "toy-grid.getRowsResponse"
    assert load.props["toy-grid"]["getRowsResponse"]["rowData"] == [{"n": 3 * i} for i in range(7)]
