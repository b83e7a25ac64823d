"""Driving a page's callback as the browser does: one POST to ``/_dash-update-component`` with
its outputs and inputs, read back as {component id: {property: value}}."""

from __future__ import annotations

from typing import Any


def call(
    client: Any,
    outputs: list[tuple[str, str]],
    inputs: list[tuple[str, str, Any]],
    *,
    changed: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """The status and the response of the callback with ``outputs`` (id, property) fed
    ``inputs`` (id, property, value); the first input counts as the one that changed."""
    if len(outputs) == 1:
        output = "{}.{}".format(*outputs[0])
    else:
        output = "...".join(f"{i}.{p}" for i, p in outputs).join(("..", ".."))
    body = {
        "output": output,
        "outputs": [{"id": i, "property": p} for i, p in outputs]
        if len(outputs) > 1
        else {"id": outputs[0][0], "property": outputs[0][1]},
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "changedPropIds": [changed or f"{inputs[0][0]}.{inputs[0][1]}"],
        "state": [],
    }
    reply = client.post("/_dash-update-component", json=body)
    if reply.status_code != 200:
        return reply.status_code, {}
    return 200, reply.get_json()["response"]
