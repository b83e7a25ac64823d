"""Every page in ``dash.page_registry`` in headless Chromium (Debian's, driven by Playwright),
against a real `gpuledger serve` over a small simulated cluster (``demo_site``).

As a manager, logged in through the login form: each page answers 200, no callback fails and
no traceback shows, its figures render with data, a filter of the shell's bar changes what it
shows and the URL, and a reload of that URL brings the filter back; a full-page screenshot of
each goes to ``test-artifacts/screenshots/``. As ``tenant:ORG``: no other tenant's name
reaches the browser, a forged callback asking for another tenant's rows answers none of its
names or numbers, and the ledger API holds the org's rows alone.

The pages come from the registry, so a page registered later is tested as it lands.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import io
import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import numpy as np
import pytest
from conftest import PASSWORD, ROOT, Site, names_in

from benchmarks.dash_replay import Load, Page, Replay, registered_pages, walk

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path("/usr/lib/chromium/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
PAGES = registered_pages()
#: Pages that may show an empty state (an element with class ``empty``), and when.
EMPTY_STATE = {"/alerts": "a warehouse where no alert has fired and no advice is proposed"}
#: Pages known not to follow the shell's filters yet: expected to fail, not strictly (an
#: XPASS in the summary says the entry can go).
IGNORES_FILTERS: dict[str, str] = {}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no {CHROMIUM}: `make chromium`"),
]
#: A forged request's answer may take a first, uncached computation on a loaded machine.
REQUEST_MS = 120_000


def _pages(marks: Mapping[str, str] | None = None) -> list[Any]:
    return [
        pytest.param(
            p,
            id=p.slug,
            marks=[pytest.mark.xfail(reason=marks[p.path], strict=False)]
            if marks and p.path in marks
            else [],
        )
        for p in PAGES
    ]


# -- the browser ------------------------------------------------------------------------------
@dataclasses.dataclass
class Visit:
    """One page open in a tab: the answer to its URL, and what its callbacks did."""

    page: Any  # playwright Page
    status: int
    updates: list[Any] = dataclasses.field(default_factory=list)  # callback responses
    errors: list[str] = dataclasses.field(default_factory=list)  # uncaught script errors
    busy: set[Any] = dataclasses.field(default_factory=set)  # requests in flight

    def settle(self, timeout_s: float = 60) -> None:
        """Wait until the page's content is there, no Dash request is in flight and nothing
        is marked loading, for half a second."""
        self.page.wait_for_selector("#_pages_content > *", state="attached", timeout=30_000)
        quiet, waited = 0, 0.0
        while quiet < 4:
            self.page.wait_for_timeout(125)
            waited += 0.125
            assert waited < timeout_s, f"{self.page.url} still loading after {timeout_s} s"
            loading = self.page.evaluate(
                "() => !!document.querySelector('[data-dash-is-loading=\"true\"]')"
            )
            quiet = 0 if self.busy or loading else quiet + 1

    def texts(self) -> list[str]:
        """The callbacks' answers so far, and the text the page shows."""
        answers = [  # as JSON without escapes: Dash writes "/" as \u002f
            json.dumps(json.loads(r.text()), ensure_ascii=False)
            for r in self.updates
            if r.status == 200
        ]
        return [*answers, self.page.inner_text("body")]

    def failures(self, log: Path) -> list[str]:
        """Callbacks that failed, script errors, and traceback text on the page."""
        failed = [f"{r.status} {r.url}: {r.text()[:300]}" for r in self.updates if r.status >= 400]
        body = self.page.inner_text("body")
        shown = [w for w in ("Traceback", "Callback error", "Internal Server Error") if w in body]
        overlay = self.page.query_selector(".dash-fe-error__title, .dash-debug-alert")
        found = failed + self.errors + shown + (["Dash error overlay"] if overlay else [])
        if found and log.exists():
            found.append("server log:\n" + log.read_text(errors="replace")[-3000:])
        return found

    def shown(self) -> str:
        """What the page shows: its text, its figures' data and its grids' rows."""
        return str(
            self.page.evaluate(
                """() => JSON.stringify({
                text: document.getElementById('_pages_content').innerText,
                plots: [...document.querySelectorAll('.js-plotly-plot')].map(g =>
                    (g.data || []).map(t => JSON.stringify(t, (k, v) =>
                        k === 'uid' || k.startsWith('_') ? undefined  // Plotly's own, per draw
                        : ArrayBuffer.isView(v) ? Array.from(v)
                        // sums come back in any order: their last bits vary
                        : typeof v === 'number' ? Number(v.toPrecision(9)) : v))),
            })"""
            )
        )

    def data(self) -> dict[str, list[Any]]:
        """Points per trace of each figure, rows of each grid."""
        return dict(
            self.page.evaluate(
                """() => ({
                plots: [...document.querySelectorAll('.js-plotly-plot')].map(g =>
                    (g.data || []).map(t => Math.max(0, ...['x', 'y', 'z', 'values', 'r',
                        'lat', 'lon', 'a', 'b'].map(k => (t[k] && t[k].length) || 0)))),
                grids: [...document.querySelectorAll('.ag-root-wrapper')].map(g =>
                    g.querySelectorAll('.ag-center-cols-container .ag-row').length),
            })"""
            )
        )

    def choose(self, control: str, option: str | int) -> str:
        """Pick ``option`` (its text, or its place) in the shell's dropdown ``filters-<control>``,
        as a person does; the option's text."""
        self.page.click(f"#filters-{control}")
        options = self.page.locator("[role=listbox] [role=option]")
        options.first.wait_for(timeout=10_000)
        pick = (
            options.nth(option)
            if isinstance(option, int)
            else options.filter(has_text=re.compile(rf"^{re.escape(option)}$"))
        )
        text = str(pick.inner_text()).strip()
        pick.click()
        self.settle()
        return text

    def type_dates(self, first: str, last: str) -> None:
        """Type a range into the shell's date inputs, as a person does."""
        for selector, day in (("#filters-dates", first), ("#filters-dates-end-date", last)):
            self.page.fill(selector, day)
            self.page.press(selector, "Enter")
            self.page.press(selector, "Escape")  # the calendar opened: close it
            self.settle()

    def search(self) -> dict[str, list[str]]:
        return parse_qs(str(self.page.evaluate("() => location.search")).lstrip("?"))


