"""The overview page and the queries behind it, over real data in the embedded engine: the
hand-computed fleet below, and the cluster "right now" of ``moment_fixture``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import moment_fixture as m
import polars as pl
import pytest
from conftest import fresh_database, recent
from dash_helpers import GPU, IDLE, OVERVIEW, outputs, page, update

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent
from dashboards.app import create_app
from dashboards.context import Viewer
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


def test_the_fleet_by_pool_and_model_counts_only_their_gpus(fleet: Warehouse) -> None:
    whole = fleet_view.fleet_hourly(fleet, "c1", H10, NOW)
    assert fleet_view.fleet_hourly(fleet, "c1", H10, NOW, gpu_model="H100").equals(whole)
    assert fleet_view.fleet_hourly(fleet, "c1", H10, NOW, gpu_model="A100").is_empty()
    assert fleet_view.fleet_hourly(fleet, "c1", H10, NOW, pool="p9").is_empty()
    # GPU-b moves to pool p2: p1's hours count GPU-a alone (util 0.60), p2's GPU-b alone
    Ingestor(fleet, 35, now=lambda: NOW).write_gpus(
        [GpuInventory(NOW, "c1", "p2", "n1", "GPU-b", 1, "H100")]
    )
    p1 = fleet_view.fleet_hourly(fleet, "c1", H10, NOW, pool="p1")
    assert p1["capacity_gpus"].to_list() == [1, 1, 1]
    assert [round(v, 4) for v in p1["used_gpus"].to_list()] == [0.6, 0.6, 0.6]
    p2 = fleet_view.fleet_hourly(fleet, "c1", H10, NOW, pool="p2")
    assert [round(v, 4) for v in p2["used_gpus"].to_list()] == [0.1, 0.1, 0.1]
    assert fleet_view.fleet_summary(fleet, "c1", pool="p2").rows() == [("H100", "healthy", 1, 1.0)]
    assert fleet_view.fleet_summary(fleet, "c1", gpu_model="A100").is_empty()


def test_fleet_summary_and_clusters(fleet: Warehouse) -> None:
    summary = fleet_view.fleet_summary(fleet, "c1")
    assert summary.rows() == [("H100", "healthy", 2, 2.0)]
    clusters = fleet_view.clusters(fleet)
    assert clusters["cluster"].to_list() == ["c1"] and clusters["samples"][0] == 360


def _overview(wh: Warehouse, now: dt.datetime, role: str = "manager", state: str = "") -> Any:
    who = Viewer("someone", role)
    client = create_app(wh, viewer=lambda: who, now=lambda: now).server.test_client()
    return page(client, OVERVIEW, state)


def test_the_overview_says_the_instant_its_ledger_figures_are_as_of(fleet: Warehouse) -> None:
    """The server's live tail sets the ledger's "now" a pass behind the clock: the page says so."""
    earlier = NOW - dt.timedelta(minutes=1)
    client = create_app(fleet, now=lambda: NOW, as_of=lambda: earlier).server.test_client()
    got = page(client, OVERVIEW, "")
    notes = {
        tile["props"]["children"][1]["props"]["children"]: tile["props"]["children"][2]["props"][
            "children"
        ]
        for tile in got["overview-kpis"]["children"]
        if len(tile["props"]["children"]) > 2
    }
    assert notes["GPUs allocated now"] == f"as of {earlier:%Y-%m-%d %H:%M} UTC"


def test_overview_page_serves_real_numbers(fleet: Warehouse) -> None:
    app = create_app(fleet, now=lambda: NOW)
    client = app.server.test_client()
    page = client.get("/")
    assert page.status_code == 200 and b"gpuledger" in page.data
    layout = json.dumps(client.get("/_dash-layout").get_json())
    assert "Overview" in layout  # the navigation
    assert "H100" not in layout and "c1" not in layout  # layouts hold no fleet data

    response = _overview(fleet, NOW)
    figure = response["overview-timeseries"]["figure"]
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["Capacity", "Allocated", "Used", "Idle (mean of the day)"]
    assert figure["data"][0]["y"] == [2, 2, 2]  # the hand-computed table
    assert [round(v, 6) for v in figure["data"][1]["y"]] == [1.0, 0.5, 0.5]
    assert [round(v, 4) for v in figure["data"][2]["y"]] == [0.7, 0.7, 0.7]
    inventory = json.dumps(response["overview-inventory"]["children"])
    assert "H100" in inventory and "healthy" in inventory
    kpis = json.dumps(response["overview-kpis"]["children"])
    # now: 2 GPUs in inventory; j2 holds half of GPU-b (at 10 %), nothing idle
    assert '"GPUs in inventory now"' in kpis
    tiles = {k["props"]["children"][1]["props"]["children"]: k["props"]["children"][0]
             ["props"]["children"] for k in response["overview-kpis"]["children"]}  # fmt: skip
    assert tiles["GPUs in inventory now"] == "2"
    assert tiles["GPUs allocated now"] == "0.5"
    assert tiles["GPUs' worth used now"] == "0.1"  # 0.5 x 10 %, shown to 0.1
    assert tiles["GPUs idle in jobs now"] == "0"


def test_the_cluster_list_holds_clusters_without_samples(wh: Warehouse) -> None:
    """An imported trace has inventory and job events but no samples: its cluster is listed
    (the shell's cluster filter offers these; the overview has no list of its own)."""
    Ingestor(wh, 35).write_gpus([GpuInventory(H10, "trace-c", "p", "n1", "g1", 0, "H100")])
    assert fleet_view.known_clusters(wh) == ["trace-c"]
    assert fleet_view.choices(wh)["gpu_model"].to_list() == ["H100"]


@pytest.fixture(scope="module")
def moment(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield m.write(wh)


def _tiles(response: Any) -> dict[str, str]:
    return {
        k["props"]["children"][1]["props"]["children"]: k["props"]["children"][0]["props"][
            "children"
        ]
        for part in ("overview-kpis", "overview-range", "overview-cost")
        for k in response[part]["children"]
    }


def test_a_manager_sees_the_cluster_now(moment: Warehouse) -> None:
    got = _overview(moment, m.NOW, state=f"?from={m.DAY}&to={m.DAY}")
    tiles = _tiles(got)
    assert tiles["GPUs in inventory now"] == "6"  # g-sick included, out of service
    assert tiles["GPUs allocated now"] == "4.5"  # j-idle, j-busy, j-short, j-stale, j-half/2
    assert tiles["GPUs idle in jobs now"] == "1.5"  # j-idle and j-half's half
    findings = json.dumps(got["overview-findings"]["children"])
    assert "idle for more than 2 h" in findings and "out of service" in findings
    assert "Capacity" in json.dumps(got["overview-timeseries"])


@pytest.mark.parametrize("role", ["tenant:team-x", "tenant:team-x/a"])
def test_a_tenant_sees_its_own_figures_alone(moment: Warehouse, role: str) -> None:
    got = _overview(moment, m.NOW, role, state=f"?from={m.DAY}&to={m.DAY}")
    tiles = _tiles(got)
    assert "GPUs in inventory now" not in tiles  # nothing of the cluster's capacity
    assert tiles["GPUs allocated now"] == "2"  # j-idle and j-short
    assert tiles["GPUs idle in jobs now"] == "1"  # j-idle
    assert got["overview-inventory"]["children"] == ""
    names = [t["name"] for t in got["overview-timeseries"]["figure"]["data"]]
    assert "Capacity" not in names
    text = json.dumps(got)
    assert "team-y" not in text and "out of service" not in text and "stranded" not in text
    # its held GPU-hours in the range: j-idle 3, j-short 3, j-prev 3
    assert tiles["GPU-hours held in range"] == "9.0"


def test_a_forged_overview_for_another_tenant_is_refused(moment: Warehouse) -> None:
    got = _overview(moment, m.NOW, "tenant:team-x", state="?tenant=team-y")
    assert "may see the figures of tenant" in json.dumps(got["overview-message"])
    assert got["overview-kpis"]["children"] == [] and got["overview-findings"]["children"] == []


def test_an_empty_warehouse_shows_empty_states(wh: Warehouse) -> None:
    """No data yet: every page answers with its empty state, never an error."""
    got = _overview(wh, NOW)
    assert got["overview-message"]["children"] == ""
    assert "Nothing stands out" in json.dumps(got["overview-findings"]["children"])
    client = create_app(wh, now=lambda: NOW).server.test_client()
    idle = outputs(update(client, IDLE, [("filters-state", "data", "")]))
    assert "No idle allocated GPU" in json.dumps(idle["idle-message"]["children"])
    inputs = [("filters-state", "data", ""), ("gpu-uuid", "data", "GPU-1")]
    gpu = outputs(update(client, GPU, inputs))
    assert "not in the warehouse's inventory" in json.dumps(gpu["gpu-message"]["children"])


def test_the_one_click_ranges_and_the_windows_a_pass_warms() -> None:
    """The shell's ranges on a year's first day and on a leap February's month end, and the
    windows the live tail warms: those ranges and the Overview's cost to date, each once."""
    from dashboards.answers.warm import windows
    from dashboards.filters import ranges
    from warehouse.ledger import Window

    d = dt.date
    assert ranges(d(2027, 1, 1)) == [
        ("7 days", d(2026, 12, 26), d(2027, 1, 1)),
        ("30 days", d(2026, 12, 3), d(2027, 1, 1)),
        ("This month", d(2027, 1, 1), d(2027, 1, 1)),
        ("Last month", d(2026, 12, 1), d(2026, 12, 31)),
    ]
    assert ranges(d(2028, 3, 31))[3] == ("Last month", d(2028, 2, 1), d(2028, 2, 29))
    on_first = windows(d(2027, 1, 1))  # this month is today; the month before's same day too
    assert on_first == [
        Window.days(d(2026, 12, 26), d(2027, 1, 1)),
        Window.days(d(2026, 12, 3), d(2027, 1, 1)),
        Window.days(d(2027, 1, 1), d(2027, 1, 1)),
        Window.days(d(2026, 12, 1), d(2026, 12, 31)),
        Window.days(d(2026, 12, 1), d(2026, 12, 1)),
    ]
