"""Capacity and fragmentation: what the fleet holds, where it is taken, what is stranded.

- Inventory by pool, GPU model, driver, CUDA version and health, as of the range's end (or
  now, if earlier), and the GPUs that are not healthy with their Xid.
- A node x GPU heatmap of the last whole hour before that instant: the share of each GPU that
  jobs held, or its mean utilisation (1-hour rollup and allocation intervals).
- Stranded capacity (FGD fragmentation): free GPUs now and how much of it the typical job
  cannot use, the largest job that could start per model, stranded GPUs hour by hour over the
  range, and stranded GPU-hours attributed to the tenants whose jobs hold the partly-used nodes.

Who sees what (decided here, enforced in :mod:`dashboards.answers.capacity` and the warehouse):
capacity, inventory, health and fragmentation are facts of the cluster that name no tenant,
so every viewer, a tenant's lead included, sees the counts whole. What names a tenant or a job
is the viewer's own: a ``tenant:`` viewer's heatmap shows every GPU's allocated share (that a
GPU is taken is the cluster's fact) but names only its own jobs, and shows no utilisation on
a GPU another tenant held during the hour (those cells read "allocated to another tenant");
the stranded-by-tenant attribution lists its own rows alone (no other tenant's, no
``__unallocated__``). Asking for another tenant (``?tenant=``) is refused in every callback.
"""

from __future__ import annotations

from typing import Any

import dash
import plotly.graph_objects as go
import polars as pl
from dash import Input, Output, callback, dcc, html
from dash.development.base_component import Component
from plotly.colors import get_colorscale

from dashboards import widgets
from dashboards.answers import capacity as answers
from dashboards.answers.instant import at_of, one_cluster
from dashboards.context import Forbidden, ask
from gpuledger_errors import InputError

dash.register_page(
    __name__, path="/capacity", name="Capacity", title="gpuledger — capacity and fragmentation"
)

METRICS = {"held": "Allocated share", "util": "Utilisation"}


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.Div(id="capacity-status", className="status"),
            dcc.Loading(html.Div(id="capacity-kpis", className="kpis")),
            html.H3("GPUs by node"),
            dcc.RadioItems(
                id="capacity-metric",
                value="held",
                inline=True,
                options=[{"label": v, "value": k} for k, v in METRICS.items()],
            ),
            dcc.Loading(dcc.Graph(id="capacity-heatmap")),
            html.H3("Stranded capacity"),
            dcc.Loading(
                [
                    html.Div(id="capacity-largest"),
                    dcc.Graph(id="capacity-stranded-trend"),
                    html.H4("Stranded GPU-hours by tenant"),
                    html.Div(id="capacity-stranded-tenants"),
                ]
            ),
            html.H3("Inventory"),
            dcc.Loading(html.Div(id="capacity-inventory")),
            html.H3("GPUs not healthy"),
            dcc.Loading(html.Div(id="capacity-unhealthy")),
        ]
    )


INVENTORY = {
    "pool": "Pool",
    "gpu_model": "GPU model",
    "driver_version": "Driver",
    "cuda_version": "CUDA",
    "health": "Health",
    "nodes": "Nodes",
    "gpus": "GPUs",
    "units": "GPUs or MIG slices",
    "capacity_gpus": "Capacity (GPUs)",
    "on_unready_nodes": "On nodes not ready",
}
UNHEALTHY = {
    "node": "Node",
    "gpu_index": "Index",
    "gpu_uuid": "GPU",
    "mig_instance": "MIG",
    "gpu_model": "Model",
    "health": "Health",
    "not_healthy_since": "Since",
    "shown_xid": "Xid",
    "reason": "Reason",
    "gpu_lost": "Lost off the bus",
    "ecc_dbe_volatile": "ECC DBE",
    "remapped_rows_pending": "Row remap pending",
}