@dataclasses.dataclass
class Browser:
    """A headless Chromium with its own fresh profile, logged in as ``user``."""

    context: Any  # playwright BrowserContext
    site: Site

    def open(self, path: str) -> Visit:
        page = self.context.new_page()
        visit = Visit(page, 0)
        page.on("pageerror", lambda e: visit.errors.append(f"script error: {e}"))

        def sent(request: Any) -> None:
            if "/_dash-" in request.url:
                visit.busy.add(request)

        def done(request: Any) -> None:
            visit.busy.discard(request)

        def answered(response: Any) -> None:
            if "/_dash-update-component" in response.url:
                visit.updates.append(response)

        page.on("request", sent)
        page.on("requestfinished", done)
        page.on("requestfailed", done)
        page.on("response", answered)
        reply = page.goto(self.site.url + path)
        visit.status = reply.status if reply else 0
        visit.settle()
        return visit

    def get(self, path: str) -> tuple[int, str]:
        got = self.context.request.get(self.site.url + path, timeout=REQUEST_MS)
        return got.status, got.text()

    def post(self, path: str, body: Mapping[str, Any]) -> tuple[int, str]:
        got = self.context.request.post(self.site.url + path, data=dict(body), timeout=REQUEST_MS)
        return got.status, got.text()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        yield pw


def _browser(chromium: Any, site: Site, user: str, profile: Path) -> Iterator[Browser]:
    context = chromium.chromium.launch_persistent_context(
        profile,
        executable_path=str(CHROMIUM),
        args=ARGS,
        headless=True,
        viewport={"width": 1440, "height": 900},
    )
    try:
        page = context.new_page()
        reply = page.goto(site.url + "/")
        assert reply is not None and reply.status == 200
        assert "/login" in page.url  # nobody logged in yet: the form
        page.fill("input[name=user]", user)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/login" not in url)
        page.close()
        yield Browser(context, site)
    finally:
        context.close()


@pytest.fixture(scope="module")
def manager(
    chromium: Any, demo_site: Site, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Browser]:
    yield from _browser(chromium, demo_site, demo_site.manager, tmp_path_factory.mktemp("m"))


