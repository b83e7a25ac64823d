"""The Tenants page (/tenants), its callbacks driven over HTTP as the browser does, on a
simulated fleet: a manager sees every tenant with the ledger's figures; a ``tenant:ORG`` lead
sees that org alone, and a forged callback for another tenant gets no figure of it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import dash
import plotly
import pytest
from conftest import fresh_database, ledger_between, refused, simulate
from dash_calls import post

from dashboards.answers import warm
from dashboards.app import create_app
from dashboards.context import Viewer
from dashboards.filters import ranges
from warehouse.analytics import explain
from warehouse.analytics.explain import why_tenant
from warehouse.analytics.fleet import known_clusters
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule, Ledger, Window, compute, job_costs
from warehouse.ledger.tail import LiveTail

NOW = dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC)
STATE = "?from=2026-03-03&to=2026-03-04"
TREE = [("tenants-treemap", "figure"), ("tenants-tree", "rowData"), ("tenants-note", "children")]
QUOTAS = [("tenants-quotas", "rowData"), ("tenants-quotas-note", "children")]
JOBS = [
    ("tenants-jobs", "getRowsResponse"),
    ("tenants-jobs-title", "children"),
    ("tenants-jobs-note", "children"),
]
MANAGER = Viewer("boss", "manager")


@pytest.fixture(scope="module")
def fleet(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=5, now=NOW)
        yield wh


@pytest.fixture(scope="module")
def by_tenant(fleet: Warehouse) -> Ledger:
    """The ledger of the page's window, by tenant: the figures the page must agree with."""
    return ledger_between(
        fleet,
        dt.datetime(2026, 3, 3, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 5, tzinfo=dt.UTC),
        now=NOW,
    )


@pytest.fixture(scope="module")
def orgs(by_tenant: Ledger) -> list[str]:
    names = sorted({r.key.split("/")[0] for r in by_tenant.rows if "/" in r.key})
    assert len(names) >= 2, "the fixture must hold several orgs for scoping to mean anything"
    return names


def _client(wh: Warehouse, who: Viewer | None) -> Any:
    return create_app(wh, viewer=lambda: who, now=lambda: NOW).server.test_client()


def _tree(client: Any, state: str = STATE) -> dict[str, Any]:
    status, response = post(client, TREE, [("filters-state", "data", state)])
    assert status == 200
    return response