@callback(
    Output("capacity-status", "children"),
    Output("capacity-kpis", "children"),
    Output("capacity-inventory", "children"),
    Output("capacity-unhealthy", "children"),
    Input("filters-state", "data"),
)
def _inventory(state: str | None) -> tuple[Any, ...]:
    """The inventory and the GPUs not healthy, with the headline counts."""
    try:
        filters, who = widgets.asked(state)
        at = at_of(filters)
        inventory = ask(answers.inventory, filters, who)
        sick = ask(answers.unhealthy, filters, who)
        cluster = one_cluster(filters)
    except (Forbidden, InputError) as exc:
        return widgets.message(str(exc), "error"), [], "", ""
    if not inventory.height:
        empty = widgets.message(
            f"No GPU in the inventory as of {widgets.when(at)}: pick a later range, or fill the "
            "warehouse (`gpuledger demo`, a collector)"
        )
        return f"As of {widgets.when(at)}", [empty], "", ""
    total = float(inventory["capacity_gpus"].sum())
    healthy = float(inventory.filter(pl.col("health") == "healthy")["capacity_gpus"].sum())
    kpis = [
        widgets.kpi("GPUs in inventory", f"{int(inventory['gpus'].sum()):,}"),
        widgets.kpi("Healthy capacity (GPUs)", f"{healthy:,.1f} of {total:,.1f}"),
        widgets.kpi("GPUs not healthy", f"{sick['gpu_uuid'].n_unique():,}"),
    ]
    return (
        f"Cluster {cluster} as of {widgets.when(at)}",
        kpis,
        widgets.table("capacity-inventory-grid", inventory, INVENTORY, empty=""),
        widgets.table(
            "capacity-unhealthy-grid",
            sick,
            UNHEALTHY,
            empty="Every GPU in the inventory is healthy.",
        ),
    )


@callback(
    Output("capacity-heatmap", "figure"),
    Input("filters-state", "data"),
    Input("capacity-metric", "value"),
)
def _heatmap(state: str | None, metric: str | None) -> go.Figure | dict[str, Any]:
    """Node x GPU: the allocated share or the utilisation of each GPU over the hour."""
    try:
        filters, who = widgets.asked(state)
        hour, grid = ask(answers.grid, filters, who)
    except (Forbidden, InputError) as exc:
        return widgets.blank(str(exc))
    if not grid.height:
        return widgets.blank("No GPU in the inventory for this hour.")
    return heatmap(grid, metric or "held", f"{widgets.when(hour)} + 1 h")


def heatmap(grid: pl.DataFrame, metric: str, hour: str) -> dict[str, Any]:
    """The grid as a heatmap (rows: nodes; columns: GPU index), hover naming what the viewer
    may see of each GPU."""
    nodes = sorted(set(grid["node"].to_list()))
    indexes = sorted(set(grid["gpu_index"].to_list()))
    z: list[list[float | None]] = [[None] * len(indexes) for _ in nodes]
    text: list[list[str]] = [[""] * len(indexes) for _ in nodes]
    for r in grid.iter_rows(named=True):
        i, j = nodes.index(r["node"]), indexes.index(r["gpu_index"])
        share = r["held_gpus"] / r["capacity_gpus"] if r["capacity_gpus"] else 0.0
        z[i][j] = share if metric == "held" else r["util_ratio"]
        text[i][j] = _hover(r, share)
    trace = {
        "type": "heatmap",
        "z": z,
        "x": indexes,
        "y": nodes,
        "text": text,
        "hovertemplate": "%{y} GPU %{x}<br>%{text}<extra></extra>",
        "zmin": 0,
        "zmax": 1,
        # spelled out as plotly.py would: plotly.js's own scales of these names differ
        "colorscale": get_colorscale("Blues" if metric == "held" else "Viridis"),
        "colorbar": {"tickformat": ".0%"},
        "xgap": 2,
        "ygap": 2,
    }
    return widgets.chart(
        [trace],
        max(260, 28 * len(nodes) + 120),
        xaxis={"title": {"text": "GPU index"}, "dtick": 1},
        yaxis={"title": {"text": ""}, "autorange": "reversed"},
        title={"text": f"{METRICS.get(metric, metric)}, {hour}", "font": {"size": 14}},
    )


