"""Driving a Dash callback the way the browser does: one POST to ``/_dash-update-component``
naming the outputs and the inputs' values (as tests/test_dashboard.py does by hand)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

from gpuledger.commands import cmd_fragmentation, cmd_queues
from gpuledger.parser import parse
from gpuledger.settings import load_settings
from warehouse.client import Warehouse


def call(
    client: Any, outputs: Sequence[str], inputs: dict[str, Any], status: int = 200
) -> dict[str, Any]:
    """Post one callback: ``outputs`` as "id.property", ``inputs`` as {"id.property": value};
    returns {id: {property: value}} (the response's ``response``)."""
    outs = [dict(zip(("id", "property"), o.split(".", 1), strict=True)) for o in outputs]
    many = len(outs) > 1
    body = {
        "output": (".." + "...".join(outputs) + "..") if many else outputs[0],
        "outputs": outs if many else outs[0],
        "inputs": [
            {"id": k.split(".", 1)[0], "property": k.split(".", 1)[1], "value": v}
            for k, v in inputs.items()
        ],
        "changedPropIds": [next(iter(inputs))],
        "state": [],
    }
    reply = client.post("/_dash-update-component", json=body)
    assert reply.status_code == status, reply.data[:800]
    response: dict[str, Any] = reply.get_json()["response"]
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
