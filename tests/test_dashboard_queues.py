"""The queues page (/queues) and GET /api/v1/queues on a simulated fleet: waits, the jobs
waiting now with why, failures; a tenant's lead sees its own jobs alone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import fresh_database, recent, refused, simulate
from dash_calls import call, cli_json, grid_rows, text
from polars.testing import assert_frame_equal

from dashboards.app import create_app
from dashboards.context import Viewer
from warehouse.analytics import explain, fleet, pending, queues
from warehouse.client import Warehouse
from warehouse.ledger.result import IdleRule
from warehouse.ledger.tail import LiveTail
from warehouse.times import format_duration

NOW = recent(dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC))
FIRST, LAST = (NOW - dt.timedelta(days=2)).date(), NOW.date()
RANGE = f"?from={FIRST}&to={LAST}"
MANAGER = Viewer("m", "manager")
WAITS = [
    "queues-status.children",
    "queues-kpis.children",
    "queues-waits-figure.figure",
    "queues-waits.children",
    "queues-outcomes.children",
    "queues-top-reasons.children",
    "queues-lost.children",
]
PENDING = ["queues-reasons.children", "queues-pending.children"]
# an instant when the simulated queue is long and some of it waits on a reclaim
BUSY = NOW - dt.timedelta(hours=12)


@pytest.fixture(scope="module")
def fleet_wh(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=5, now=NOW)
        yield wh


def _client(wh: Warehouse, who: Viewer, now: dt.datetime = NOW) -> Any:
    return create_app(wh, viewer=lambda: who, now=lambda: now).server.test_client()


def _waits(wh: Warehouse, who: Viewer, by: str = "tenant") -> dict[str, Any]:
    return call(_client(wh, who), WAITS, {"filters-state.data": RANGE, "queues-by.value": by})


def _started(wh: Warehouse) -> pl.DataFrame:
    """The attempts that started in the range with a known wait, from the attempt rows."""
    start = dt.datetime.combine(FIRST, dt.time(), dt.UTC)
    end = dt.datetime.combine(LAST + dt.timedelta(days=1), dt.time(), dt.UTC)
    return queues.attempts(wh, "sim", start, end).filter(
        (pl.col("started_ts") >= start)
        & (pl.col("started_ts") < end)
        & (pl.col("queued_ts") <= pl.col("started_ts"))
    )


def test_a_manager_sees_every_tenants_waits_in_words(fleet_wh: Warehouse) -> None:
    got = _waits(fleet_wh, MANAGER)
    rows = grid_rows(got["queues-waits"]["children"])
    started = _started(fleet_wh)
    assert sum(r["attempts"] for r in rows) == started.height > 20
    for r in rows:  # durations are words, the percentiles of the tenant's own waits
        waits = started.filter(pl.col("tenant") == r["tenant"])
        seconds = (waits["started_ts"] - waits["queued_ts"]).dt.total_seconds().to_numpy()
        assert r["p50_s"] == format_duration(float(np.percentile(seconds, 50)))
        assert r["max_s"] == format_duration(float(seconds.max()))
    bars = got["queues-waits-figure"]["figure"]["data"]
    assert [b["name"] for b in bars] == ["median", "p90", "p99"]
    outcomes = grid_rows(got["queues-outcomes"]["children"])
    assert sum(r["ended"] for r in outcomes) > 0
    assert grid_rows(got["queues-top-reasons"]["children"])  # the fleet fails and preempts


def test_a_tenant_sees_its_own_percentiles(fleet_wh: Warehouse) -> None:
    whole = grid_rows(_waits(fleet_wh, MANAGER)["queues-waits"]["children"])
    org = whole[0]["tenant"].split("/")[0]
    lead = Viewer("lead", f"tenant:{org}")
    mine = _waits(fleet_wh, lead)
    assert grid_rows(mine["queues-waits"]["children"]) == [
        r for r in whole if r["tenant"].startswith(org + "/")
    ]
    others = [t for t in fleet.known_tenants(fleet_wh) if not t.startswith(org + "/")]
    assert not [t for t in others if t in text(mine)]
    # by GPU model: the percentiles of its own attempts, not the cluster's
    by_model = grid_rows(_waits(fleet_wh, lead, "gpu_model")["queues-waits"]["children"])
    cluster = grid_rows(_waits(fleet_wh, MANAGER, "gpu_model")["queues-waits"]["children"])
    started = _started(fleet_wh).filter(pl.col("tenant").str.starts_with(org + "/"))
    assert [r["attempts"] for r in by_model] == [started.height]
    assert by_model[0]["attempts"] < cluster[0]["attempts"]


def test_waiting_jobs_say_why_as_why_job_does(fleet_wh: Warehouse) -> None:
    got = call(_client(fleet_wh, MANAGER, BUSY), PENDING, {"filters-state.data": RANGE})
    rows = grid_rows(got["queues-pending"]["children"])
    assert len(rows) > 3 and "job(s) waiting" in text(got["queues-reasons"])
    for r in rows:
        why = explain.why_job(fleet_wh, "sim", r["job_id"], BUSY)
        assert why.state == "waiting"
        assert r["why"] == ", ".join(x.code.replace("_", " ") for x in why.reasons)
        assert r["detail"] == " · ".join(x.message for x in why.reasons)
    waited = [r["waited_s"] for r in rows]
    assert all(w and w[0].isdigit() for w in waited)  # in words: "3 h 7 m"


def test_a_tenants_waiting_jobs_name_no_other_tenant(fleet_wh: Warehouse) -> None:
    whole = grid_rows(
        call(_client(fleet_wh, MANAGER, BUSY), PENDING, {"filters-state.data": RANGE})[
            "queues-pending"
        ]["children"]
    )
    reclaimed = next(r for r in whole if "reclaim" in r["why"])
    org = reclaimed["tenant"].split("/")[0]
    others = [t for t in fleet.known_tenants(fleet_wh) if not t.startswith(org + "/")]
    assert any(t in reclaimed["detail"] for t in others)  # the manager is told whom
    lead = Viewer("lead", f"tenant:{org}")
    got = call(_client(fleet_wh, lead, BUSY), PENDING, {"filters-state.data": RANGE})
    mine = grid_rows(got["queues-pending"]["children"])
    assert [r["job_id"] for r in mine] == [
        r["job_id"] for r in whole if r["tenant"].startswith(org + "/")
    ]
    assert not [t for t in others if t in text(got)]
    told = next(r for r in mine if r["job_id"] == reclaimed["job_id"])
    assert "other tenants" in told["detail"] and told["why"] == reclaimed["why"]
    foreign_jobs = {r["job_id"] for r in whole} - {r["job_id"] for r in mine}
    api = _client(fleet_wh, lead, BUSY).get("/api/v1/queues", query_string={"to": str(LAST)})
    for job in api.get_json()["waiting"]:
        for reason in job["reasons"]:
            assert not set(reason["numbers"].get("jobs", ())) & foreign_jobs
            assert not set(reason["numbers"].get("borrowers", {})) & set(others)


def test_a_forged_callback_for_another_tenant_is_refused(fleet_wh: Warehouse) -> None:
    tenants = fleet.known_tenants(fleet_wh)
    org = tenants[0].split("/")[0]
    other = next(t for t in tenants if not t.startswith(org + "/"))
    client = _client(fleet_wh, Viewer("lead", f"tenant:{org}"))
    forged = RANGE + f"&tenant={other}"
    for outputs, inputs in (
        (WAITS, {"filters-state.data": forged, "queues-by.value": "tenant"}),
        (PENDING, {"filters-state.data": forged}),
    ):
        got = text(call(client, outputs, inputs))
        assert "may see the figures of tenant" in got and "rowData" not in got


def test_the_api_answers_what_the_cli_prints(fleet_wh: Warehouse) -> None:
    days = {"from": str(FIRST), "to": str(LAST)}
    for by in ("tenant", "queue"):
        got = _client(fleet_wh, MANAGER).get("/api/v1/queues", query_string={**days, "by": by})
        assert got.status_code == 200, got.data[:300]
        doc = got.get_json()
        cli = cli_json("queues", fleet_wh, "--from", str(FIRST), "--to", str(LAST), "--by", by)
        assert {k: doc[k] for k in cli} == cli
        assert doc["tenant"] is None and cli["wait_times"]


def test_the_api_holds_a_tenants_rows_alone(fleet_wh: Warehouse) -> None:
    days = {"from": str(FIRST), "to": str(LAST)}
    whole = _client(fleet_wh, MANAGER).get("/api/v1/queues", query_string=days).get_json()
    org = whole["wait_times"][0]["tenant"].split("/")[0]
    client = _client(fleet_wh, Viewer("lead", f"tenant:{org}"))
    mine = client.get("/api/v1/queues", query_string=days).get_json()
    assert mine["tenant"] == org
    for key in ("wait_times", "outcomes", "top_reasons", "lost_gpu_hours"):
        assert mine[key] == [r for r in whole[key] if r["tenant"].startswith(org + "/")], key
    assert all(w["tenant"].startswith(org + "/") for w in mine["waiting"])
    assert len(mine["wait_times"]) < len(whole["wait_times"])
    other = next(r["tenant"] for r in whole["wait_times"] if not r["tenant"].startswith(org))
    refused = client.get("/api/v1/queues", query_string={**days, "tenant": other})
    assert refused.status_code == 403 and "wait_times" not in refused.get_json()
    wrong = client.get("/api/v1/queues", query_string={**days, "by": "org"})
    assert wrong.status_code == 400 and "by 'org' is not one of" in wrong.get_json()["error"]


def test_waiting_jobs_as_of_the_live_tail_ask_nothing_again(fleet_wh: Warehouse) -> None:
    """The server's live tail keeps what each cluster's waiting jobs are judged against at its
    instant: the Queues page's "why waiting" as of that instant takes it, and says what asking
    says, to a manager and to a tenant alike."""
    lead = Viewer("lead", f"tenant:{fleet.known_tenants(fleet_wh)[0].split('/')[0]}")
    want = {
        who: call(_client(fleet_wh, who, BUSY), PENDING, {"filters-state.data": RANGE})
        for who in (MANAGER, lead)
    }
    assert grid_rows(want[MANAGER]["queues-pending"]["children"])  # some job waits then
    rule = IdleRule(0.05, 1800)
    kept = LiveTail(fleet_wh, rule, every_s=60, clock=lambda: BUSY)
    tail = kept.refresh()
    assert BUSY.replace(hour=0, minute=0, second=0, microsecond=0) == BUSY
    assert "sim" not in tail.stranded  # a midnight, nothing sealed: no stranded hour yet
    queue = tail.moments["sim"].queue
    asked = pending.queue_at(fleet_wh, "sim", BUSY)
    for part in ("waiting", "allocs", "quotas", "free"):
        assert_frame_equal(getattr(queue, part), getattr(asked, part))
    with kept.offered(), refused((explain, "waiting_at"), (pending, "free_state")):
        for who in (MANAGER, lead):
            app = create_app(fleet_wh, viewer=lambda w=who: w, now=lambda: BUSY, as_of=kept.now)
            got = call(app.server.test_client(), PENDING, {"filters-state.data": RANGE})
            assert got == want[who], who.role
