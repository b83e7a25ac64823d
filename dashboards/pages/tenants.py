"""Tenants: the org → project → user tree with GPU-hours (allocated, used, idle), efficiency
and cost, each tenant's quota position (guaranteed, held, borrowed), and a drill into one
tenant's (or user's) jobs.

Every figure comes from :mod:`dashboards.answers.tenants`, limited to the viewer's tenant in
every callback; the layout holds no tenant data.
"""

from __future__ import annotations

from typing import Any

import dash
import dash_ag_grid as dag
import plotly.graph_objects as go
from dash import Input, Output, State, callback, clientside_callback, dcc, html
from plotly.colors import get_colorscale

from dashboards import grids, widgets
from dashboards.answers import tenants as answers
from dashboards.context import Forbidden, ask
from gpuledger_errors import InputError

dash.register_page(__name__, path="/tenants", name="Tenants", title="gpuledger — tenants")

_HOURS = [
    grids.number("allocated_gpu_hours", "Allocated GPU-h"),
    grids.number("used_gpu_hours", "Used GPU-h"),
    grids.number("idle_gpu_hours", "Idle GPU-h"),
    grids.ratio("efficiency", "Used ÷ allocated"),
]
_COST = [
    grids.money("direct_cost", "Direct cost"),
    grids.money("shared_cost", "Unallocated share"),
    grids.money("total_cost", "Total cost"),
]
_INDENT = {
    "styleConditions": [
        {"condition": f"params.data.level == {level}", "style": style}
        for level, style in (
            (0, {"fontWeight": "600"}),
            (1, {"paddingLeft": "1.8em"}),
            (2, {"paddingLeft": "3.6em", "color": "#5b6478"}),
        )
    ]
}
TREE_COLUMNS = [grids.column("name", "Org / project / user", cellStyle=_INDENT, minWidth=220)]
TREE_COLUMNS += _HOURS + _COST
QUOTA_COLUMNS = [
    grids.column("tenant", "Tenant", minWidth=200),
    grids.column("cluster", "Cluster"),
    grids.column("pool", "Pool"),
    grids.column("gpu_model", "GPU model", minWidth=170),
    grids.number("guaranteed_gpus", "Guaranteed GPUs", 1),
    grids.number("quota_gpus", "Quota (guarantee + borrow limit)", 1),
    grids.number("held_gpus", "Held GPUs", 1),
    grids.number("borrowed_gpus", "Borrowed GPUs", 1),
    grids.number("idle_gpus", "Idle held GPUs", 1),
    grids.number("idle_borrowed_gpus", "Idle borrowed GPUs", 1),
]
# a tenant's month can hold tens of thousands of jobs: the grid asks for them a block at a
# time, filtered and sorted on the server (the figures with the number filter)
JOB_COLUMNS = [
    {**c, "filter": "agNumberColumnFilter"} if c.get("type") == "rightAligned" else c
    for c in [
        grids.column("job_id", "Job", pinned="left", minWidth=230),
        grids.column("user", "User"),
        grids.column("tenant", "Tenant", minWidth=180),
        grids.column("gpu_model", "GPU model", minWidth=170),
        grids.number("gpus", "GPUs", 1),
        grids.column("start", "Start (UTC)"),
        grids.column("end", "End (UTC)"),
        grids.column("state", "State"),
        grids.number("unmeasured_gpu_hours", "Unmeasured GPU-h"),
        *_HOURS,
        *_COST,
    ]
]


