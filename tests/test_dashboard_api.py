"""The JSON API (``/api/v1/<name>``): the same answers as the pages and the CLI, limited to
what the asking viewer may see, and every mistake a JSON 4xx naming the parameter."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import fresh_database, ledger_between, simulate

from dashboards.app import create_app
from dashboards.context import Viewer
from warehouse.client import Warehouse

NOW = dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC)
DAYS = {"from": "2026-03-03", "to": "2026-03-04"}


@pytest.fixture(scope="module")
def fleet(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=5, now=NOW)
        yield wh


def _client(wh: Warehouse, who: Viewer | None) -> Any:
    return create_app(wh, viewer=lambda: who, now=lambda: NOW).server.test_client()


def test_a_manager_gets_the_clis_ledger(fleet: Warehouse) -> None:
    got = _client(fleet, Viewer("m", "manager")).get("/api/v1/ledger", query_string=DAYS)
    assert got.status_code == 200, got.data[:300]
    whole = ledger_between(
        fleet,
        dt.datetime(2026, 3, 3, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 5, tzinfo=dt.UTC),
        now=NOW,
    )
    assert got.get_json() == whole.to_json()
    assert got.get_json()["conserved"] is True


def test_a_tenant_gets_its_rows_alone(fleet: Warehouse) -> None:
    manager = _client(fleet, Viewer("m", "manager")).get("/api/v1/ledger", query_string=DAYS)
    keys = [r["key"] for r in manager.get_json()["rows"]]
    org = keys[0].split("/")[0]
    other = next(k for k in keys if not k.startswith(org + "/"))
    client = _client(fleet, Viewer("lead", f"tenant:{org}"))
    mine = client.get("/api/v1/ledger", query_string=DAYS).get_json()
    assert mine["tenant"] == org and mine["rows"]
    assert all(r["key"].startswith(org + "/") for r in mine["rows"])
    assert mine["totals"]["capacity_cost"] is None  # nothing of the cluster's
    by_model = client.get("/api/v1/ledger", query_string=DAYS | {"by": "gpu_model"}).get_json()
    assert by_model["totals"]["total_cost"] == mine["totals"]["total_cost"]
    refused = client.get("/api/v1/ledger", query_string=DAYS | {"tenant": other})
    assert refused.status_code == 403 and other not in refused.get_json()["error"]


def test_nobody_logged_in_gets_nothing(fleet: Warehouse) -> None:
    got = _client(fleet, None).get("/api/v1/ledger", query_string=DAYS)
    assert got.status_code == 403 and "rows" not in got.get_json()


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"from": "2026-13-01"}, "from '2026-13-01' is not a date"),
        ({"from": "2026-03-05", "to": "2026-03-01"}, "before"),
        ({"by": "colour"}, "by 'colour' is not one of"),
        ({"idle_policy": "most"}, "most"),
        ({"cluster": "nope"}, "cluster 'nope' is not in the warehouse"),
    ],
)
def test_mistakes_are_400_naming_the_parameter(
    fleet: Warehouse, query: dict[str, str], named: str
) -> None:
    got = _client(fleet, Viewer("m", "manager")).get("/api/v1/ledger", query_string=query)
    assert got.status_code == 400 and named in got.get_json()["error"]


def test_an_unknown_answer_is_a_json_404(fleet: Warehouse) -> None:
    got = _client(fleet, Viewer("m", "manager")).get("/api/v1/nothing")
    assert got.status_code == 404 and "/api/v1/ledger" in got.get_json()["error"]
