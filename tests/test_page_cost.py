"""The Cost and chargeback page (/cost) and its downloads, on a simulated fleet: callbacks
driven over HTTP as the browser does, the CSV and XLSX read back, and every download in the
audit log. A ``tenant:ORG`` lead gets that org's figures alone; a forged callback or download
for another tenant is refused."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import zipfile
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from conftest import fresh_database, ledger_between, simulate
from dash_calls import post

from dashboards.app import create_app
from dashboards.context import Viewer
from warehouse.audit import audit_entries
from warehouse.client import Warehouse
from warehouse.ledger import UNALLOCATED, Ledger

# The fleet runs from 03-01 00:00 to 03-02 00:00: February holds nothing, so March's whole
# cost is the month-over-month change.
NOW = dt.datetime(2026, 3, 2, tzinfo=dt.UTC)
DAYS = {"from": "2026-03-01", "to": "2026-03-02"}
STATE = "?from=2026-03-01&to=2026-03-02"
LEDGER = [
    ("cost-kpis", "children"),
    ("cost-conservation", "children"),
    ("cost-bars", "figure"),
    ("cost-ledger", "columnDefs"),
    ("cost-ledger", "rowData"),
    ("cost-ledger", "dashGridOptions"),
]
CHANGE = [("cost-change-text", "children"), ("cost-change-waterfall", "figure")]
MANAGER = Viewer("boss", "manager")


@pytest.fixture(scope="module")
def fleet(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=7, now=NOW)
        yield wh


def _ledger(wh: Warehouse, **kw: Any) -> Ledger:
    return ledger_between(
        wh,
        dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 3, tzinfo=dt.UTC),
        now=NOW,
        **kw,
    )


@pytest.fixture(scope="module")
def orgs(fleet: Warehouse) -> list[str]:
    names = sorted({r.key.split("/")[0] for r in _ledger(fleet).rows if "/" in r.key})
    assert len(names) >= 2, "the fixture must hold several orgs for scoping to mean anything"
    return names


def _client(wh: Warehouse, who: Viewer | None) -> Any:
    return create_app(wh, viewer=lambda: who, now=lambda: NOW).server.test_client()


def _page(client: Any, outputs: list[tuple[str, str]], state: str) -> dict[str, Any]:
    status, response = post(client, outputs, [("filters-state", "data", state)])
    assert status == 200
    return response


def _cents(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


@pytest.mark.parametrize(("by", "policy"), [("tenant", "weighted"), ("gpu_model", "none")])
def test_a_manager_sees_the_ledger_and_that_it_adds_up(
    fleet: Warehouse, by: str, policy: str
) -> None:
    whole = _ledger(fleet, by=by, idle_policy=policy)
    response = _page(_client(fleet, MANAGER), LEDGER, STATE + f"&by={by}&idle_policy={policy}")
    rows = response["cost-ledger"]["rowData"]
    got = {r[by]: _cents(r["total_cost"]) for r in rows}
    expected = {r.key: r.total_cost for r in whole.rows}
    if whole.unallocated is not None:
        expected[UNALLOCATED] = whole.unallocated.cost
    assert got == expected
    total = response["cost-ledger"]["dashGridOptions"]["pinnedBottomRowData"][0]
    assert whole.totals.capacity_cost is not None
    assert _cents(total["total_cost"]) == whole.totals.capacity_cost
    assert "holds" in json.dumps(response["cost-conservation"])
    assert "Capacity cost" in json.dumps(response["cost-kpis"])
    assert response["cost-ledger"]["columnDefs"][0]["field"] == by
    bars = response["cost-bars"]["figure"]["data"]
    assert sum(sum(b["y"]) for b in bars) == pytest.approx(float(whole.totals.total_cost))


def test_a_tenant_lead_sees_its_own_totals_alone(fleet: Warehouse, orgs: list[str]) -> None:
    mine, other = orgs[:2]
    lead = _client(fleet, Viewer("lead", f"tenant:{mine}"))
    response = _page(lead, LEDGER, STATE)
    keys = [r["tenant"] for r in response["cost-ledger"]["rowData"]]
    assert keys and all(k.startswith(mine + "/") for k in keys)
    own = _ledger(fleet, tenant=mine)
    total = response["cost-ledger"]["dashGridOptions"]["pinnedBottomRowData"][0]
    assert _cents(total["total_cost"]) == own.totals.total_cost
    text = json.dumps(response)
    assert "Capacity cost" not in text and other + "/" not in text
    forged = _page(lead, LEDGER, STATE + f"&tenant={other}")
    assert forged["cost-ledger"]["rowData"] == [] and "may see the figures of tenant" in json.dumps(
        forged
    )
    theirs = _ledger(fleet, tenant=other)
    assert str(theirs.totals.total_cost) not in json.dumps(forged)


def test_month_over_month_is_the_viewers_own(fleet: Warehouse, orgs: list[str]) -> None:
    march = ledger_between(
        fleet,
        dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 4, 1, tzinfo=dt.UTC),
        now=NOW,
    )
    manager = _page(_client(fleet, MANAGER), CHANGE, STATE)
    text = json.dumps(manager["cost-change-text"])
    assert "Cost of the cluster rose from 0.00 USD in 2026-02" in text
    assert f"to {march.totals.total_cost} USD in 2026-03" in text
    steps = manager["cost-change-waterfall"]["figure"]["data"][0]
    assert steps["y"][-1] == pytest.approx(float(march.totals.total_cost))
    mine, other = orgs[:2]
    lead = _client(fleet, Viewer("lead", f"tenant:{mine}"))
    own = sum((r.total_cost for r in march.rows if r.key.startswith(mine + "/")), Decimal(0))
    text = json.dumps(_page(lead, CHANGE, STATE)["cost-change-text"])
    assert f"Cost of tenant {mine} rose" in text and f"to {own} USD" in text
    assert str(march.totals.total_cost) not in text and other not in text
    forged = json.dumps(_page(lead, CHANGE, STATE + f"&tenant={other}"))
    assert "may see the figures of tenant" in forged and "rose" not in forged


def _download(client: Any, fmt: str, **query: str) -> Any:
    return client.get(f"/download/ledger.{fmt}", query_string={**DAYS, **query})


def _since(wh: Warehouse, started: dt.datetime, outcome: str) -> list[Any]:
    return [e for e in audit_entries(wh, since=started, action="download") if e.outcome == outcome]


@pytest.mark.parametrize("policy", ["weighted", "none"])
def test_the_csv_adds_up_to_the_ledger_to_the_cent(fleet: Warehouse, policy: str) -> None:
    started = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    got = _download(_client(fleet, MANAGER), "csv", idle_policy=policy, by="pool")
    assert got.status_code == 200 and got.mimetype == "text/csv"
    assert "attachment" in got.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(got.data.decode())))
    whole = _ledger(fleet, idle_policy=policy, by="pool")
    assert sum(Decimal(r["total_cost"]) for r in rows) == whole.totals.total_cost
    assert whole.totals.total_cost == whole.totals.capacity_cost
    assert sum(Decimal(r["direct_cost"]) for r in rows) == sum(
        (r.direct_cost for r in whole.rows), Decimal(0)
    )
    assert [r["pool"] for r in rows if r["pool"] != UNALLOCATED] == [r.key for r in whole.rows]
    entries = _since(fleet, started, "ok")
    assert entries and entries[0].actor == "boss" and entries[0].object == "ledger.csv"
    assert json.loads(entries[0].detail)["total_cost"] == str(whole.totals.total_cost)


def test_the_xlsx_opens_with_a_frozen_header_and_number_formats(
    fleet: Warehouse, orgs: list[str]
) -> None:
    started = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    lead = _client(fleet, Viewer("lead", f"tenant:{orgs[0]}"))
    got = _download(lead, "xlsx")
    assert got.status_code == 200
    book = zipfile.ZipFile(io.BytesIO(got.data))
    assert book.testzip() is None
    sheet = book.read("xl/worksheets/sheet1.xml").decode()
    assert re.search(r'<pane [^>]*ySplit="1"[^>]*state="frozen"', sheet)
    styles = book.read("xl/styles.xml").decode()
    assert 'formatCode="#,##0.00"' in styles and 'formatCode="#,##0.000"' in styles
    strings = book.read("xl/sharedStrings.xml").decode()
    own = _ledger(fleet, tenant=orgs[0])
    assert all(r.key in strings for r in own.rows) and orgs[1] + "/" not in strings
    # the totals row's cached value is the tenant's total
    cached = re.findall(r"<f>SUM\(H2:H\d+\)</f><v>([^<]+)</v>", sheet)
    assert cached and _cents(float(cached[0])) == own.totals.total_cost
    entries = _since(fleet, started, "ok")
    assert entries and entries[0].actor == "lead" and entries[0].object == "ledger.xlsx"


def test_a_forged_download_for_another_tenant_is_refused_and_audited(
    fleet: Warehouse, orgs: list[str]
) -> None:
    started = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    mine, other = orgs[:2]
    lead = _client(fleet, Viewer("lead", f"tenant:{mine}"))
    for fmt in ("csv", "xlsx"):
        got = _download(lead, fmt, tenant=other)
        assert got.status_code == 403 and other not in got.get_json()["error"]
        assert other + "/" not in got.data.decode()
    denied = _since(fleet, started, "denied")
    assert len(denied) == 2 and {e.actor for e in denied} == {"lead"}
    assert _download(lead, "csv", by="colour").status_code == 400
    assert _download(lead, "pdf").status_code == 404
    assert _download(_client(fleet, None), "csv").status_code == 403  # (one app at a time)
