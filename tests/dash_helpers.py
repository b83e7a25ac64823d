"""Driving a Dash callback the way the browser does: a POST to ``/_dash-update-component``
naming its outputs and the values of its inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dash_calls import valid_figures

#: The outputs of each page's callback (every one takes ``filters-state``; the GPU page also
#: ``gpu-uuid``).
IDLE = [
    ("idle-message", "children"),
    ("idle-rule", "children"),
    ("idle-kpis", "children"),
    ("idle-now", "rowData"),
    ("idle-trend", "figure"),
    ("idle-worst", "rowData"),
]
GPU = [
    ("gpu-message", "children"),
    ("gpu-identity", "children"),
    ("gpu-timeline", "figure"),
    ("gpu-holds", "rowData"),
    ("gpu-telemetry", "figure"),
]
#: The overview's callbacks, each with its outputs (every one takes ``filters-state``).
OVERVIEW = [
    [("overview-message", "children"), ("overview-kpis", "children")],
    [("overview-range", "children"), ("overview-timeseries", "figure")],
    [("overview-cost", "children")],
    [("overview-findings", "children")],
    [("overview-inventory", "children")],
]


def update(
    client: Any,
    outputs: Sequence[tuple[str, str]],
    inputs: Sequence[tuple[str, str, Any]],
    state: Sequence[tuple[str, str, Any]] = (),
) -> Any:
    """Post one callback's inputs; the Flask response (its JSON's ``response`` holds the
    outputs by component id)."""
    names = [f"{i}.{p}" for i, p in outputs]
    many = len(outputs) > 1
    body = {
        # several outputs are named "..a.b...c.d..", one as "a.b"
        "output": f"..{'...'.join(names)}.." if many else names[0],
        "outputs": [{"id": i, "property": p} for i, p in outputs]
        if many
        else {"id": outputs[0][0], "property": outputs[0][1]},
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "changedPropIds": [f"{inputs[0][0]}.{inputs[0][1]}"] if inputs else [],
        "state": [{"id": i, "property": p, "value": v} for i, p, v in state],
    }
    return client.post("/_dash-update-component", json=body)


def outputs(reply: Any) -> dict[str, dict[str, Any]]:
    """The outputs of a successful callback, by component id."""
    assert reply.status_code == 200, reply.data[:500]
    response: dict[str, dict[str, Any]] = reply.get_json()["response"]
    valid_figures(response)
    return response


def page(client: Any, callbacks: Sequence[Sequence[tuple[str, str]]], state: str) -> Any:
    """Every callback of a page whose callbacks take ``filters-state`` alone, posted one after
    the other: their outputs together, by component id."""
    got: dict[str, dict[str, Any]] = {}
    for outs in callbacks:
        got.update(outputs(update(client, outs, [("filters-state", "data", state)])))
    return got
