"""Every registered page, its callbacks and the ledger API against a real `gpuledger serve`
over HTTP, without a browser: nothing answers without a login, the API's ledger is the CLI's,
and a tenant's holds its own rows alone."""

from __future__ import annotations

import json

import pytest
import requests
from conftest import PASSWORD, Site, names_in

from benchmarks.dash_replay import Replay, form_login, registered_pages

pytestmark = pytest.mark.integration

PAGES = registered_pages()


def test_without_a_login_no_page_or_callback_answers(demo_site: Site) -> None:
    site = demo_site
    replay = Replay(form_login(site.url, site.manager, PASSWORD))
    bodies = []
    for page in PAGES:
        load = replay.load(page.url_path(site.template_values))
        failed = [(c.callback, c.status, c.text[:300]) for c in load.calls if c.failed]
        assert not failed, failed
        bodies += [c.body for c in load.calls if c.status == 200]
    assert len(bodies) > len(PAGES)  # the manager's answers, each asked again without a login

    for page in PAGES:
        path = page.url_path(site.template_values)
        browser = requests.get(
            site.url + path, headers={"Accept": "text/html"}, allow_redirects=False, timeout=30
        )
        assert browser.status_code == 302, (path, browser.status_code)
        assert browser.headers["Location"].startswith("/login?next=")
        script = requests.get(site.url + path, allow_redirects=False, timeout=30)
        assert script.status_code == 401 and "log in" in script.json()["error"]
    for route in ("/_dash-layout", "/_dash-dependencies", "/api/v1/ledger"):
        assert requests.get(site.url + route, timeout=30).status_code == 401, route
    for body in bodies:
        for auth in (None, (site.manager, "not the password")):
            got = requests.post(
                site.url + "/_dash-update-component", json=body, auth=auth, timeout=30
            )
            assert got.status_code == 401, (body["output"], got.status_code)
            assert set(got.json()) == {"error"}  # never data


@pytest.mark.parametrize(
    ("query", "flags"),
    [({}, []), ({"by": "pool", "idle_policy": "even"}, ["--by", "pool", "--idle-policy", "even"])],
)
def test_the_api_ledger_is_the_clis(
    demo_site: Site, query: dict[str, str], flags: list[str]
) -> None:
    """As a manager over HTTP Basic, the same JSON as `gpuledger ledger --format json`
    typed while the server runs (which answers it from its own warehouse)."""
    site = demo_site
    first, last = site.days
    api = requests.get(
        f"{site.url}/api/v1/ledger",
        params={"from": first, "to": last, **query},
        auth=(site.manager, PASSWORD),
        timeout=60,
    )
    assert api.status_code == 200, api.text[:300]
    cli = json.loads(site.cli("ledger", "--from", first, "--to", last, "--format", "json", *flags))
    assert api.json() == cli
    assert len(cli["rows"]) > 1 and cli["conserved"] is True


def test_a_tenants_api_ledger_holds_its_rows_alone(demo_site: Site) -> None:
    site = demo_site
    first, last = site.days
    whole = json.loads(site.cli("ledger", "--from", first, "--to", last, "--format", "json"))
    mine = requests.get(
        f"{site.url}/api/v1/ledger",
        params={"from": first, "to": last},
        auth=(site.lead, PASSWORD),
        timeout=60,
    )
    assert mine.status_code == 200, mine.text[:300]
    got = mine.json()
    assert got["tenant"] == site.org
    # its own lines, with the cents they carry in the whole ledger
    assert got["rows"] == [r for r in whole["rows"] if r["key"].startswith(site.org + "/")]
    assert got["rows"] and len(got["rows"]) < len(whole["rows"])
    assert not names_in(mine.text, site.others)
    for other in site.other_orgs:
        refused = requests.get(
            f"{site.url}/api/v1/ledger",
            params={"from": first, "to": last, "tenant": other},
            auth=(site.lead, PASSWORD),
            timeout=60,
        )
        assert refused.status_code == 403 and "rows" not in refused.json()
