"""The capacity page (/capacity) and GET /api/v1/fragmentation on a simulated fleet: what a
manager sees, what a tenant's lead sees of it, and what a forged request gets."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import fresh_database, recent, refused, simulate
from dash_calls import call, cli_json, grid_rows, text

from collector.records import GpuHealth, GpuInventory
from dashboards.answers import warm
from dashboards.app import create_app
from dashboards.context import Viewer
from warehouse.analytics import capacity, fleet
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import IdleRule
from warehouse.ledger.tail import LiveTail

NOW = recent(dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC))
HOUR = NOW - dt.timedelta(hours=1)  # the heatmap's hour: the last whole one before NOW
MANAGER = Viewer("m", "manager")
SICK = "GPU-test-sick"  # a GPU the fixture adds, unhealthy with Xid 79 since 3 h before NOW

INVENTORY = [
    "capacity-status.children",
    "capacity-kpis.children",
    "capacity-inventory.children",
    "capacity-unhealthy.children",
]
STRANDED = [
    "capacity-largest.children",
    "capacity-stranded-trend.figure",
    "capacity-stranded-tenants.children",
]


@pytest.fixture(scope="module")
def fleet_wh(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=5, now=NOW)
        ing = Ingestor(wh, 35, now=lambda: NOW)
        since = NOW - dt.timedelta(hours=3)
        ing.write_gpus(
            [
                GpuInventory(
                    since - dt.timedelta(days=1), "sim", "spare", "spare-1", SICK, 0, "L4"
                ),
                GpuInventory(
                    since,
                    "sim",
                    "spare",
                    "spare-1",
                    SICK,
                    0,
                    "L4",
                    health="unhealthy",
                    health_reason="Xid 79: GPU has fallen off the bus",
                ),
            ]
        )
        ing.write_health(
            [
                GpuHealth(
                    NOW - dt.timedelta(minutes=5),
                    SICK,
                    gpu_lost=True,
                    cluster="sim",
                    node="spare-1",
                )
            ]
        )
        yield wh


def _client(wh: Warehouse, who: Viewer | None) -> Any:
    return create_app(wh, viewer=lambda: who, now=lambda: NOW).server.test_client()


def _tenants(wh: Warehouse) -> list[str]:
    return fleet.known_tenants(wh)


def _org_and_others(wh: Warehouse) -> tuple[str, list[str]]:
    """An org that alone held some GPU in the heatmap's hour, and every tenant outside it."""
    grid = capacity.gpu_grid(wh, "sim", HOUR)
    alone = sorted(
        orgs.pop()
        for r in grid.iter_rows(named=True)
        if len(orgs := {h["tenant"].split("/")[0] for h in r["holders"]}) == 1
    )
    org = alone[0]
    return org, [t for t in _tenants(wh) if not t.startswith(org + "/")]


def _held_by_hand(wh: Warehouse) -> dict[str, float]:
    """Each GPU's mean held share over the hour, from the allocation rows themselves."""
    rows = wh.rows(
        "SELECT gpu_uuid, fraction, start_ts, end_ts FROM {db:Identifier}.allocations FINAL "
        "WHERE cluster = 'sim' AND gpu_uuid != ''",
        {"db": wh.database},
    )
    held: dict[str, float] = {}
    for uuid, fraction, start, end in rows:
        lo, hi = max(start, HOUR), min(end or NOW, NOW)
        if hi > lo:
            held[uuid] = held.get(uuid, 0.0) + fraction * (hi - lo) / dt.timedelta(hours=1)
    return held


def test_a_manager_sees_the_inventory_and_the_unhealthy_gpu(fleet_wh: Warehouse) -> None:
    got = call(_client(fleet_wh, MANAGER), INVENTORY, {"filters-state.data": ""})
    rows = grid_rows(got["capacity-inventory"]["children"])
    (count,) = fleet_wh.rows(
        "SELECT count() FROM {db:Identifier}.gpus FINAL WHERE health != 'retired'",
        {"db": fleet_wh.database},
    )[0]
    assert sum(r["gpus"] for r in rows) == count == 17
    assert {r["health"] for r in rows} == {"healthy", "unhealthy"}
    assert all(r["driver_version"] and r["cuda_version"] for r in rows if r["pool"] != "spare")
    sick = grid_rows(got["capacity-unhealthy"]["children"])
    assert [(r["gpu_uuid"], r["shown_xid"], r["gpu_lost"]) for r in sick] == [(SICK, 79, True)]
    assert "fallen off the bus" in sick[0]["reason"]


