"""``GET /api/advice`` under the dashboards' access rules, and ``gpuledger advise`` end to end
(a data directory of tests/advice_fixture.py's cluster, the CLI in subprocesses, a kubeconfig
pointing at the fake API server)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import advice_fixture as af
import flask
import pytest
import requests
from conftest import ROOT, fresh_database, serving
from test_advice import LIMITS, advise
from test_advice_render import QUEUES

from dashboards.context import Viewer
from scheduler_hooks import api, proposals
from warehouse.analytics.alerts import ANOTHER_TENANT
from warehouse.client import Warehouse

MANAGER, VISION, ML = (
    Viewer("mia", "manager"),
    Viewer("vic", "tenant:ml/vision"),
    Viewer("olga", "tenant:ml"),
)


@pytest.fixture(scope="module")
def client(engine: Warehouse) -> Iterator[tuple[flask.testing.FlaskClient, list[Any]]]:
    with fresh_database(engine) as wh:
        af.fill(wh)
        proposals.propose(wh, advise(wh, **LIMITS), actor="cron")
        who: list[Any] = [MANAGER]
        app = flask.Flask(__name__)
        api.register(
            app,
            wh,
            viewer=lambda: who[0],
            now=lambda: af.T + af.MIN,
            live=lambda cluster, at: advise(wh, at=at),
        )
        yield app.test_client(), who


def ask(client: Any, viewer: Any, query: str = "") -> tuple[int, Any]:
    """Ask as ``viewer`` (None: nobody logged in)."""
    test_client, who = client
    who[0] = viewer
    got = test_client.get("/api/advice" + query)
    return got.status_code, got.get_json()


def test_a_manager_sees_all_the_advice(client: Any) -> None:
    status, body = ask(client, MANAGER)
    assert status == 200 and body["viewer"] == {"name": "mia", "role": "manager"}
    kinds = sorted(a["kind"] for a in body["advice"])
    assert kinds == sorted(
        ["reclaim", "lower_borrow_limit", "lend_guarantee", "fair_share_weight",
         "fair_share_weight", "idle_limit", "interactive_limit"]
    )  # fmt: skip
    reclaim = next(a for a in body["advice"] if a["kind"] == "reclaim")
    assert (reclaim["from_tenant"], reclaim["to_tenant"], reclaim["status"]) == (
        af.A,
        af.B,
        "proposed",
    )
    assert reclaim["job_ids"] == ["nlp-idle1", "nlp-idle2"] and reclaim["recovers_cost"] == "180.00"


def test_a_tenant_sees_only_the_advice_about_its_own_tenant(client: Any) -> None:
    _, body = ask(client, VISION)
    by_kind = {a["kind"]: a for a in body["advice"]}
    assert sorted(by_kind) == ["fair_share_weight", "reclaim"]
    reclaim = by_kind["reclaim"]
    assert (reclaim["from_tenant"], reclaim["to_tenant"]) == (ANOTHER_TENANT, af.B)
    assert reclaim["job_ids"] == [] and reclaim["reason"] == "" and "jobs" not in reclaim
    assert by_kind["fair_share_weight"]["from_tenant"] == af.B
    assert by_kind["fair_share_weight"]["reason"].startswith("raise ml/vision's fair-share")
    _, org = ask(client, ML)  # the org sees both of its projects' advice, named
    assert {a["from_tenant"] for a in org["advice"]} == {af.A, af.B}
    assert all(a["kind"] not in ("lend_guarantee", "interactive_limit") for a in org["advice"])


def test_live_standings_are_scoped_too(client: Any) -> None:
    _, body = ask(client, VISION, "?live=1&cluster=c1")
    (live,) = body["clusters"]
    assert [s["tenant"] for s in live["standings"]] == [af.B]
    assert [p["tenant"] for p in live["priorities"]] == [af.B]


def test_nobody_and_bad_input(client: Any) -> None:
    assert ask(client, None)[0] == 401
    status, body = ask(client, MANAGER, "?cluster=nope")
    assert status == 400 and "cluster 'nope' is not in the warehouse" in body["error"]


# -- the command line ---------------------------------------------------------------------------
FILL = """
import datetime as dt, sys
sys.path.insert(0, "tests")
import advice_fixture as af
from warehouse.client import connect
from warehouse.migrate import RenderOptions, migrate
wh = connect(f"chdb://{sys.argv[1]}", "gpuledger")
migrate(wh, RenderOptions(database="gpuledger"))
af.fill(wh)
wh.close()
"""


def test_the_command_line_proposes_renders_approves_and_applies(
    tmp_path: Path, fake: Any, cli_env: dict[str, str], gpuledger_cmd: list[str]
) -> None:
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-c", FILL, str(data)], cwd=ROOT, env=cli_env, check=True)
    for cq in QUEUES:
        fake.put("clusterqueues", cq)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        })
    )  # fmt: skip
    run = functools.partial(_cli, gpuledger_cmd, cli_env, data)
    for name, role in (("mia", "manager"), ("vic", "tenant:ml/vision")):
        run("user", "add", name, "--role", role, "--password-stdin", stdin=f"password-of-{name}\n")
    as_mia = ["--user", "mia", "--password-stdin"]
    at = ["--at", af.T.isoformat()]
    first = json.loads(run("advise", "--format", "json", *at))
    (c1,) = first["clusters"]
    assert len(c1["proposals"]["proposed"]) == 5 and len(c1["advice"]) == 5
    again = json.loads(run("advise", "--format", "json", *at))
    assert again["clusters"][0]["proposals"]["proposed"] == []  # nothing changed: no new advice
    patches = json.loads(run("advise", "--format", "kueue", "--kubeconfig", str(kubeconfig), *at))
    assert "ml-vision" not in {  # its ClusterQueue has weight 2 already: no weight advice
        p["name"] for p in patches if "fairSharing" in p.get("patch", {}).get("spec", {})
    }
    assert {p["name"] for p in patches if p["kind"] == "ClusterQueue"} == {
        "ml-nlp",
        "ml-vision",
        "ds-chat",
    }
    assert not [w for w in fake.writes if w[0] == "PATCH"]  # dry run: nothing patched
    lend = next(a["advice_id"] for a in c1["advice"] if a["kind"] == "lend_guarantee")
    approved = run("advise", "approve", lend, *as_mia, stdin="password-of-mia\n")
    assert approved.strip() == f"advice {lend}: approved by mia"
    run(
        "advise", "apply", lend, "--format", "kueue", "--kubeconfig", str(kubeconfig), *as_mia,
        stdin="password-of-mia\n",
    )  # fmt: skip
    cq = fake.get("clusterqueues", "ds-chat")["spec"]["resourceGroups"][0]["flavors"][0]
    assert cq["resources"][1]["lendingLimit"] == 1
    listed = run("advise", "list")
    assert lend not in listed and "reclaim" in listed
    audit = run("audit", "--action", "advice", "--format", "json")
    actions = {(e["action"], e["actor"]) for e in json.loads(audit)}
    assert {("advice.approve", "mia"), ("advice.apply", "mia")} <= actions
    bad = subprocess.run(
        [*gpuledger_cmd, "advise", "apply", lend, "--format", "kueue", *as_mia, "--data-dir",
         str(data)],
        cwd=ROOT, env=cli_env, input="password-of-mia\n", capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and f"advice {lend} is applied" in bad.stderr
    # served: a logged-in tenant gets the advice about its own tenant alone
    with serving(gpuledger_cmd, cli_env, data) as url:
        assert requests.get(f"{url}/api/advice", timeout=30).status_code == 401
        seen = requests.get(f"{url}/api/advice", auth=("vic", "password-of-vic"), timeout=60).json()
        every = requests.get(
            f"{url}/api/advice", auth=("mia", "password-of-mia"), timeout=60
        ).json()
    # read with the kubeconfig, ml/vision's weight is 2 already: its weight advice was
    # withdrawn then; the lend was applied since
    assert [a["kind"] for a in seen["advice"]] == ["reclaim"]
    assert seen["advice"][0]["from_tenant"] == ANOTHER_TENANT
    assert sorted(a["kind"] for a in every["advice"]) == [
        "fair_share_weight",
        "lower_borrow_limit",
        "reclaim",
    ]


def _cli(cmd: list[str], env: dict[str, str], data: Path, *args: str, stdin: str = "") -> str:
    got = subprocess.run(
        [*cmd, *args, "--data-dir", str(data)],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, got.stderr
    return got.stdout
