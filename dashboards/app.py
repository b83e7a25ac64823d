"""The Dash app shell: a header, navigation, the filters every page shares, and the registered
pages (``dashboards/pages``).

The filters live in the URL's query string, so a link can be shared: on load the URL sets
the controls; each change of a control rewrites the query string in place (no reload) and
the store ``filters-state``, which every page's callbacks read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dash
from dash import Dash, Input, Output, State, dcc, html

from dashboards import answer_json, api, context, downloads
from dashboards.cache import AnswerCache
from dashboards.context import Decide, Forbidden, Viewer
from dashboards.filters import Filters, ranges
from gpuledger_errors import InputError
from warehouse.analytics import fleet
from warehouse.analytics.tenancy import owns
from warehouse.client import Warehouse
from warehouse.ledger import GROUPINGS, IdlePolicy, IdleRule

_CONTROLS = ("cluster", "pool", "gpu_model", "tenant")


def create_app(
    wh: Warehouse,
    *,
    idle: IdleRule | None = None,
    currency: str = "USD",
    idle_policy: str = "weighted",
    viewer: Callable[[], Viewer | None] | None = None,
    now: Callable[[], dt.datetime] | None = None,
    answers: AnswerCache | None = None,
    decide: Decide | None = None,
    as_of: Callable[[], dt.datetime] | None = None,
) -> Dash:
    """Build the app over ``wh``, judging idle time by ``idle`` and showing money in
    ``currency``. ``viewer`` says who asks in the request being answered (the shell's login;
    without one, everyone sees everything: tests and ``serve --insecure``); ``answers`` keeps
    the pages' answers a while (:mod:`dashboards.cache`; the API's never); ``decide``
    approves and rejects advice for an admin or a manager (without it, the alerts page offers
    no buttons); ``as_of`` is the instant the ledger's figures are as of (the server's kept live
    tail; default ``now``). Serve it with a threaded server (never a forking one). The JSON API is
    registered on its Flask server."""
    ctx = context.Context(
        wh, idle or IdleRule(), currency, idle_policy, answers=answers, decide=decide
    )
    if viewer is not None:
        ctx.viewer = viewer
    if now is not None:
        ctx.now = now
    ctx.as_of = as_of
    context.set_context(ctx)
    answer_json.install()
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder=str(Path(__file__).with_name("pages")),
        title="gpuledger",
        suppress_callback_exceptions=True,
    )
    app.layout = _layout
    _register_shell(app)
    api.register(app.server)
    downloads.register(app.server)
    return app


def _layout() -> html.Div:
    # a page imported under a second module name (a test walking the packages) registers
    # again: one link per path
    pages = list({p["relative_path"]: p for p in dash.page_registry.values()}.values())
    return html.Div(
        [
            dcc.Location(id="shell-url"),
            dcc.Store(id="filters-state"),
            html.Header(
                [
                    html.H1("gpuledger", className="brand"),
                    html.Nav(
                        [
                            dcc.Link(
                                page["name"],
                                href=page["relative_path"],
                                id={"type": "shell-nav", "path": page["relative_path"]},
                                className="nav-link",
                            )
                            for page in pages
                            if not page.get("path_template")  # one GPU's page: no link
                        ]
                    ),
                ],
                className="header",
            ),
            html.Div(
                [
                    html.Label("From–to"),
                    dcc.DatePickerRange(id="filters-dates", display_format="YYYY-MM-DD"),
                    html.Div(
                        [
                            dcc.Link(
                                label,
                                href="",
                                id={"type": "shell-range", "index": i},
                                className="range-link",
                            )
                            for i, (label, _first, _last) in enumerate(ranges(dt.date.today()))
                        ],
                        className="ranges",
                    ),
                    *(
                        html.Div(
                            [
                                html.Label(label),
                                dcc.Dropdown(id=f"filters-{name}", placeholder="all"),
                            ],
                            className="filter",
                        )
                        for name, label in (
                            ("cluster", "Cluster"),
                            ("pool", "Pool"),
                            ("gpu_model", "GPU model"),
                            ("tenant", "Tenant"),
                        )
                    ),
                    html.Div(
                        [
                            html.Label("Group by"),
                            dcc.Dropdown(
                                id="filters-by",
                                options=list(GROUPINGS),
                                value="tenant",
                                clearable=False,
                            ),
                        ],
                        className="filter",
                    ),
                    html.Div(
                        [
                            html.Label("Idle cost"),
                            dcc.Dropdown(
                                id="filters-idle_policy",
                                options=[p.value for p in IdlePolicy],
                                placeholder="settings",
                            ),
                        ],
                        className="filter",
                    ),
                ],
                className="controls filters",
            ),
            html.Div(id="filters-error", className="error"),
            html.Main(dash.page_container, className="main"),
        ]
    )


def _from_url(search: str | None, state: str | None) -> tuple[Any, ...]:
    """The controls as the URL says, on load and on every navigation that changes it, with
    what they offer: a dropdown drops a value its options do not hold yet, so both come
    together (else a shared link's tenant, pool or model is lost on load)."""
    if state is not None and (search or "") == state:
        raise dash.exceptions.PreventUpdate  # the URL is what the controls already say
    today = context.get().now().date()
    try:
        f = Filters.parse(search or "", today=today)
    except InputError:
        f = Filters.parse("", today=today)
    return (
        f.first.isoformat(),
        f.last.isoformat(),
        *(getattr(f, name) or None for name in _CONTROLS),
        f.by,
        f.idle_policy or None,
        *_choices(f.cluster),
    )


def _to_state(first: str | None, last: str | None, *values: str | None) -> tuple[Any, str]:
    """The controls as a query string: the state every page reads (and the URL shows)."""
    names = ("from", "to", *_CONTROLS, "by", "idle_policy")
    query = {k: v for k, v in zip(names, (first, last, *values), strict=True) if v}
    try:
        f = Filters.parse(query, today=context.get().now().date())
    except InputError as exc:
        return dash.no_update, str(exc)
    return f.query(), ""


def _nav(state: str | None, ids: list[dict[str, str]]) -> list[str]:
    """Every page's link keeps the filters, so moving between pages keeps the question."""
    return [i["path"] + (state or "") for i in ids]


def _ranges(state: str | None, path: str | None, ids: list[dict[str, int]]) -> list[str]:
    """Each one-click range's link: this page with the filters as they are, over that range."""
    today = context.get().now().date()
    try:
        f = Filters.parse(state or "", today=today)
    except InputError:
        f = Filters.parse("", today=today)
    offered = ranges(today)
    return [
        (path or "/")
        + f.query(
            **{"from": offered[i["index"]][1].isoformat(), "to": offered[i["index"]][2].isoformat()}
        )
        for i in ids
    ]


def _cluster_choices(cluster: str | None) -> tuple[list[str], ...]:
    """What the filters offer once another cluster is chosen."""
    return _choices(cluster)


def _choices(cluster: str | None) -> tuple[list[str], list[str], list[str], list[str]]:
    """What the filters offer: clusters, pools and models in inventory, and the tenants this
    viewer may see (a tenant's name is its data: never offered outside its scope)."""
    wh = context.get().wh
    try:
        who = context.viewer()
    except Forbidden:
        return [], [], [], []
    kit = fleet.choices(wh, cluster or "")
    mine = who.tenant
    tenants = [t for t in fleet.known_tenants(wh) if mine is None or owns(mine, t)]
    orgs = sorted({t.split("/")[0] for t in tenants})
    if mine is not None:
        orgs = [o for o in orgs if o == mine]
    return (
        fleet.known_clusters(wh),
        sorted(set(kit["pool"].to_list()) - {""}),
        sorted(set(kit["gpu_model"].to_list()) - {""}),
        sorted(set(orgs) | set(tenants)),
    )


# The URL follows the filters without a reload (replaceState fires no navigation).
_URL_FOLLOWS = """function (state) {
    if (state && window.location.search !== state) {
        window.history.replaceState(null, "", window.location.pathname + state);
    }
    return "";
}"""


def _register_shell(app: Dash) -> None:
    """The shell's callbacks, on ``app`` itself: a module-level ``dash.callback`` would go to
    the first app made in a process alone (tests make many)."""
    app.callback(
        Output("filters-dates", "start_date"),
        Output("filters-dates", "end_date"),
        *(Output(f"filters-{name}", "value") for name in _CONTROLS),
        Output("filters-by", "value"),
        Output("filters-idle_policy", "value"),
        *(Output(f"filters-{name}", "options") for name in _CONTROLS),
        Input("shell-url", "search"),
        State("filters-state", "data"),
    )(_from_url)
    app.callback(
        Output("filters-state", "data"),
        Output("filters-error", "children"),
        Input("filters-dates", "start_date"),
        Input("filters-dates", "end_date"),
        *(Input(f"filters-{name}", "value") for name in _CONTROLS),
        Input("filters-by", "value"),
        Input("filters-idle_policy", "value"),
    )(_to_state)
    app.clientside_callback(
        _URL_FOLLOWS, Output("filters-error", "title"), Input("filters-state", "data")
    )
    app.callback(
        Output({"type": "shell-nav", "path": dash.ALL}, "href"),
        Input("filters-state", "data"),
        State({"type": "shell-nav", "path": dash.ALL}, "id"),
    )(_nav)
    app.callback(
        Output({"type": "shell-range", "index": dash.ALL}, "href"),
        Input("filters-state", "data"),
        Input("shell-url", "pathname"),
        State({"type": "shell-range", "index": dash.ALL}, "id"),
    )(_ranges)
    app.callback(
        *(Output(f"filters-{name}", "options", allow_duplicate=True) for name in _CONTROLS),
        Input("filters-cluster", "value"),
        prevent_initial_call=True,  # the first come with the URL's values (_from_url)
    )(_cluster_choices)
