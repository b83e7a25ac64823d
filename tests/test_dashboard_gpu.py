"""The GPU page on the hand-made cluster of ``moment_fixture``: a manager sees the GPU's
telemetry and every job that held it; a tenant sees the GPU only while its own jobs held it,
and a GPU it never held (or one that does not exist) reads the same."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import moment_fixture as m
import pytest
from conftest import fresh_database
from dash_helpers import GPU, outputs, update

from dashboards.app import create_app
from dashboards.context import Viewer
from warehouse.analytics import gpu
from warehouse.client import Warehouse

STATE = f"?from={m.DAY}&to={m.DAY}"


@pytest.fixture(scope="module")
def moment(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield m.write(wh)


def _page(wh: Warehouse, role: str, uuid: str, state: str = STATE) -> dict[str, Any]:
    who = Viewer("someone", role)
    client = create_app(wh, viewer=lambda: who, now=lambda: m.NOW).server.test_client()
    inputs = [("filters-state", "data", state), ("gpu-uuid", "data", uuid)]
    return outputs(update(client, GPU, inputs))


def _times(figure: dict[str, Any]) -> list[dt.datetime]:
    """Every x of the figure's traces, as UTC times."""
    return [
        dt.datetime.fromisoformat(x).replace(tzinfo=dt.UTC)
        if "+" not in x
        else dt.datetime.fromisoformat(x)
        for trace in figure["data"]
        for x in trace.get("x", [])
    ]


def test_a_manager_sees_every_hold_and_how_much_of_it_was_idle(moment: Warehouse) -> None:
    got = _page(moment, "manager", "g-half")
    holds = {r["job_id"]: r for r in got["gpu-holds"]["rowData"]}
    assert sorted(holds) == ["j-half", "j-prev"]
    assert (holds["j-prev"]["tenant"], holds["j-prev"]["idle_gpu_hours"]) == ("team-x/a", 3.0)
    assert (holds["j-half"]["held_gpu_hours"], holds["j-half"]["idle_gpu_hours"]) == (0.5, 0.5)
    assert holds["j-half"]["end"] == "still held"
    identity = json.dumps(got["gpu-identity"]["children"])
    assert "H100" in identity and "n1" in identity
    panels = got["gpu-telemetry"]["figure"]
    names = [t["name"] for t in panels["data"]]
    assert names[:2] == ["Utilisation (mean)", "Utilisation (busiest sample)"]
    assert "Power W" in names and "Temperature °C" in names and "Memory used GiB" in names
    util = panels["data"][0]["y"]
    assert util and all(v == pytest.approx(1.0) for v in util)  # 1 % all along
    times = _times(panels)
    assert min(times) == m.at(-1) and max(times) < m.NOW  # samples from T - 1 h
    (idle,) = [t for t in got["gpu-timeline"]["figure"]["data"] if t["line"]["color"] == "#d9534f"]
    assert idle["x"].count(None) == 2  # one idle stretch per hold, each ended by a gap


def test_a_tenant_sees_the_gpu_only_while_its_jobs_held_it(moment: Warehouse) -> None:
    got = _page(moment, "tenant:team-y", "g-half")
    assert [r["job_id"] for r in got["gpu-holds"]["rowData"]] == ["j-half"]
    text = json.dumps(got)
    assert "team-x" not in text and "j-prev" not in text
    times = _times(got["gpu-telemetry"]["figure"])
    held_from = m.NOW - dt.timedelta(hours=1)
    assert times and min(times) >= held_from and max(times) < m.NOW
    # the manager's view of the same GPU has the hour before, held by team-x
    assert min(_times(_page(moment, "manager", "g-half")["gpu-telemetry"]["figure"])) < held_from


@pytest.mark.parametrize("uuid", ["g-idle", "no-such-gpu"])
def test_a_gpu_the_tenant_never_held_shows_nothing(moment: Warehouse, uuid: str) -> None:
    got = _page(moment, "tenant:team-y", uuid)
    assert f"No job of team-y held GPU {uuid}" in json.dumps(got["gpu-message"])
    assert got["gpu-holds"]["rowData"] == [] and got["gpu-identity"]["children"] == []
    assert _times(got["gpu-telemetry"]["figure"]) == []
    assert "team-x" not in json.dumps(got) and "H100" not in json.dumps(got)


def test_a_forged_callback_for_another_tenant_is_refused(moment: Warehouse) -> None:
    got = _page(moment, "tenant:team-y", "g-half", STATE + "&tenant=team-x")
    assert "may see the figures of tenant" in json.dumps(got["gpu-message"])
    assert got["gpu-holds"]["rowData"] == [] and "j-prev" not in json.dumps(got)


def test_an_unknown_gpu_is_said_so_to_a_manager(moment: Warehouse) -> None:
    got = _page(moment, "manager", "no-such-gpu")
    assert "not in the warehouse's inventory" in json.dumps(got["gpu-message"])


def test_the_page_is_served(moment: Warehouse) -> None:
    client = create_app(moment, now=lambda: m.NOW).server.test_client()
    assert client.get("/gpu/g-half").status_code == 200


def test_a_hold_starting_inside_a_bucket_shows_none_of_the_minutes_before_it(
    moment: Warehouse,
) -> None:
    """Only minutes wholly inside the holds are read, and each bucket is dated by its first
    one: a hold from 12:03:30 shows 12:04 onwards, never 12:00."""
    start = m.NOW - dt.timedelta(minutes=56, seconds=30)
    frame = gpu.telemetry(
        moment, "c1", "g-half", m.at(-1), m.NOW, within=[(start, m.NOW)], step_s=300
    )
    assert frame["t"].min() == m.NOW - dt.timedelta(minutes=56)
    assert int(frame["minutes"].sum()) == 56
    assert frame["bucket"].min() < frame["t"].min()  # the bucket itself begins before the hold
    everything = gpu.telemetry(moment, "c1", "g-half", m.at(-1), m.NOW, step_s=300)
    assert int(everything["minutes"].sum()) == 240