def test_the_inventory_at_the_live_tails_instant_asks_nothing_again(fleet_wh: Warehouse) -> None:
    """At the live tail's instant the inventory and the GPUs not healthy come from the
    cluster's moment the pass kept: the same tables, a pool's alone when one is picked,
    without asking the warehouse for them again."""
    states = ["", "?pool=spare"]
    want = {
        s: call(_client(fleet_wh, MANAGER), INVENTORY, {"filters-state.data": s}) for s in states
    }
    assert grid_rows(want["?pool=spare"]["capacity-inventory"]["children"])
    kept = LiveTail(fleet_wh, IdleRule(), every_s=60, clock=lambda: NOW)
    kept.refresh()
    with kept.offered(), refused((capacity, "inventory"), (capacity, "unhealthy")):
        app = create_app(fleet_wh, viewer=lambda: MANAGER, now=lambda: NOW, as_of=kept.now)
        for state in states:
            got = call(app.server.test_client(), INVENTORY, {"filters-state.data": state})
            assert got == want[state], state


def test_the_heatmap_holds_each_gpus_hour(fleet_wh: Warehouse) -> None:
    client = _client(fleet_wh, MANAGER)
    held = call(
        client,
        ["capacity-heatmap.figure"],
        {"filters-state.data": "", "capacity-metric.value": "held"},
    )
    trace = held["capacity-heatmap"]["figure"]["data"][0]
    grid = capacity.gpu_grid(fleet_wh, "sim", HOUR)
    assert sorted(trace["y"]) == sorted(set(grid["node"].to_list())) and len(trace["y"]) == 3
    by_hand = _held_by_hand(fleet_wh)
    for r in grid.iter_rows(named=True):
        i, j = trace["y"].index(r["node"]), trace["x"].index(r["gpu_index"])
        assert trace["z"][i][j] == pytest.approx(by_hand.get(r["gpu_uuid"], 0.0), abs=1e-6)
    assert sum(by_hand.values()) > 8  # the simulated fleet is busy: the check has teeth
    util = call(
        client,
        ["capacity-heatmap.figure"],
        {"filters-state.data": "", "capacity-metric.value": "util"},
    )
    z = util["capacity-heatmap"]["figure"]["data"][0]["z"]
    raw = dict(
        fleet_wh.rows(
            "SELECT gpu_uuid, avg(util_ratio) FROM {db:Identifier}.gpu_samples "
            "WHERE cluster = 'sim' AND ts >= {h:DateTime64(3)} AND ts < {n:DateTime64(3)} "
            "GROUP BY gpu_uuid",
            {"db": fleet_wh.database, "h": HOUR, "n": NOW},
        )
    )
    for r in grid.iter_rows(named=True):
        i, j = trace["y"].index(r["node"]), trace["x"].index(r["gpu_index"])
        if r["gpu_uuid"] in raw:
            assert z[i][j] == pytest.approx(raw[r["gpu_uuid"]], abs=1e-4)
    assert len(raw) == 16


