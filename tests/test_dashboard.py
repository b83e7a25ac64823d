"""The overview page and the queries behind it, over real data in the embedded engine."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest
from conftest import recent

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent
from dashboards.app import create_app
from warehouse.analytics import fleet as fleet_view
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

# The fixture cluster, hour by hour (samples every 60 s, utilisation constant per GPU):
#
#   hour   GPU-a (util 0.60)        GPU-b (util 0.10)     capacity  allocated  used
#   10:00  job j1 holds it           free                  2         1.0        0.70
#   11:00  j1 until 11:30            free                  2         0.5        0.70
#   12:00  free                      j2 holds half of it   2         0.5        0.70
H10 = recent(dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC))
NOW = H10 + dt.timedelta(hours=3)


def _frame() -> pl.DataFrame:
    rows = []
    for gpu, util in (("GPU-a", 0.6), ("GPU-b", 0.1)):
        for minute in range(180):
            rows.append(
                (
                    H10 + dt.timedelta(minutes=minute),
                    "c1",
                    "n1",
                    gpu,
                    0,
                    "H100",
                    "nvidia",
                    "",
                    "",
                    util,
                    None,
                    None,
                    1,
                    2,
                    100.0,
                    None,
                    40.0,
                    1500,
                    None,
                    "",
                    "",
                    "",
                    "",
                    "test",
                )
            )
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


@pytest.fixture
def fleet(wh: Warehouse) -> Warehouse:
    ing = Ingestor(wh, 35, now=lambda: NOW)
    ing.write_gpus(
        [
            GpuInventory(H10, "c1", "p1", "n1", g, i, "H100")
            for i, g in enumerate(("GPU-a", "GPU-b"))
        ]
    )
    ing.write_samples(_frame())  # after the inventory: samples of unknown GPUs are kept back
    common = {
        "cluster": "c1",
        "tenant": "ml/vision",
        "org": "ml",
        "project": "vision",
        "gpu_model": "H100",
        "node": "n1",
    }
    ing.write_job_events(
        [
            JobEvent(H10, job_id="j1", event="started", gpu_uuids=("GPU-a",), **common),
            JobEvent(
                H10 + dt.timedelta(minutes=90),
                job_id="j1",
                event="finished",
                gpu_uuids=("GPU-a",),
                started_at=H10,
                **common,
            ),
            JobEvent(
                H10 + dt.timedelta(hours=2),
                job_id="j2",
                event="started",
                gpu_uuids=("GPU-b",),
                gpu_fraction=0.5,
                **common,
            ),
        ]
    )
    return wh


def test_fleet_hourly_matches_the_hand_computed_table(fleet: Warehouse) -> None:
    got = fleet_view.fleet_hourly(fleet, "c1", H10, NOW)
    assert got["ts"].to_list() == [H10 + dt.timedelta(hours=h) for h in range(3)]
    assert got["capacity_gpus"].to_list() == [2, 2, 2]
    assert [round(v, 6) for v in got["allocated_gpus"].to_list()] == [1.0, 0.5, 0.5]
    assert [round(v, 4) for v in got["used_gpus"].to_list()] == [0.7, 0.7, 0.7]
    # an open interval is clipped at the window's end, not extended to "now"
    half = fleet_view.fleet_hourly(fleet, "c1", H10, H10 + dt.timedelta(hours=2, minutes=30))
    assert round(half["allocated_gpus"][-1], 6) == 0.25


def test_fleet_summary_and_clusters(fleet: Warehouse) -> None:
    summary = fleet_view.fleet_summary(fleet, "c1")
    assert summary.rows() == [("H100", "healthy", 2, 2.0)]
    clusters = fleet_view.clusters(fleet)
    assert clusters["cluster"].to_list() == ["c1"] and clusters["samples"][0] == 360


def test_overview_page_serves_real_numbers(fleet: Warehouse) -> None:
    app = create_app(fleet)
    client = app.server.test_client()
    page = client.get("/")
    assert page.status_code == 200 and b"gpuledger" in page.data
    layout = json.dumps(client.get("/_dash-layout").get_json())
    assert "Overview" in layout  # the navigation
    assert "H100" not in layout and "c1" not in layout  # layouts hold no fleet data

    outputs = [
        {"id": "overview-kpis", "property": "children"},
        {"id": "overview-timeseries", "property": "figure"},
        {"id": "overview-inventory", "property": "children"},
    ]
    body = {
        "output": "..overview-kpis.children...overview-timeseries.figure..."
        "overview-inventory.children..",
        "outputs": outputs,
        "inputs": [
            {"id": "overview-cluster", "property": "value", "value": "c1"},
            {"id": "overview-range", "property": "value", "value": "30d"},
            {"id": "overview-refresh", "property": "n_intervals", "value": None},
        ],
        "changedPropIds": ["overview-cluster.value"],
        "state": [],
    }
    reply = client.post("/_dash-update-component", json=body)
    assert reply.status_code == 200, reply.data[:500]
    response = reply.get_json()["response"]
    figure = response["overview-timeseries"]["figure"]
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["Capacity", "Allocated", "Used"]
    capacity = figure["data"][0]["y"]
    assert capacity == [2, 2, 2]
    inventory = json.dumps(response["overview-inventory"]["children"])
    assert "H100" in inventory and "healthy" in inventory


def test_the_cluster_list_holds_clusters_without_samples(wh: Warehouse) -> None:
    """An imported trace has inventory and job events but no samples: its cluster is listed."""
    Ingestor(wh, 35).write_gpus([GpuInventory(H10, "trace-c", "p", "n1", "g1", 0, "H100")])
    client = create_app(wh).server.test_client()
    body = {
        "output": "..overview-cluster.options...overview-cluster.value..",
        "outputs": [
            {"id": "overview-cluster", "property": "options"},
            {"id": "overview-cluster", "property": "value"},
        ],
        "inputs": [
            {"id": "overview-refresh", "property": "n_intervals", "value": None},
            {"id": "overview-cluster", "property": "value", "value": None},
        ],
        "changedPropIds": [],
        "state": [],
    }
    reply = client.post("/_dash-update-component", json=body)
    assert reply.status_code == 200, reply.data[:500]
    response = reply.get_json()["response"]
    assert response["overview-cluster"] == {"options": ["trace-c"], "value": "trace-c"}