def _hover(r: dict[str, Any], share: float) -> str:
    lines = [f"{r['gpu_model']} ({r['health']})", f"allocated {share:.0%} of the hour"]
    lines += [f"{h['job_id']} ({h['tenant']}) {h['held']:.0%}" for h in r["holders"]]
    if r["hidden"]:
        lines.append("allocated to another tenant")
    if r["util_ratio"] is not None:
        lines.append(f"utilisation {r['util_ratio']:.0%}")
    elif not r["hidden"]:
        lines.append("no utilisation samples")
    return "<br>".join(lines)


LARGEST = {
    "gpu_model": "GPU model",
    "one_node_gpus": "Largest job on one node (GPUs)",
    "total_gpus": "Whole free GPUs in all",
    "largest_free_share": "Largest free share of one GPU",
    "free_gpus": "Free GPUs",
    "stranded_gpus": "Stranded GPUs",
}
TENANTS = {
    "tenant": "Tenant",
    "pool": "Pool",
    "gpu_model": "GPU model",
    "stranded_gpu_hours": "Stranded GPU-hours",
}


@callback(
    Output("capacity-largest", "children"),
    Output("capacity-stranded-trend", "figure"),
    Output("capacity-stranded-tenants", "children"),
    Input("filters-state", "data"),
)
def _stranded(state: str | None) -> tuple[Component, go.Figure | dict[str, Any], Component]:
    """The largest job that fits per model now, stranded GPUs over the range, by tenant."""
    try:
        filters, who = widgets.asked(state)
        found = ask(answers.stranded, filters, who)
    except (Forbidden, InputError) as exc:
        return widgets.message(str(exc), "error"), widgets.blank(""), html.Div()
    report = found.report
    per_model = report.per_node.group_by("gpu_model").agg(
        pl.col("fgd_gpus").sum().alias("stranded_gpus")
    )
    largest = report.largest_startable.join(per_model, on="gpu_model", how="left")
    # the nodes of the pool and model asked (the report's totals are the whole cluster's)
    free, fgd = (float(report.per_node[c].sum()) for c in ("free_gpus", "fgd_gpus"))
    ratio = f" ({fgd / free:.0%})" if free > 1e-6 else ""
    note = (
        "No job started in the week before: no typical job to measure fragmentation against."
        if not report.task_mix.height
        else f"As of {widgets.when(report.at)}: {free:,.2f} GPUs free, of which {fgd:,.2f} "
        f"stranded{ratio}: free capacity the typical job of the week before cannot use. "
        "The largest job that could start, quotas aside:"
    )
    return (
        html.Div(
            [
                widgets.message(note, "note"),
                widgets.table(
                    "capacity-largest-grid",
                    largest,
                    LARGEST,
                    empty="No schedulable GPU (healthy, on a ready node) at this instant.",
                ),
            ]
        ),
        _trend(found.series),
        widgets.table(
            "capacity-stranded-tenants-grid",
            found.by_tenant,
            TENANTS,
            empty="No stranded capacity held by "
            + ("your jobs" if report.tenant else "anyone")
            + " in this range.",
        ),
    )


def _trend(series: pl.DataFrame) -> go.Figure | dict[str, Any]:
    if not series.height:
        return widgets.blank("No schedulable GPU in this range.")
    traces = []
    for (model,), rows in series.group_by("gpu_model", maintain_order=True):
        hourly = rows.group_by("ts").agg(pl.col("stranded_gpus", "free_gpus").sum()).sort("ts")
        for column, label in (("free_gpus", "free"), ("stranded_gpus", "stranded")):
            traces.append(
                {
                    "type": "scatter",
                    "x": hourly["ts"].to_list(),
                    "y": hourly[column].to_list(),
                    "name": f"{model} {label}",
                    "mode": "lines",
                    "line": {"shape": "hv", "dash": "dot" if label == "free" else "solid"},
                }
            )
    return widgets.chart(traces, 300, yaxis={"title": {"text": "GPUs"}})