@pytest.fixture(scope="module")
def lead(
    chromium: Any, demo_site: Site, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Browser]:
    yield from _browser(chromium, demo_site, demo_site.lead, tmp_path_factory.mktemp("t"))


def _screenshot(visit: Visit, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    visit.page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


# -- as a manager -----------------------------------------------------------------------------
def test_the_shell_links_every_registered_page(manager: Browser) -> None:
    status, text = manager.get("/_dash-layout")
    assert status == 200
    ids = [c["props"].get("id") for c in walk(json.loads(text))]
    links = sorted(i["path"] for i in ids if isinstance(i, dict) and i.get("type") == "shell-nav")
    assert links == sorted(p.path for p in PAGES if not p.templated)


def test_the_shells_filters_live_in_the_url(manager: Browser, demo_site: Site) -> None:
    """Filters chosen in the shell's bar are in the URL, and opening that URL (a reload, a
    shared link) sets them again."""
    first, last = demo_site.days
    visit = manager.open(next(p.path for p in PAGES if not p.templated))
    try:
        visit.type_dates(first, last)
        tenant = visit.choose("tenant", demo_site.org)
        model = visit.choose("gpu_model", 0)
        wanted = {"from": [first], "to": [last], "tenant": [tenant], "gpu_model": [model]}
        assert {k: visit.search().get(k) for k in wanted} == wanted
        for reopen in ("reload", "the URL in a new tab"):
            if reopen == "reload":
                visit.page.reload()
                visit.settle()
            else:
                url = visit.page.url.removeprefix(demo_site.url)
                visit.page.close()
                visit = manager.open(url)
            assert {k: visit.search().get(k) for k in wanted} == wanted, reopen
            assert visit.page.inner_text("#filters-tenant").strip() == tenant, reopen
            assert visit.page.inner_text("#filters-gpu_model").strip() == model, reopen
            dates = [
                visit.page.input_value(s) for s in ("#filters-dates", "#filters-dates-end-date")
            ]
            assert dates == [first, last], reopen
            assert not visit.failures(demo_site.log)
    finally:
        visit.page.close()


def test_a_one_click_range_keeps_the_page_and_its_other_filters(
    manager: Browser, demo_site: Site
) -> None:
    """The shell's "30 days" link sets the range to the last 30 days, today included, on the
    page it is clicked on, with the other filters as they were."""
    path = next(p.path for p in PAGES if not p.templated and p.path != "/")
    visit = manager.open(path)
    try:
        tenant = visit.choose("tenant", demo_site.org)
        visit.page.click(".range-link >> text='30 days'")
        visit.settle()
        today = dt.datetime.now(dt.UTC).date()
        first = (today - dt.timedelta(days=29)).isoformat()
        wanted = {"from": [first], "to": [today.isoformat()], "tenant": [tenant]}
        assert {k: visit.search().get(k) for k in wanted} == wanted
        assert visit.page.evaluate("() => location.pathname") == path
        dates = [visit.page.input_value(s) for s in ("#filters-dates", "#filters-dates-end-date")]
        assert dates == [first, today.isoformat()]
        assert not visit.failures(demo_site.log)
    finally:
        visit.page.close()


@pytest.mark.parametrize("page", _pages())
def test_a_page_loads_with_data(manager: Browser, demo_site: Site, page: Page) -> None:
    visit = manager.open(page.url_path(demo_site.template_values))
    try:
        assert visit.status == 200
        assert not visit.failures(demo_site.log)
        _screenshot(visit, page.slug)
        data = visit.data()
        plotted = any(n > 0 for plot in data["plots"] for n in plot)
        if page.path in EMPTY_STATE and not plotted and not any(data["grids"]):
            assert visit.page.query_selector("#_pages_content .empty"), "no empty state shown"
        else:
            assert plotted or any(data["grids"]), f"no figure with points, no grid rows: {data}"
    finally:
        visit.page.close()


@pytest.mark.parametrize("page", _pages(IGNORES_FILTERS))
def test_a_filter_changes_the_page_and_its_url(
    manager: Browser, demo_site: Site, page: Page
) -> None:
    """The first of the shell's filters that changes what the page shows (a tenant, a date
    range, a GPU model, a pool) is in the URL, and a reload of that URL shows it again."""
    path = page.url_path(demo_site.template_values)
    first, last = demo_site.days
    tries: list[tuple[str, Any]] = [
        ("tenant", demo_site.org),
        ("dates", None),
        ("gpu_model", 0),
        ("pool", 0),
    ]
    for control, option in tries:
        visit = manager.open(path)
        before = visit.shown()
        if control == "dates":
            visit.type_dates(first, last)
            wanted = {"from": [first], "to": [last]}
        else:
            chosen = visit.choose(control, option)
            wanted = {control: [chosen]}
        assert not visit.failures(demo_site.log)
        query = visit.search()
        assert {k: query.get(k) for k in wanted} == wanted  # the URL follows the filters
        if visit.shown() != before:
            break
        visit.page.close()
    else:
        pytest.fail(f"none of the shell's filters ({[t[0] for t in tries]}) changes {path}")
    try:
        visit.page.reload()
        visit.settle()
        assert {k: visit.search().get(k) for k in wanted} == wanted
        if control == "dates":
            values = [
                visit.page.input_value(s) for s in ("#filters-dates", "#filters-dates-end-date")
            ]
            assert values == [first, last]
        else:
            assert visit.page.inner_text(f"#filters-{control}").strip() == wanted[control][0]
        assert visit.shown() != before, "the reloaded page does not show the filtered state"
    finally:
        visit.page.close()


# -- as a tenant ------------------------------------------------------------------------------
def test_picking_a_tenant_lists_its_jobs_a_block_at_a_time(manager: Browser) -> None:
    """The jobs' grid asks the server for its rows: nothing before a pick; a row picked in
    the tenants' table lists that tenant's jobs, and sorting a column asks again."""
    visit = manager.open("/tenants")
    try:
        jobs = visit.page.locator("#tenants-jobs .ag-center-cols-container .ag-row")
        assert "Pick a tenant" in visit.page.inner_text("#tenants-jobs-note")
        visit.page.locator("#tenants-tree .ag-center-cols-container .ag-row").first.click()
        visit.page.wait_for_function(
            "() => document.getElementById('tenants-jobs-title').innerText.startsWith('Jobs of')",
            timeout=60_000,
        )
        visit.settle()
        assert jobs.count() > 0 and "jobs," in visit.page.inner_text("#tenants-jobs-note")
        tenant = visit.page.inner_text("#tenants-jobs-title").removeprefix("Jobs of ").strip()
        shown = visit.page.locator("#tenants-jobs .ag-center-cols-container [col-id=tenant]")
        assert all(t.startswith(tenant) for t in shown.all_inner_texts())
        asked = len(visit.updates)
        visit.page.click("#tenants-jobs .ag-header-cell[col-id=user] .ag-header-cell-label")
        visit.settle()
        assert len(visit.updates) > asked  # sorted on the server: a new block asked for
        assert jobs.count() > 0 and not visit.failures(manager.site.log)
        _screenshot(visit, "tenants-jobs")
    finally:
        visit.page.close()


def test_the_name_check_sees_what_a_manager_is_shown(manager: Browser, demo_site: Site) -> None:
    """The check below can fail: a manager's browser gets every org's name (the tenant
    filter offers them all), and the check finds them."""
    visit = manager.open(next(p.path for p in PAGES if not p.templated))
    try:
        found = names_in("\n".join(visit.texts()), demo_site.others)
        assert set(demo_site.other_orgs) <= found
    finally:
        visit.page.close()


@pytest.mark.parametrize("page", _pages())
def test_a_tenant_sees_no_other_tenants_name(lead: Browser, demo_site: Site, page: Page) -> None:
    """Neither in what the page shows nor in any callback's answer, also when the URL asks
    for another tenant."""
    path = page.url_path(demo_site.template_values)
    asked = demo_site.other_orgs[0]
    for query, others in (("", demo_site.others), (f"?tenant={asked}", demo_site.others - {asked})):
        visit = lead.open(path + query)
        try:
            assert visit.status == 200
            assert not visit.failures(demo_site.log)
            texts = "\n".join(visit.texts())
            assert demo_site.org in texts  # its own org is offered: the answers were read
            assert not names_in(texts, others)  # but the org its own URL names
            if not query:
                _screenshot(visit, f"{page.slug}-tenant")
        finally:
            visit.page.close()


def _numbers(value: Any) -> set[str]:
    """The numbers in a callback's answer worth keeping apart: 3 significant digits or more,
    not whole numbers under 1,000 (counts, hours of a day, percentages), from JSON numbers,
    Plotly's binary arrays and text (dates, GPU ids and colours left out)."""
    found: list[float] = []
    if isinstance(value, dict) and isinstance(value.get("bdata"), str) and "dtype" in value:
        found += np.frombuffer(base64.b64decode(value["bdata"]), np.dtype(value["dtype"])).tolist()
    elif isinstance(value, dict):
        # a figure's template (colour scales at 1/9 steps…) is the house look, not data
        return set().union(*(_numbers(v) for k, v in value.items() if k != "template"))
    elif isinstance(value, list):
        return set().union(*(_numbers(v) for v in value))
    elif isinstance(value, bool):
        return set()
    elif isinstance(value, int | float):
        found.append(value)
    elif isinstance(value, str):
        text = re.sub(
            r"\d{4}-\d\d-\d\d([T ][\d:.]+)?([+-]\d\d:\d\d|Z)?|GPU-[\w-]+|#[0-9a-fA-F]{3,8}\b",
            " ",
            value,
        )
        found += [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]
    return {
        f"{x:.4g}"
        for x in found
        if np.isfinite(x) and (x != int(x) or abs(x) >= 1000) and len(f"{abs(x):.4g}") >= 4
    }


def _expanded(answer: Any) -> Any:
    """A callback's answer with each download (``dcc.Download``'s data: base64 CSV, or XLSX,
    a zip of XML) as its text."""
    if isinstance(answer, list):
        return [_expanded(v) for v in answer]
    if not isinstance(answer, dict):
        return answer
    if not (isinstance(answer.get("content"), str) and "filename" in answer):
        return {k: _expanded(v) for k, v in answer.items()}
    content = answer["content"]
    raw = base64.b64decode(content) if answer.get("base64") else content.encode()
    if raw[:2] != b"PK":
        return raw.decode(errors="replace")
    with zipfile.ZipFile(io.BytesIO(raw)) as book:
        return "\n".join(book.read(n).decode(errors="replace") for n in book.namelist())


def _answers(load: Load) -> tuple[set[str], str]:
    """The numbers and the text of a load's page callbacks' answers, downloads included."""
    answers = [_expanded(json.loads(c.text)) for c in load.page_calls() if c.status == 200]
    return _numbers(answers), json.dumps(answers, ensure_ascii=False)


@pytest.mark.parametrize("page", _pages(IGNORES_FILTERS))
def test_a_forged_callback_answers_no_other_tenants_numbers(
    lead: Browser, manager: Browser, demo_site: Site, page: Page
) -> None:
    """The page's callbacks posted by the tenant's browser with the shared filters forged to
    ask for another tenant, the page's buttons (downloads) clicked too: none of the numbers
    that tenant's answer (to a manager) holds beyond what the tenant sees of its own, none of
    its names."""
    path = page.url_path(demo_site.template_values)
    mine, theirs = Replay(lead), Replay(manager)
    own, _ = _answers(mine.load(path, actions=True))
    reads = [c for c in mine.callbacks if c.reads("filters-state", "data")]
    for other in demo_site.other_orgs:
        forged_state = {("filters-state", "data"): f"?tenant={other}"}
        legit = theirs.load(path, force=forged_state, actions=True)
        forged = mine.load(path, force=forged_state, actions=True)
        assert not [c for c in forged.calls if c.failed], "a refusal is an answer, not an error"
        page_reads = [c for c in forged.page_calls() if any(c.callback == r.key for r in reads)]
        assert page_reads, f"no callback of {path} reads the shared filters (filters-state)"
        secret, _ = _answers(legit)
        own |= _answers(mine.load(path, actions=True))[0]  # what the tenant may see, now too
        got, text = _answers(forged)
        assert not (secret - own) & got, f"{other}'s numbers in the tenant's answer"
        assert not names_in(text, demo_site.others)


def test_a_tenants_ledger_api_holds_its_rows_alone(lead: Browser, demo_site: Site) -> None:
    first, last = demo_site.days
    status, text = lead.get(f"/api/v1/ledger?from={first}&to={last}")
    assert status == 200, text[:300]
    rows = json.loads(text)["rows"]
    assert rows and all(r["key"].startswith(demo_site.org + "/") for r in rows)
    assert not names_in(text, demo_site.others)