def _grid(grid_id: str, columns: list[dict[str, Any]], **more: Any) -> dag.AgGrid:
    options: dict[str, Any] = {
        "rowData": [],
        "defaultColDef": {"resizable": True, "sortable": True, "filter": True},
        "columnSize": "autoSize",
        "style": {"height": "420px"},
    }
    return dag.AgGrid(id=grid_id, columnDefs=columns, **{**options, **more})


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.H2("Tenants"),
            html.Div(id="tenants-note"),
            dcc.Loading(
                [
                    dcc.Graph(id="tenants-treemap", figure=_empty_figure()),
                    _grid(
                        "tenants-tree",
                        TREE_COLUMNS,
                        defaultColDef={"resizable": True, "sortable": False},
                        dashGridOptions={
                            "rowSelection": {
                                "mode": "singleRow",
                                "checkboxes": False,
                                "enableClickSelection": True,
                            }
                        },
                    ),
                ]
            ),
            html.H3("Quota: guaranteed, held and borrowed"),
            html.Div(id="tenants-quotas-note"),
            dcc.Loading(_grid("tenants-quotas", QUOTA_COLUMNS, style={"height": "300px"})),
            html.H3(id="tenants-jobs-title", children="Jobs"),
            dcc.Store(id="tenants-selected"),
            dcc.Store(id="tenants-jobs-asked"),
            html.Div(id="tenants-jobs-note"),
            dag.AgGrid(
                id="tenants-jobs",
                columnDefs=JOB_COLUMNS,
                rowModelType="infinite",
                defaultColDef={"resizable": True, "sortable": True, "filter": True},
                dashGridOptions={
                    "cacheBlockSize": grids.BLOCK_ROWS,
                    "maxBlocksInCache": 20,
                    "infiniteInitialRowCount": 1,
                },
                style={"height": "420px"},
            ),
        ]
    )


def _empty_figure() -> go.Figure:
    return go.Figure(layout={"template": widgets.LOOK, "height": 420, "margin": _MARGIN})


_MARGIN = {"l": 10, "r": 10, "t": 30, "b": 10}


def _treemap(rows: list[dict[str, Any]], currency: str) -> dict[str, Any]:
    """Org → project → user, sized by allocated GPU-hours and coloured by used ÷ allocated."""
    ids, labels, parents, values, colours, data = [], [], [], [], [], []
    for r in rows:
        node = (
            ("o", "t", "u")[r["level"]] + ":" + r["tenant"] + (":" + r["user"] if r["user"] else "")
        )
        parent = ""
        if r["level"] == 1:
            parent = "o:" + r["tenant"].split("/")[0]
        elif r["level"] == 2:
            parent = "t:" + r["tenant"]
        ids.append(node)
        labels.append(r["name"])
        parents.append(parent)
        values.append(r["allocated_gpu_hours"] if r["level"] == 2 else 0)
        colours.append(r["efficiency"] if r["efficiency"] is not None else 0)
        data.append([r["tenant"], r["user"], r["total_cost"]])
    treemap = {
        "type": "treemap",
        "ids": ids,
        "labels": labels,
        "parents": parents,
        "values": values,
        "branchvalues": "remainder",  # parents carry 0: their size is their users' sum
        "customdata": data,
        "marker": {
            "colors": colours,
            "colorscale": get_colorscale("RdYlGn"),  # spelled out as plotly.py would
            "cmin": 0,
            "cmax": 1,
            "colorbar": {"title": {"text": "used ÷ allocated"}},
        },
        "hovertemplate": "%{label}<br>%{value:,.1f} GPU-h allocated<br>"
        f"%{{customdata[2]}} {currency}<extra></extra>",
    }
    return widgets.chart([treemap], 420, margin=_MARGIN)


@callback(
    Output("tenants-treemap", "figure"),
    Output("tenants-tree", "rowData"),
    Output("tenants-note", "children"),
    Input("filters-state", "data"),
)
def _tree(state: str | None) -> tuple[go.Figure | dict[str, Any], list[dict[str, Any]], Any]:
    """The tree of the tenants the viewer may see, in the window and filters."""
    try:
        filters, who = widgets.asked(state)
        doc = ask(answers.tree, filters, who)
    except (Forbidden, InputError) as exc:
        return _empty_figure(), [], widgets.message(str(exc))
    if not doc["rows"]:
        return (
            _empty_figure(),
            [],
            widgets.message(
                f"No GPU was held from {doc['from']} to {doc['to']} in these filters: widen the "
                "range or clear a filter."
            ),
        )
    rows = [
        {**r, **{k: grids.amount(r[k]) for k in ("direct_cost", "shared_cost", "total_cost")}}
        for r in doc["rows"]
    ]
    currency = doc["currency"]
    text = (
        f"{doc['from']} to {doc['to']} (until {doc['computed_until'][:16]} UTC), costs in "
        f"{currency} with unallocated capacity shared '{doc['idle_policy']}'; total "
        f"{doc['total_cost']} {currency}. Pick a row or a box to list its jobs."
    )
    return _treemap(doc["rows"], currency), rows, html.P(text, className="caption")


