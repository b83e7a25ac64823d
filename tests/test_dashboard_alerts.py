"""The alerts page (/alerts): open alerts and the advice in force, from the alerts and advice
tables, with an empty state until alerting and advice write them; a tenant sees its own.

The fixture's history (T = the page's "now"):

    alert  rule            tenant          rows (ts: state)                      open at T
    a1     idle_allocated  ml/vision       T-3h firing                           yes
    a2     idle_allocated  ml/nlp          T-2h firing, T-1h resolved            no
    a3     idle_allocated  chem/sim        T-1h firing                           yes
    a4     gpu_unhealthy   (none)          T-30m firing                          yes
    a5     idle_allocated  ml/vision       T+1h firing (after T)                 no

    advice  from        to         rows (ts: status)                           in force at T
    v1      chem/sim    ml/vision  T-2h proposed                               yes
    v2      ml/nlp      ml/vision  T-2h proposed, T-1h applied                 no
    v3      ml/nlp      chem/sim   T-1h approved                               yes
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

import pytest
from dash_calls import call, grid_rows, text

from dashboards.app import create_app
from dashboards.context import Viewer
from gpuledger.advise_commands import decide
from warehouse.analytics import alerts
from warehouse.client import Warehouse

T = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)
OUTPUTS = ["alerts-status.children", "alerts-open.children", "alerts-advice.children"]
#: its end is after T: "now" (T) rules; no advice approved or rejected on the page yet
STATE = {"filters-state.data": f"?to={T.date()}", "alerts-decided.data": 0}

ALERT_COLUMNS = ("ts", "alert_id", "rule", "severity", "state", "cluster", "tenant", "message")
ALERT_TYPES = ("DateTime64(3, 'UTC')", *["String"] * 7)
ADVICE_COLUMNS = (
    "ts", "advice_id", "kind", "cluster", "pool", "gpu_model", "from_tenant", "to_tenant",
    "gpus", "job_ids", "reason", "payload", "status",
)  # fmt: skip
ADVICE_TYPES = (
    "DateTime64(3, 'UTC')", *["String"] * 7, "Float64", "Array(String)", "String", "String",
    "String",
)  # fmt: skip


def _client(wh: Warehouse, who: Viewer) -> Any:
    return create_app(wh, viewer=lambda: who, now=lambda: T).server.test_client()


@pytest.fixture
def history(wh: Warehouse) -> Warehouse:
    def alert(ts: dt.datetime, aid: str, rule: str, state: str, tenant: str) -> tuple[Any, ...]:
        return (ts, aid, rule, "warning", state, "c1", tenant, f"{rule} on {tenant or 'GPU-x'}")

    wh.insert_rows(
        "alerts",
        [
            alert(T - 3 * H, "a1", "idle_allocated", "firing", "ml/vision"),
            alert(T - 2 * H, "a2", "idle_allocated", "firing", "ml/nlp"),
            alert(T - H, "a2", "idle_allocated", "resolved", "ml/nlp"),
            alert(T - H, "a3", "idle_allocated", "firing", "chem/sim"),
            alert(T - H / 2, "a4", "gpu_unhealthy", "firing", ""),
            alert(T + H, "a5", "idle_allocated", "firing", "ml/vision"),
        ],
        ALERT_COLUMNS,
        ALERT_TYPES,
    )

    def advice(ts: dt.datetime, aid: str, giver: str, taker: str, status: str) -> tuple[Any, ...]:
        reason = f"reclaim 2 GPUs from {giver} (idle 3 h) for {taker}"
        jobs = [f"{giver.split('/')[1]}-job-1"]
        return (
            ts,
            aid,
            "reclaim",
            "c1",
            "p1",
            "H100",
            giver,
            taker,
            2.0,
            jobs,
            reason,
            "{}",
            status,
        )

    wh.insert_rows(
        "advice",
        [
            advice(T - 2 * H, "v1", "chem/sim", "ml/vision", "proposed"),
            advice(T - 2 * H, "v2", "ml/nlp", "ml/vision", "proposed"),
            advice(T - H, "v2", "ml/nlp", "ml/vision", "applied"),
            advice(T - H, "v3", "ml/nlp", "chem/sim", "approved"),
        ],
        ADVICE_COLUMNS,
        ADVICE_TYPES,
    )
    return wh


def test_nothing_written_yet_says_what_will_fill_it(wh: Warehouse) -> None:
    got = call(_client(wh, Viewer("m", "manager")), OUTPUTS, STATE)
    assert "No alerts yet: no rule has fired" in text(got["alerts-open"])
    assert "`gpuledger advise` proposes" in text(got["alerts-advice"])


def test_a_manager_sees_what_is_open_at_the_time(history: Warehouse) -> None:
    got = call(_client(history, Viewer("m", "manager")), OUTPUTS, STATE)
    open_alerts = grid_rows(got["alerts-open"]["children"])
    assert [(r["rule"], r["tenant"]) for r in open_alerts] == [
        ("gpu_unhealthy", ""),
        ("idle_allocated", "chem/sim"),
        ("idle_allocated", "ml/vision"),
    ]
    advice = grid_rows(got["alerts-advice"]["children"])
    assert [(r["from_tenant"], r["to_tenant"], r["status"]) for r in advice] == [
        ("ml/nlp", "chem/sim", "approved"),
        ("chem/sim", "ml/vision", "proposed"),
    ]
    assert advice[0]["reason"].startswith("reclaim 2 GPUs from ml/nlp")


def test_a_tenant_sees_its_own_and_no_other_tenants_name(history: Warehouse) -> None:
    got = call(_client(history, Viewer("lead", "tenant:ml")), OUTPUTS, STATE)
    assert [r["tenant"] for r in grid_rows(got["alerts-open"]["children"])] == ["ml/vision"]
    advice = grid_rows(got["alerts-advice"]["children"])
    assert [(r["from_tenant"], r["to_tenant"]) for r in advice] == [
        ("ml/nlp", alerts.ANOTHER_TENANT),  # v3: ml/nlp gives to chem/sim, unnamed
        (alerts.ANOTHER_TENANT, "ml/vision"),  # v1: chem/sim's jobs are not listed either
    ]
    assert advice[0]["job_ids"] == "nlp-job-1" and advice[1]["job_ids"] == ""
    assert "chem" not in text(got) and "sim-job" not in text(got)
    project = call(_client(history, Viewer("lead", "tenant:ml/nlp")), OUTPUTS, STATE)
    assert grid_rows(project["alerts-open"]["children"]) == []
    assert "No alert open as of" in text(project["alerts-open"])


def test_a_forged_callback_for_another_tenant_is_refused(history: Warehouse) -> None:
    client = _client(history, Viewer("lead", "tenant:ml"))
    got = text(call(client, OUTPUTS, {**STATE, "filters-state.data": "?tenant=chem"}))
    assert "may see the figures of tenant" in got and "rowData" not in got


def test_an_admin_or_a_manager_gets_the_buttons_and_a_tenant_none(history: Warehouse) -> None:
    """The approve and reject buttons come with the advice for those who may use them (the
    step's callback checks again: tests/test_advice_approve.py), never in the layout."""

    def advice(who: Viewer, wired: bool = True) -> Any:
        wiring = functools.partial(decide, history) if wired else None
        app = create_app(history, viewer=lambda: who, now=lambda: T, decide=wiring)
        return call(app.server.test_client(), OUTPUTS, STATE)["alerts-advice"]["children"]

    for role in ("admin", "manager"):
        buttons, grid = advice(Viewer("m", role))["props"]["children"]
        assert {"alerts-approve", "alerts-reject"} <= {
            c["props"].get("id") for c in buttons["props"]["children"]
        }
        assert "approve or reject it" in text(buttons)
        assert [r["advice_id"] for r in grid_rows(grid)] == ["v3", "v1"]
        assert grid["props"]["dashGridOptions"]["rowSelection"]["mode"] == "singleRow"
    for shown in (advice(Viewer("lead", "tenant:ml")), advice(Viewer("m", "manager"), False)):
        assert grid_rows(shown) and "alerts-approve" not in text(shown)


def test_an_alert_message_names_no_other_tenant_to_a_tenant() -> None:
    from warehouse.analytics.alerts import ANOTHER_TENANT, unnamed

    got = unnamed(
        "2 job(s) wait for H100 (j1 of product/search-ranking, j2 of ml/vision); product "
        "borrows 3 idle GPUs; the search-ranking-x job is named as it is",
        "ml",
        ["product/search-ranking", "data/churn"],
    )
    assert "product" not in got.replace("search-ranking-x", "")
    assert got.count(ANOTHER_TENANT) == 2 and "ml/vision" in got
    assert "search-ranking-x" in got  # a word inside a longer name is not a tenant's name
