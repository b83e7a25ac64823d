"""Who may approve advice: on the command line a gpuledger user of role admin or manager whose
password is checked, on the dashboard's alerts page a logged-in admin or manager, checked again
in the callback. Every step and every refusal is in the audit log under the person's name.

A data directory of tests/advice_fixture.py's cluster, its advice proposed by `gpuledger
advise` (which needs no user), with a manager (mia) and a tenant's lead (vic, ml/vision); the
command line in subprocesses, then a real `gpuledger serve` whose callbacks are posted over
HTTP as the browser does, and whose approve button is clicked in Chromium."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import advice_fixture as af
import pytest
import requests
from cli_runner import Cli
from conftest import PASSWORD, ROOT, serving
from test_advice_api import FILL

from benchmarks.dash_replay import Replay, RequestsTransport, dependencies, form_login

pytestmark = pytest.mark.integration

MANAGER, TENANT = "mia", "vic"


@dataclasses.dataclass(frozen=True)
class Data:
    """The data directory, how to run the CLI on it, and the proposed advice's ids by kind."""

    dir: Path
    cmd: list[str]  # for `serve`
    cli: Cli  # for the commands that end
    env: dict[str, str]
    ids: dict[str, str]

    def run(self, *args: str, stdin: str | None = None, **env: str) -> Any:
        argv = (*args, "--data-dir", str(self.dir))
        return self.cli(*argv, env={**self.env, **env}, stdin=stdin, timeout=180, cwd=ROOT)

    def ok(self, *args: str, stdin: str | None = None, **env: str) -> str:
        got = self.run(*args, stdin=stdin, **env)
        assert got.returncode == 0, got.stderr[-2000:]
        return str(got.stdout)

    def refused(self, *args: str, stdin: str | None = None) -> str:
        """The one line a refused command prints (exit status 2)."""
        got = self.run(*args, stdin=stdin)
        lines = got.stderr.splitlines()
        assert got.returncode == 2 and len(lines) == 1, (got.returncode, got.stderr)
        assert lines[0].startswith("gpuledger: ")
        return str(lines[0])

    def audit(self, advice_id: str) -> list[tuple[str, str, str]]:
        """(actor, action, outcome) of the advice's entries but its proposal, oldest first."""
        entries = json.loads(self.ok("audit", "--action", "advice", "--format", "json"))
        return [
            (e["actor"], e["action"], e["outcome"])
            for e in reversed(entries)
            if e["object"] == advice_id and e["action"] != "advice.propose"
        ]


@pytest.fixture
def data(tmp_path: Path, gpuledger_cmd: list[str], run_cli: Cli, cli_env: dict[str, str]) -> Data:
    where = tmp_path / "data"
    subprocess.run([sys.executable, "-c", FILL, str(where)], cwd=ROOT, env=cli_env, check=True)
    made = Data(where, gpuledger_cmd, run_cli, cli_env, {})
    for name, role in ((MANAGER, "manager"), (TENANT, "tenant:ml/vision")):
        made.ok("user", "add", name, "--role", role, "--password-stdin", stdin=PASSWORD + "\n")
    shown = json.loads(made.ok("advise", "--format", "json", "--at", af.T.isoformat()))
    advice = shown["clusters"][0]["advice"]
    ids = {a["kind"]: a["advice_id"] for a in advice if a["kind"] != "fair_share_weight"}
    assert sorted(ids) == ["lend_guarantee", "lower_borrow_limit", "reclaim"]
    return dataclasses.replace(made, ids=ids)


def test_the_command_line_approves_as_a_manager_alone(data: Data) -> None:
    lend, limit = data.ids["lend_guarantee"], data.ids["lower_borrow_limit"]
    nameless = data.refused("advise", "approve", lend)
    assert "advise approve runs as a gpuledger user of role admin or manager: give --user" in (
        nameless
    )
    by = data.refused("advise", "approve", lend, "--by", MANAGER)
    assert "--by is gone" in by and "give --user NAME" in by
    as_tenant = ("advise", "approve", lend, "--user", TENANT, "--password-stdin")
    tenant = data.refused(*as_tenant, stdin=PASSWORD + "\n")
    assert "needs role admin or manager, and user vic has role tenant:ml/vision" in tenant
    wrong = data.refused(
        "advise", "approve", lend, "--user", MANAGER, "--password-stdin", stdin="not it\n"
    )
    assert "the user name 'mia' or its password is wrong" in wrong
    assert lend in data.ok("advise", "list")  # still proposed; listing needs no user
    approved = data.ok(
        "advise", "approve", lend, "--user", MANAGER, "--password-stdin", stdin=PASSWORD + "\n"
    )
    assert approved.strip() == f"advice {lend}: approved by mia"
    rejected = data.ok(  # the user from the settings (GPULEDGER_SCHEDULER__USER)
        "advise",
        "reject",
        limit,
        "--password-stdin",
        stdin=PASSWORD + "\n",
        GPULEDGER_SCHEDULER__USER=MANAGER,
    )
    assert rejected.strip() == f"advice {limit}: rejected by mia"
    assert data.audit(lend) == [
        ("vic", "advice.approve.denied", "denied"),
        ("mia", "advice.approve.denied", "denied"),
        ("mia", "advice.approve", "ok"),
    ]
    assert data.audit(limit) == [("mia", "advice.reject", "ok")]


