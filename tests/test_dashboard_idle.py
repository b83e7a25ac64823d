"""The Idle page's callback and ``GET /api/v1/idle`` on the hand-made cluster of
``moment_fixture``: a manager sees every idle GPU, a tenant its own alone, and a forged
request for another tenant is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import moment_fixture as m
import pytest
from conftest import fresh_database
from dash_helpers import IDLE, outputs, update

from dashboards.app import create_app
from dashboards.context import Viewer
from warehouse.client import Warehouse

STATE = f"?from={m.DAY}&to={m.DAY}"


@pytest.fixture(scope="module")
def moment(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield m.write(wh)


def _client(wh: Warehouse, role: str | None) -> Any:
    who = Viewer("someone", role) if role else None
    return create_app(wh, viewer=lambda: who, now=lambda: m.NOW).server.test_client()


def _page(wh: Warehouse, role: str, state: str = STATE) -> dict[str, Any]:
    reply = update(_client(wh, role), IDLE, [("filters-state", "data", state)])
    return outputs(reply)


def test_a_manager_sees_every_gpu_idle_now_with_its_duration_and_cost(moment: Warehouse) -> None:
    got = _page(moment, "manager")
    rows = {r["job_id"]: r for r in got["idle-now"]["rowData"]}
    assert sorted(rows) == ["j-half", "j-idle"]
    idle = rows["j-idle"]
    assert (idle["tenant"], idle["node"], idle["idle_for"]) == ("team-x/a", "n1", "3 h 00 min")
    assert idle["since"] == f"{m.T:%Y-%m-%d %H:%M} UTC" and idle["cost"] == "7.50 USD"
    assert idle["gpu"].startswith("[g-idle](/gpu/g-idle?from=")  # a link keeping the filters
    assert rows["j-half"]["cost"] == "1.25 USD" and rows["j-half"]["idle_for"] == "1 h 00 min"
    worst = [r["job_id"] for r in got["idle-worst"]["rowData"]]
    assert sorted(worst) == sorted(k for k, v in m.LEDGER_IDLE.items() if v)
    bars = {t["name"]: t["y"] for t in got["idle-trend"]["figure"]["data"]}
    assert bars["Idle"] == [pytest.approx(sum(m.LEDGER_IDLE.values()))]
    kpis = json.dumps(got["idle-kpis"]["children"])
    assert "8.75 USD" in kpis  # 7.50 + 1.25 idle so far
    assert "30 min" in json.dumps(got["idle-rule"]["children"])


@pytest.mark.parametrize(
    ("role", "mine"), [("tenant:team-x", "team-x"), ("tenant:team-y/b", "team-y")]
)
def test_a_tenant_sees_its_own_rows_alone(moment: Warehouse, role: str, mine: str) -> None:
    got = _page(moment, role)
    tenants = {r["tenant"] for r in got["idle-now"]["rowData"] + got["idle-worst"]["rowData"]}
    assert tenants and all(t.startswith(mine + "/") for t in tenants)
    other = "team-y" if mine == "team-x" else "team-x"
    assert other not in json.dumps(got)
    ours = sum(v for k, v in m.LEDGER_IDLE.items() if m.JOBS[k][1].startswith(mine))
    bars = {t["name"]: t["y"] for t in got["idle-trend"]["figure"]["data"]}
    assert bars["Idle"] == [pytest.approx(ours)]


def test_a_forged_callback_for_another_tenant_is_refused(moment: Warehouse) -> None:
    got = _page(moment, "tenant:team-x", STATE + "&tenant=team-y")
    assert "may see the figures of tenant" in json.dumps(got["idle-message"])
    assert got["idle-now"]["rowData"] == [] and got["idle-worst"]["rowData"] == []
    assert "j-half" not in json.dumps(got)


def test_nobody_logged_in_sees_nothing(moment: Warehouse) -> None:
    got = _page(moment, "")
    assert got["idle-now"]["rowData"] == [] and "log in" in json.dumps(got["idle-message"])


def test_the_api_answers_the_same_scoped(moment: Warehouse) -> None:
    query = {"from": m.DAY, "to": m.DAY}
    whole = _client(moment, "manager").get("/api/v1/idle", query_string=query)
    assert whole.status_code == 200, whole.data[:300]
    doc = whole.get_json()
    assert {r["job_id"]: r["cost"] for r in doc["now"]} == {"j-idle": "7.50", "j-half": "1.25"}
    assert doc["totals"]["idle_gpu_hours"] == pytest.approx(sum(m.LEDGER_IDLE.values()))
    tenant = _client(moment, "tenant:team-x")
    mine = tenant.get("/api/v1/idle", query_string=query).get_json()
    assert mine["tenant"] == "team-x" and [r["job_id"] for r in mine["now"]] == ["j-idle"]
    assert {j["tenant"] for j in mine["worst_jobs"]} == {"team-x/a"}
    refused = tenant.get("/api/v1/idle", query_string=query | {"tenant": "team-y"})
    assert refused.status_code == 403
    bad = tenant.get("/api/v1/idle", query_string=query | {"worst": "lots"})
    assert bad.status_code == 400 and "worst 'lots'" in bad.get_json()["error"]
    one = tenant.get("/api/v1/idle", query_string=query | {"worst": "1"}).get_json()
    assert len(one["worst_jobs"]) == 1


def test_the_page_is_served(moment: Warehouse) -> None:
    page = _client(moment, "manager").get("/idle")
    assert page.status_code == 200