def test_the_heatmap_at_the_live_tails_instant_is_made_once_per_pass(
    fleet_wh: Warehouse,
) -> None:
    """At the live tail's instant the heatmap's hour is read once per pass, for every viewer
    and filter (the pass warms it): the same figures for a manager, a pool and a tenant's
    lead as without a tail, the warehouse not asked again."""
    org, _others = _org_and_others(fleet_wh)
    lead = Viewer("lead", f"tenant:{org}")
    asks = [(MANAGER, ""), (MANAGER, "?pool=spare"), (lead, "")]
    inputs = {"capacity-metric.value": "util"}

    def heatmap(who: Viewer, state: str, **app: Any) -> Any:
        client = create_app(fleet_wh, viewer=lambda: who, now=lambda: NOW, **app).server
        got = call(
            client.test_client(),
            ["capacity-heatmap.figure"],
            {**inputs, "filters-state.data": state},
        )
        return got["capacity-heatmap"]["figure"]

    want = {(who.role, state): heatmap(who, state) for who, state in asks}
    assert want[(MANAGER.role, "?pool=spare")] != want[(MANAGER.role, "")]
    kept = LiveTail(fleet_wh, IdleRule(), every_s=60, clock=lambda: NOW, warm=warm.warm)
    kept.refresh()
    with kept.offered():
        create_app(fleet_wh, viewer=lambda: MANAGER, now=lambda: NOW, as_of=kept.now)
        warm.warm(NOW)
        with refused((capacity, "grid_rows")):
            for who, state in asks:
                assert heatmap(who, state, as_of=kept.now) == want[(who.role, state)], state


def test_a_tenants_heatmap_names_its_own_jobs_alone(fleet_wh: Warehouse) -> None:
    org, others = _org_and_others(fleet_wh)
    inputs = {"filters-state.data": "", "capacity-metric.value": "util"}
    whole = call(_client(fleet_wh, MANAGER), ["capacity-heatmap.figure"], inputs)
    mine = call(
        _client(fleet_wh, Viewer("lead", f"tenant:{org}")), ["capacity-heatmap.figure"], inputs
    )
    everyone, own = (g["capacity-heatmap"]["figure"]["data"][0] for g in (whole, mine))
    seen = text(own)
    assert org + "/" in seen
    assert not [t for t in others if t in seen]
    assert any(t in text(everyone) for t in others)
    grid = capacity.gpu_grid(fleet_wh, "sim", HOUR)
    for r in grid.iter_rows(named=True):
        i, j = own["y"].index(r["node"]), own["x"].index(r["gpu_index"])
        foreign = [h for h in r["holders"] if not h["tenant"].startswith(org + "/")]
        # another tenant's GPU shows no utilisation; the others as the manager sees them
        assert own["z"][i][j] == (None if foreign else everyone["z"][i][j]), r["gpu_uuid"]
        if foreign:
            assert "allocated to another tenant" in own["text"][i][j]
            assert not any(h["job_id"] in seen for h in foreign)
    assert any(v is None for row in own["z"] for v in row[:8])  # some GPU was another's
    assert any(v is not None for row in own["z"] for v in row[:8])  # and some its own
    # the allocated share of every GPU stays a fact of the cluster
    held = call(
        _client(fleet_wh, Viewer("lead", f"tenant:{org}")),
        ["capacity-heatmap.figure"],
        {**inputs, "capacity-metric.value": "held"},
    )
    manager = call(
        _client(fleet_wh, MANAGER),
        ["capacity-heatmap.figure"],
        {**inputs, "capacity-metric.value": "held"},
    )
    assert (
        held["capacity-heatmap"]["figure"]["data"][0]["z"]
        == manager["capacity-heatmap"]["figure"]["data"][0]["z"]
    )


def test_stranded_by_tenant_is_the_viewers_own(fleet_wh: Warehouse) -> None:
    whole = call(_client(fleet_wh, MANAGER), STRANDED, {"filters-state.data": ""})
    rows = grid_rows(whole["capacity-stranded-tenants"]["children"])
    assert len({r["tenant"] for r in rows}) > 2
    org = next(r["tenant"] for r in rows if "/" in r["tenant"]).split("/")[0]
    mine = call(
        _client(fleet_wh, Viewer("lead", f"tenant:{org}")), STRANDED, {"filters-state.data": ""}
    )
    own = grid_rows(mine["capacity-stranded-tenants"]["children"])
    assert own == [r for r in rows if r["tenant"].startswith(org + "/")]
    largest = text(mine["capacity-largest"])
    assert "NVIDIA H100" in largest and "largest job that could start" in largest
    trend = mine["capacity-stranded-trend"]["figure"]["data"]
    assert trend and trend == whole["capacity-stranded-trend"]["figure"]["data"]