@callback(
    Output("tenants-quotas", "rowData"),
    Output("tenants-quotas-note", "children"),
    Input("filters-state", "data"),
)
def _quotas(state: str | None) -> tuple[list[dict[str, Any]], Any]:
    """Each visible tenant's quota position at the window's end (or now)."""
    try:
        filters, who = widgets.asked(state)
        doc = ask(answers.quotas, filters, who)
    except (Forbidden, InputError) as exc:
        return [], widgets.message(str(exc))
    if not doc["rows"]:
        return [], widgets.message("No quota and no GPU held at the end of the range.")
    return doc["rows"], html.P(f"As of {doc['at'][:16]} UTC.", className="caption")


@callback(
    Output("tenants-selected", "data"),
    Input("tenants-tree", "selectedRows"),
    Input("tenants-treemap", "clickData"),
    prevent_initial_call=True,
)
def _select(rows: list[dict[str, Any]] | None, click: dict[str, Any] | None) -> dict[str, str]:
    """The tenant (and user) picked in the table or the treemap; the jobs' callback checks it."""
    if dash.ctx.triggered_id == "tenants-treemap" and click and click.get("points"):
        tenant, user = (click["points"][0].get("customdata") or ["", ""])[:2]
        return {"tenant": str(tenant), "user": str(user)}
    if rows:
        return {"tenant": str(rows[0].get("tenant", "")), "user": str(rows[0].get("user", ""))}
    raise dash.exceptions.PreventUpdate


# a new pick or new filters: the grid forgets its blocks and asks for the first one again
clientside_callback(
    """function(picked, state) {
        try { dash_ag_grid.getApi('tenants-jobs').purgeInfiniteCache(); } catch (e) {}
        return window.dash_clientside.no_update;
    }""",
    Output("tenants-jobs-asked", "data"),
    Input("tenants-selected", "data"),
    Input("filters-state", "data"),
    prevent_initial_call=True,
)

_NO_ROWS = {"rowData": [], "rowCount": 0}


@callback(
    Output("tenants-jobs", "getRowsResponse"),
    Output("tenants-jobs-title", "children"),
    Output("tenants-jobs-note", "children"),
    Input("tenants-jobs", "getRowsRequest"),
    State("filters-state", "data"),
    State("tenants-selected", "data"),
    prevent_initial_call=True,
)
def _jobs(
    asked: dict[str, Any] | None, state: str | None, picked: dict[str, str] | None
) -> tuple[dict[str, Any], str, Any]:
    """The block of jobs the grid asks for, of the picked tenant (else of the viewer's or the
    filters' tenant), filtered and sorted as the grid's columns say."""
    picked = picked or {}
    try:
        filters, who = widgets.asked(state)
        if not (picked.get("tenant") or filters.tenant or who.tenant):
            note = widgets.message("Pick a tenant in the table or the treemap above.")
            return _NO_ROWS, "Jobs", note
        doc = ask(answers.job_grid, filters, who, picked.get("tenant", ""), picked.get("user", ""))
        shown = grids.block(doc["frame"], asked)
    except (Forbidden, InputError) as exc:
        return _NO_ROWS, "Jobs", widgets.message(str(exc))
    title = f"Jobs of {doc['tenant']}" + (f" by {doc['user']}" if doc["user"] else "")
    jobs = doc["frame"].height
    if not jobs:
        return _NO_ROWS, title, widgets.message("No job held GPUs in the range.")
    count = f"{jobs:,} jobs, {doc['total_cost']} {doc['currency']} in all"
    if shown["rowCount"] != jobs:
        count += f"; {shown['rowCount']:,} match the grid's filters"
    return shown, title, html.P(count + ".", className="caption")