# -- the dashboard ----------------------------------------------------------------------------
def _step(transport: RequestsTransport, button: str, advice_id: str) -> str:
    """Click ``button`` (alerts-approve, alerts-reject) with ``advice_id`` picked in the table,
    as the browser posts it (whether or not the page showed the button): the message shown."""
    (cb,) = [c for c in dependencies(transport) if c.reads(button, "n_clicks")]
    body = {
        "output": cb.key,
        "outputs": [{"id": o.ident, "property": o.prop} for o in cb.outputs],
        "inputs": [
            {"id": i.ident, "property": i.prop, "value": 1 if i.ident == button else None}
            for i in cb.inputs
        ],
        "state": [
            {
                "id": s.ident,
                "property": s.prop,
                "value": [{"advice_id": advice_id}] if s.prop == "selectedRows" else 0,
            }
            for s in cb.state
        ],
        "changedPropIds": [f"{button}.n_clicks"],
    }
    status, text = transport.post("/_dash-update-component", body)
    assert status == 200, text[:500]
    return json.dumps(json.loads(text)["response"]["alerts-decision"])


def _statuses(url: str) -> dict[str, str]:
    """The advice in force, as the manager's ``GET /api/advice`` reads it from the warehouse."""
    got = requests.get(f"{url}/api/advice", auth=(MANAGER, PASSWORD), timeout=60)
    assert got.status_code == 200, got.text[:300]
    return {a["advice_id"]: a["status"] for a in got.json()["advice"]}


def test_the_alerts_page_approves_for_a_manager_and_refuses_a_tenant(data: Data) -> None:
    reclaim, lend = data.ids["reclaim"], data.ids["lend_guarantee"]
    with serving(data.cmd, data.env, data.dir, log=data.dir.parent / "serve.log") as url:
        manager, tenant = form_login(url, MANAGER, PASSWORD), form_login(url, TENANT, PASSWORD)
        seen = Replay(manager).load("/alerts")
        assert "alerts-approve" in seen.props and "alerts-reject" in seen.props
        rows = seen.props["alerts-advice-grid"]["rowData"]
        assert {r["advice_id"] for r in rows} >= {reclaim, lend}
        theirs = Replay(tenant).load("/alerts")  # no buttons; its own tenant's advice alone
        assert "alerts-approve" not in theirs.props and "alerts-reject" not in theirs.props
        own = theirs.props["alerts-advice-grid"]["rowData"]
        assert sorted(r["kind"] for r in own) == ["fair_share_weight", "reclaim"]
        assert reclaim in {r["advice_id"] for r in own} and lend not in str(own)

        forged = _step(tenant, "alerts-approve", reclaim)
        assert "vic (tenant:ml/vision) may not approve advice" in forged
        assert _step(tenant, "alerts-reject", lend).count("may not reject advice") == 1
        assert _statuses(url)[reclaim] == "proposed" and _statuses(url)[lend] == "proposed"

        approved = _step(manager, "alerts-approve", reclaim)
        assert f"Advice {reclaim} approved by mia" in approved
        assert _statuses(url)[reclaim] == "approved"
        again = _step(manager, "alerts-approve", reclaim)
        assert f"advice {reclaim} is approved: only proposed advice can be approved" in again
        assert f"Advice {lend} rejected by mia" in _step(manager, "alerts-reject", lend)
        assert lend not in _statuses(url)  # rejected advice is no longer in force
        assert data.audit(reclaim) == [
            ("vic", "advice.approve.denied", "denied"),
            ("mia", "advice.approve", "ok"),
        ]
        assert data.audit(lend) == [
            ("vic", "advice.reject.denied", "denied"),
            ("mia", "advice.reject", "ok"),
        ]


@pytest.mark.browser
def test_the_approve_button_in_chromium(data: Data) -> None:
    """A manager picks the reclaim in the alerts page's grid and clicks Approve in Debian's
    Chromium: the page says so and the grid shows it approved (screenshot in
    test-artifacts/screenshots/); the tenant's lead sees no button."""
    from test_pages_browser import ARGS, CHROMIUM, SCREENSHOTS, playwright_api

    if not CHROMIUM.exists():
        pytest.skip(f"no {CHROMIUM}: `make chromium`")
    reclaim = data.ids["reclaim"]
    with (
        serving(data.cmd, data.env, data.dir, log=data.dir.parent / "serve.log") as url,
        playwright_api.sync_playwright() as pw,
    ):
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            for user in (TENANT, MANAGER):
                page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
                page.set_default_timeout(60_000)
                page.goto(f"{url}/alerts")
                page.fill("input[name=user]", user)
                page.fill("input[name=password]", PASSWORD)
                page.click("button[type=submit]")
                cell = page.locator("#alerts-advice-grid .ag-cell[col-id=advice_id]")
                cell.filter(has_text=reclaim).wait_for()
                if user == TENANT:
                    assert page.locator("#alerts-approve").count() == 0
                    continue
                mine = page.locator(".ag-cell[col-id=advice_id]", has_text=reclaim)
                row = page.locator("#alerts-advice-grid .ag-row", has=mine)
                row.locator(".ag-cell[col-id=advice_id]").click()
                page.click("#alerts-approve")
                decision = page.locator("#alerts-decision")
                decision.filter(has_text=f"Advice {reclaim} approved by {MANAGER}").wait_for()
                # the grid is drawn anew after the step: the row is found again, not kept
                row.locator(".ag-cell[col-id=status]", has_text="approved").wait_for()
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / "alerts-approved.png"), full_page=True)
        finally:
            browser.close()
        assert _statuses(url)[reclaim] == "approved"
    assert data.audit(reclaim) == [(MANAGER, "advice.approve", "ok")]