def test_a_forged_callback_for_another_tenant_is_refused(fleet_wh: Warehouse) -> None:
    org, others = _org_and_others(fleet_wh)
    client = _client(fleet_wh, Viewer("lead", f"tenant:{org}"))
    forged = {"filters-state.data": f"?tenant={others[0]}"}
    for outputs, inputs in (
        (INVENTORY, forged),
        (STRANDED, forged),
        (["capacity-heatmap.figure"], {**forged, "capacity-metric.value": "held"}),
    ):
        got = text(call(client, outputs, inputs))
        assert "may see the figures of tenant" in got and "rowData" not in got and '"z"' not in got


def test_the_api_answers_what_the_cli_prints(fleet_wh: Warehouse) -> None:
    client = _client(fleet_wh, MANAGER)
    at = NOW - dt.timedelta(hours=5)
    got = client.get("/api/v1/fragmentation", query_string={"at": at.isoformat()})
    assert got.status_code == 200, got.data[:300]
    assert got.get_json() == cli_json("fragmentation", fleet_wh, "--at", at.isoformat())
    assert got.get_json()["nodes"] and got.get_json()["task_mix"]
    # no time given: the range's end or now, whichever is earlier (now here), as the CLI
    plain = client.get("/api/v1/fragmentation").get_json()
    assert plain == cli_json("fragmentation", fleet_wh, "--at", NOW.isoformat())
    weekly = client.get(
        "/api/v1/fragmentation",
        query_string={"to": (NOW - dt.timedelta(days=1)).date().isoformat()},
    )
    assert weekly.get_json()["at"] == dt.datetime.combine(NOW.date(), dt.time(), dt.UTC).isoformat()


def test_a_tenant_gets_the_cluster_and_its_own_stranded_rows(fleet_wh: Warehouse) -> None:
    at = {"at": (NOW - dt.timedelta(hours=5)).isoformat()}
    whole = _client(fleet_wh, MANAGER).get("/api/v1/fragmentation", query_string=at).get_json()
    org = next(t["tenant"] for t in whole["tenants"] if "/" in t["tenant"]).split("/")[0]
    client = _client(fleet_wh, Viewer("lead", f"tenant:{org}"))
    mine = client.get("/api/v1/fragmentation", query_string=at).get_json()
    assert mine["tenant"] == org
    assert mine["tenants"] == [t for t in whole["tenants"] if t["tenant"].startswith(org + "/")]
    assert len(mine["tenants"]) < len(whole["tenants"])
    for key in ("nodes", "largest_startable", "cluster_fgd_gpus", "free_gpus", "task_mix"):
        assert mine[key] == whole[key]
    other = next(t["tenant"] for t in whole["tenants"] if not t["tenant"].startswith(org + "/"))
    refused = client.get("/api/v1/fragmentation", query_string={**at, "tenant": other})
    assert refused.status_code == 403 and "tenants" not in refused.get_json()


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"at": "yesterday"}, "at 'yesterday' is not an ISO time"),
        ({"window_days": "a week"}, "window_days 'a week' is not a number"),
        ({"window_days": "0"}, "window_days 0 must be more than 0"),
        ({"scope": "rack"}, "scope 'rack' is not one of model, cluster"),
        ({"pool": "train-h100"}, "pool 'train-h100': fragmentation is measured for the whole"),
        ({"cluster": "nope"}, "cluster 'nope' is not in the warehouse"),
    ],
)
def test_api_mistakes_are_400_naming_the_parameter(
    fleet_wh: Warehouse, query: dict[str, str], named: str
) -> None:
    got = _client(fleet_wh, MANAGER).get("/api/v1/fragmentation", query_string=query)
    assert got.status_code == 400 and named in got.get_json()["error"]


def test_an_empty_warehouse_gets_words_not_a_traceback(wh: Warehouse) -> None:
    client = _client(wh, MANAGER)
    got = text(call(client, INVENTORY, {"filters-state.data": ""}))
    assert "holds no cluster's data yet" in got
    heat = call(
        client,
        ["capacity-heatmap.figure"],
        {"filters-state.data": "", "capacity-metric.value": "held"},
    )
    assert "no cluster" in text(heat)
    assert client.get("/api/v1/fragmentation").status_code == 400