def _cents(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


def test_a_manager_sees_every_tenant_with_the_ledgers_cents(
    fleet: Warehouse, by_tenant: Ledger
) -> None:
    response = _tree(_client(fleet, MANAGER))
    rows = response["tenants-tree"]["rowData"]
    projects = {r["tenant"]: r for r in rows if r["level"] == 1}
    assert set(projects) == {r.key for r in by_tenant.rows}
    for r in by_tenant.rows:
        assert _cents(projects[r.key]["total_cost"]) == r.total_cost
        assert projects[r.key]["allocated_gpu_hours"] == pytest.approx(r.allocated_gpu_hours)
        used = r.used_gpu_hours or 0.0
        assert projects[r.key]["efficiency"] == pytest.approx(used / r.allocated_gpu_hours, 1e-3)
    # an org is its projects; a project is its users
    for org in (r for r in rows if r["level"] == 0):
        mine = [p for p in projects.values() if p["tenant"].startswith(org["tenant"] + "/")]
        assert _cents(org["total_cost"]) == sum(_cents(p["total_cost"]) for p in mine)
    users = [r for r in rows if r["level"] == 2]
    assert users and all(r["user"] for r in users)
    treemap = response["tenants-treemap"]["figure"]["data"][0]
    assert treemap["type"] == "treemap" and len(treemap["ids"]) == len(rows)
    assert sum(treemap["values"]) == pytest.approx(by_tenant.totals.allocated_gpu_hours)


def test_a_tenant_lead_sees_its_org_alone(
    fleet: Warehouse, by_tenant: Ledger, orgs: list[str]
) -> None:
    mine, other = orgs[0], orgs[1]
    client = _client(fleet, Viewer("lead", f"tenant:{mine}"))
    own = _tree(client)
    rows = own["tenants-tree"]["rowData"]
    assert rows and {r["tenant"].split("/")[0] for r in rows} == {mine}
    theirs = [r for r in by_tenant.rows if r.key.startswith(other + "/")]
    assert theirs and all(r.key not in json.dumps(own) for r in theirs)
    # a forged filters-state naming the other org: refused, with none of its figures
    forged = _tree(client, STATE + f"&tenant={other}")
    assert forged["tenants-tree"]["rowData"] == []
    text = json.dumps(forged)
    assert "may see the figures of tenant" in text
    assert all(r.key not in text and str(r.total_cost) not in text for r in theirs)


def test_quota_positions_match_why_tenant_and_are_scoped(fleet: Warehouse, orgs: list[str]) -> None:
    status, response = post(_client(fleet, MANAGER), QUOTAS, [("filters-state", "data", STATE)])
    assert status == 200
    rows = response["tenants-quotas"]["rowData"]
    assert {r["tenant"].split("/")[0] for r in rows} >= set(orgs)
    tenant = rows[0]["tenant"]
    facts = why_tenant(fleet, "sim", tenant, NOW).facts["pools"]
    expected = {
        (p["pool"], p["guaranteed_gpus"], p["held_gpus"], p["borrowed_gpus"]) for p in facts
    }
    got = {
        (r["pool"], r["guaranteed_gpus"], r["held_gpus"], r["borrowed_gpus"])
        for r in rows
        if r["tenant"] == tenant
    }
    assert got == {(p, g, round(h, 4), round(b, 4)) for p, g, h, b in expected}
    lead = _client(fleet, Viewer("lead", f"tenant:{orgs[0]}"))
    _status, mine = post(lead, QUOTAS, [("filters-state", "data", STATE)])
    assert {r["tenant"].split("/")[0] for r in mine["tenants-quotas"]["rowData"]} == {orgs[0]}
    _status, forged = post(lead, QUOTAS, [("filters-state", "data", STATE + f"&tenant={orgs[1]}")])
    assert forged["tenants-quotas"]["rowData"] == [] and orgs[1] + "/" not in json.dumps(forged)


#: What the jobs' grid asks for: its first block, or (here) every row at once.
EVERY = {"startRow": 0, "endRow": 100_000, "sortModel": [], "filterModel": {}}


def _jobs(
    client: Any,
    picked: dict[str, str] | None,
    state: str = STATE,
    asked: dict[str, Any] = EVERY,
) -> dict[str, Any]:
    status, response = post(
        client,
        JOBS,
        [
            ("tenants-jobs", "getRowsRequest", asked),
            ("filters-state", "data", state),
            ("tenants-selected", "data", picked),
        ],
    )
    assert status == 200
    return response


def _rows(response: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = response["tenants-jobs"]["getRowsResponse"]["rowData"]
    return rows


def test_a_tenants_jobs_add_up_to_its_ledger_row(fleet: Warehouse, by_tenant: Ledger) -> None:
    client = _client(fleet, MANAGER)
    assert _rows(_jobs(client, None)) == []  # nothing picked yet
    row = max(by_tenant.rows, key=lambda r: r.total_cost)
    jobs = _rows(_jobs(client, {"tenant": row.key, "user": ""}))
    assert jobs and {j["tenant"] for j in jobs} == {row.key}
    assert sum(j["allocated_gpu_hours"] for j in jobs) == pytest.approx(row.allocated_gpu_hours)
    # to the cent, from the API's exact figures (the grid shows them as numbers)
    doc = client.get("/api/v1/jobs", query_string={"from": "2026-03-03", "of": row.key}).get_json()
    assert sum(Decimal(j["total_cost"]) for j in doc["jobs"]) == row.total_cost
    # the grid's rows are the API's jobs, in order, their money as numbers
    assert [(j["job_id"], j["total_cost"], j["start"]) for j in jobs] == [
        (a["job_id"], float(Decimal(a["total_cost"])), a["start"][:16].replace("T", " "))
        for a in doc["jobs"]
    ]
    assert {j["state"] for j in jobs} <= {"running", "ended"}
    user = jobs[0]["user"]
    theirs = _rows(_jobs(client, {"tenant": row.key, "user": user}))
    assert theirs and {j["user"] for j in theirs} == {user} and len(theirs) <= len(jobs)


def test_the_jobs_grid_asks_for_blocks_sorted_and_filtered_on_the_server(
    fleet: Warehouse, by_tenant: Ledger
) -> None:
    """The grid asks for a block of rows at a time: the server sorts and filters the tenant's
    jobs as the grid's columns say, cuts the block, and says how many match."""
    client = _client(fleet, MANAGER)
    row = max(by_tenant.rows, key=lambda r: r.total_cost)
    picked = {"tenant": row.key, "user": ""}
    every = _rows(_jobs(client, picked))
    assert len(every) > 6
    by_cost = {**EVERY, "sortModel": [{"colId": "total_cost", "sort": "desc"}]}
    costs = [j["total_cost"] for j in _rows(_jobs(client, picked, asked=by_cost))]
    assert costs == sorted((j["total_cost"] for j in every), reverse=True)
    block = _jobs(client, picked, asked={**by_cost, "startRow": 2, "endRow": 5})
    assert [j["total_cost"] for j in _rows(block)] == costs[2:5]
    assert block["tenants-jobs"]["getRowsResponse"]["rowCount"] == len(every)
    user = every[0]["user"]
    text = {"user": {"filterType": "text", "type": "equals", "filter": user.upper()}}
    big = {"filterType": "number", "type": "greaterThan", "filter": 1.5}
    found = _jobs(
        client, picked, asked={**EVERY, "filterModel": {**text, "allocated_gpu_hours": big}}
    )
    mine = [j for j in every if j["user"] == user and j["allocated_gpu_hours"] > 1.5]
    assert _rows(found) == mine and found["tenants-jobs"]["getRowsResponse"]["rowCount"] == len(
        mine
    )
    assert f"{len(mine):,} match the grid's filters" in json.dumps(found) or len(mine) == len(every)
    either = {"filterType": "text", "operator": "OR", "conditions": [
        {"filterType": "text", "type": "startsWith", "filter": every[0]["job_id"]},
        {"filterType": "text", "type": "startsWith", "filter": every[1]["job_id"]}]}  # fmt: skip
    assert {j["job_id"] for j in _rows(_jobs(client, picked, asked={**EVERY, "filterModel": {
        "job_id": either}}))} >= {every[0]["job_id"], every[1]["job_id"]}  # fmt: skip
    wrong = _jobs(
        client, picked, asked={**EVERY, "sortModel": [{"colId": "secret", "sort": "asc"}]}
    )
    assert _rows(wrong) == [] and "no column 'secret' to sort by" in json.dumps(wrong)


def test_the_api_lists_each_job_as_the_ledger_has_it(fleet: Warehouse, orgs: list[str]) -> None:
    """The jobs' JSON (written by the frame, not per job) gives each job's figures as
    :func:`job_costs` has them: money to the cent as text, hours rounded, times to the second."""
    client = _client(fleet, MANAGER)
    query = {"from": "2026-03-03", "to": "2026-03-04", "of": orgs[0]}
    doc = client.get("/api/v1/jobs", query_string=query).get_json()
    window = Window.days(dt.date(2026, 3, 3), dt.date(2026, 3, 4))
    want = job_costs(fleet, window, now=NOW, tenant=orgs[0])
    assert [(j["cluster"], j["job_id"]) for j in doc["jobs"]] == [
        (j.cluster, j.job_id) for j in want.rows
    ]
    assert any(j.running for j in want.rows) and any(not j.running for j in want.rows)
    for got, job in zip(doc["jobs"], want.rows, strict=True):
        h = job.hours
        assert got["start"] == job.start.isoformat(timespec="seconds")
        assert got["end"] == job.end.isoformat(timespec="seconds")
        assert (got["running"], got["gpus"], got["attempts"]) == (
            job.running,
            job.gpus,
            job.attempts,
        )
        assert (got["direct_cost"], got["shared_cost"], got["total_cost"]) == (
            str(h.direct_cost),
            str(h.shared_cost),
            str(h.total_cost),
        )
        assert got["allocated_gpu_hours"] == pytest.approx(h.allocated_gpu_hours, abs=1e-6)
        assert got["unmeasured_gpu_hours"] == pytest.approx(h.unmeasured_gpu_hours, abs=1e-6)
        for key in ("used_gpu_hours", "idle_gpu_hours"):
            value = getattr(h, key)
            assert got[key] == (None if value is None else pytest.approx(value, abs=1e-6))
        eff = h.efficiency
        assert got["efficiency"] == (None if eff is None else pytest.approx(eff, abs=1e-4))
    assert doc["total_cost"] == str(want.total_cost)


def test_a_forged_pick_of_another_tenant_is_refused(fleet: Warehouse, orgs: list[str]) -> None:
    mine, other = orgs[:2]
    lead = _client(fleet, Viewer("lead", f"tenant:{mine}"))
    own = _rows(_jobs(lead, None))  # its own jobs without picking
    assert own and all(j["tenant"].startswith(mine + "/") for j in own)
    forged = _jobs(lead, {"tenant": other, "user": ""})
    assert _rows(forged) == [] and "may see the figures of tenant" in json.dumps(forged)
    sneaky = _jobs(lead, {"tenant": mine, "user": ""}, STATE + f"&tenant={other}")
    assert _rows(sneaky) == []
    api = lead.get("/api/v1/jobs", query_string={"of": other})
    assert api.status_code == 403


def test_picking_in_the_treemap_or_the_table(fleet: Warehouse) -> None:
    client = _client(fleet, MANAGER)
    click = {"points": [{"customdata": ["ml/vision", "ada", "1.00"]}]}
    status, response = post(
        client,
        [("tenants-selected", "data")],
        [("tenants-tree", "selectedRows", None), ("tenants-treemap", "clickData", click)],
        changed="tenants-treemap.clickData",
    )
    assert status == 200 and response["tenants-selected"]["data"] == {
        "tenant": "ml/vision",
        "user": "ada",
    }
    row = {"tenant": "ml", "user": "", "level": 0}
    _status, response = post(
        client,
        [("tenants-selected", "data")],
        [("tenants-tree", "selectedRows", [row]), ("tenants-treemap", "clickData", None)],
    )
    assert response["tenants-selected"]["data"] == {"tenant": "ml", "user": ""}


def test_nobody_logged_in_gets_no_figures(fleet: Warehouse) -> None:
    response = _tree(_client(fleet, None))
    assert response["tenants-tree"]["rowData"] == [] and "log in" in json.dumps(response)


def test_the_pages_serve_and_their_layouts_hold_no_tenant(
    fleet: Warehouse, orgs: list[str]
) -> None:
    client = _client(fleet, MANAGER)
    for path in ("/tenants", "/cost"):
        assert client.get(path).status_code == 200
    shell = json.dumps(client.get("/_dash-layout").get_json())
    assert "Tenants" in shell and "Cost" in shell  # the navigation
    pages = {p["path"]: p["layout"] for p in dash.page_registry.values()}
    for path in ("/tenants", "/cost"):
        layout = json.dumps(pages[path](), cls=plotly.utils.PlotlyJSONEncoder)
        assert '"type": "AgGrid"' in layout
        assert not any(org in layout for org in orgs)


def test_a_warmed_pass_gives_the_pages_the_figures_they_compute(
    fleet: Warehouse, orgs: list[str]
) -> None:
    """The server's live tail warms the ledger lines of the shell's ranges: a pass made them,
    and the Tenants page's tree and jobs over such a range, for a manager and for a tenant's
    lead, are what they compute without a tail, pricing no usage row again."""
    month = "?from=2026-03-01&to=2026-03-04"  # "This month" on NOW's day
    assert Window.days(dt.date(2026, 3, 1), NOW.date()) in warm.windows(NOW.date())
    lead = Viewer("lead", f"tenant:{orgs[0]}")
    picked = {"tenant": orgs[0], "user": ""}
    want = {}
    for who in (MANAGER, lead):
        client = _client(fleet, who)
        want[who] = (_tree(client, month), _rows(_jobs(client, picked, month)))
    kept = LiveTail(fleet, IdleRule(), every_s=60, clock=lambda: NOW, warm=warm.warm)

    def tailed(who: Viewer) -> Any:  # the app of the last one made is the one answering
        app = create_app(fleet, viewer=lambda: who, now=lambda: NOW, as_of=kept.now)
        return app.server.test_client()

    tailed(MANAGER)
    tail = kept.refresh()
    with kept.offered():
        warm.warm(NOW)
        # each window's priced and decided lines, and the ranges' daily usage
        ranged = {(first, last) for _label, first, last in ranges(NOW.date())}
        # and each cluster's quota positions and Capacity heatmap
        clusters = len(known_clusters(fleet))
        assert len(tail.made) == 2 * len(warm.windows(NOW.date())) + len(ranged) + 2 * clusters
        with refused((compute, "priced_inputs")):
            for who in (MANAGER, lead):
                client = tailed(who)
                got = (_tree(client, month), _rows(_jobs(client, picked, month)))
                assert got == want[who], who.role
    assert kept.made_served >= 4


def test_quota_positions_at_the_live_tails_instant_ask_nothing_again(
    fleet: Warehouse, orgs: list[str]
) -> None:
    """At the live tail's instant the Tenants page's quota positions come from the queue the
    pass kept (quotas, open allocations, waiting attempts): the same rows, for a manager and
    a lead, without asking the warehouse for them again."""
    lead = Viewer("lead", f"tenant:{orgs[0]}")
    want = {}
    for who in (MANAGER, lead):
        status, want[who] = post(_client(fleet, who), QUOTAS, [("filters-state", "data", STATE)])
        assert status == 200 and want[who]["tenants-quotas"]["rowData"]
    kept = LiveTail(fleet, IdleRule(), every_s=60, clock=lambda: NOW)
    kept.refresh()

    def asked(who: Viewer) -> Any:
        app = create_app(fleet, viewer=lambda: who, now=lambda: NOW, as_of=kept.now)
        return post(app.server.test_client(), QUOTAS, [("filters-state", "data", STATE)])[1]

    with kept.offered():
        with refused((explain, "_open_allocations"), (explain, "waiting_at")):
            for who in (MANAGER, lead):
                assert asked(who) == want[who], who.role
        # the pass's warming makes them once for every viewer: none asks them again
        warm.warm(NOW)
        with refused((explain, "quota_positions")):
            for who in (MANAGER, lead):
                assert asked(who) == want[who], who.role
