"""Driving a Dash callback the way the browser does: one POST to ``/_dash-update-component``
naming the outputs and the inputs' values (as tests/test_dashboard.py does by hand)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from gpuledger.commands import cmd_fragmentation, cmd_queues
from gpuledger.parser import parse
from gpuledger.settings import load_settings
from warehouse.client import Warehouse


def post(
    client: Any,
    outputs: Sequence[tuple[str, str]],
    inputs: Sequence[tuple[str, str, Any]],
    *,
    changed: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """The status and the response of the callback with ``outputs`` (id, property) fed
    ``inputs`` (id, property, value); the first input counts as the one that changed."""
    many = len(outputs) > 1
    names = [f"{i}.{p}" for i, p in outputs]
    outs = [{"id": i, "property": p} for i, p in outputs]
    body = {
        "output": (".." + "...".join(names) + "..") if many else names[0],
        "outputs": outs if many else outs[0],
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "changedPropIds": [changed or f"{inputs[0][0]}.{inputs[0][1]}"],
        "state": [],
    }
    reply = client.post("/_dash-update-component", json=body)
    if reply.status_code != 200:
        return reply.status_code, {}
    response: dict[str, Any] = reply.get_json()["response"]
    valid_figures(response)
    return 200, response


def valid_figures(response: dict[str, dict[str, Any]]) -> None:
    """Every figure of a callback's response is one plotly accepts: pages write some as
    dictionaries, which nothing validates on the way to the browser (a misspelt property
    would be dropped there in silence)."""
    for outputs in response.values():
        if isinstance(outputs.get("figure"), dict):
            go.Figure(outputs["figure"])  # raises, naming the property, on one it does not know
            assert not _bare_titles(outputs["figure"]), "plotly.js 3 reads titles as {'text': …}"


def _bare_titles(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k == "title" and isinstance(v, str)]
        return found + [t for v in value.values() for t in _bare_titles(v)]
    if isinstance(value, list):
        return [t for v in value for t in _bare_titles(v)]
    return []


def call(
    client: Any, outputs: Sequence[str], inputs: dict[str, Any], status: int = 200
) -> dict[str, Any]:
    """Post one callback: ``outputs`` as "id.property", ``inputs`` as {"id.property": value};
    returns {id: {property: value}} (the response's ``response``)."""
    got, response = post(
        client,
        [tuple(o.split(".", 1)) for o in outputs],  # type: ignore[misc]
        [(*k.split(".", 1), v) for k, v in inputs.items()],  # type: ignore[misc]
    )
    assert got == status, (got, outputs)
    return response


def text(value: Any) -> str:
    """A callback's output as one string, to search for names in."""
    return json.dumps(value)


def grid_rows(component: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a dash-ag-grid component as a callback returns it ([] for anything else)."""
    if component.get("type") == "AgGrid":
        rows: list[dict[str, Any]] = component["props"]["rowData"]
        return rows
    return []


def cli_json(command: str, wh: Warehouse, *argv: str) -> Any:
    """``gpuledger <command> ... --format json`` run in this process against ``wh``."""
    settings = load_settings(env={}, overrides={"warehouse": {"database": wh.database}})
    args = parse([command, *argv, "--format", "json"])
    run = {"fragmentation": cmd_fragmentation, "queues": cmd_queues}[command]
    out = io.StringIO()
    assert run(settings, args, wh=wh, out=out) == 0
    return json.loads(out.getvalue())
