"""One GPU: the telemetry a DCGM dashboard draws (utilisation, memory, power, temperature, SM
clock, tensor activity, from the 1-minute rollup), and what it cannot: which tenant's job held
the GPU when, and how much of each hold sat idle. A tenant viewer sees the GPU only while its
own jobs held it (:mod:`dashboards.answers.gpu`)."""

from __future__ import annotations

from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, callback, dcc, html

from dashboards import widgets
from dashboards.answers.gpu import GpuView, gpu_view
from dashboards.context import Forbidden, Viewer, ask
from dashboards.filters import Filters
from gpuledger_errors import InputError

dash.register_page(__name__, path_template="/gpu/<uuid>", name="GPU", title="gpuledger — one GPU")

_GIB = 2**30
_HOLD_COLUMNS: list[dict[str, Any]] = [
    {"field": "job_id", "headerName": "Job"},
    {"field": "tenant", "headerName": "Tenant"},
    {"field": "mig_instance", "headerName": "MIG"},
    {"field": "fraction", "headerName": "Share"},
    {"field": "start", "headerName": "From (UTC)"},
    {"field": "end", "headerName": "To (UTC)"},
    {"field": "held_gpu_hours", "headerName": "Held GPU-h"},
    {"field": "idle_gpu_hours", "headerName": "Idle GPU-h"},
    {"field": "idle_share", "headerName": "Idle share"},
]
#: (column, axis title, scale) of each telemetry panel
_PANELS = (
    ("util_mean", "Utilisation %", 100.0),
    ("memory_used_bytes", "Memory used GiB", 1 / _GIB),
    ("power_watts", "Power W", 1.0),
    ("temperature_celsius", "Temperature °C", 1.0),
    ("sm_clock_mhz", "SM clock MHz", 1.0),
    ("tensor_active_ratio", "Tensor active %", 100.0),
)
_UNREPORTED = "Not reported by this GPU's source"


def layout(uuid: str | None = None, **_query: str) -> html.Div:
    return html.Div(
        [
            dcc.Store(id="gpu-uuid", data=uuid or ""),
            html.H2(f"GPU {uuid or ''}"),
            html.Div(id="gpu-message"),
            html.Div(id="gpu-identity", className="kpis"),
            html.H3("Who held it"),
            dcc.Loading(dcc.Graph(id="gpu-timeline")),
            widgets.grid("gpu-holds", _HOLD_COLUMNS),
            html.H3("Telemetry"),
            dcc.Loading(dcc.Graph(id="gpu-telemetry")),
        ]
    )


def identity(view: GpuView) -> list[html.Div]:
    if view.identity is None:
        return []
    i = view.identity
    held = view.held_gpu_hours
    share = f"{view.idle_gpu_hours / held:.0%} of held" if held else ""
    return [
        widgets.kpi("Model", i["gpu_model"] or "–", f"{i['cluster']} / {i['node']}"),
        widgets.kpi("Health", i["health"], i["health_reason"]),
        widgets.kpi("Held GPU-hours in range", f"{held:,.1f}"),
        widgets.kpi("Idle GPU-hours in range", f"{view.idle_gpu_hours:,.1f}", share),
    ]


def hold_rows(view: GpuView) -> list[dict[str, Any]]:
    return [
        {
            "job_id": h.job_id,
            "tenant": h.tenant,
            "mig_instance": h.mig_instance,
            "fraction": h.fraction,
            "start": widgets.when(h.start),
            "end": widgets.when(h.end) or "still held",
            "held_gpu_hours": round(h.held_gpu_hours, 2),
            "idle_gpu_hours": round(h.idle_gpu_hours, 2),
            "idle_share": f"{h.idle_gpu_hours / h.held_gpu_hours:.0%}" if h.held_gpu_hours else "",
        }
        for h in view.holds
    ]


def timeline(view: GpuView) -> go.Figure | dict[str, Any]:
    """One line per job across the time it held the GPU, its idle stretches in red: two
    traces in all, segments apart by gaps, since a trace per hold takes seconds to build for
    a GPU that hundreds of jobs held. A figure dictionary (:func:`widgets.chart`)."""
    if not view.holds:
        return widgets.blank("No job held this GPU in the range.")
    held: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    idle: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    for h in view.holds:
        label = f"{h.job_id} ({h.tenant})" if h.tenant else h.job_id
        spans = [(held, h.shown_from, h.shown_to, f"held {h.held_gpu_hours:.2f} GPU-h")]
        spans += [(idle, s, e, f"idle {s:%m-%d %H:%M} to {e:%m-%d %H:%M}") for s, e in h.idle]
        for trace, start, end, what in spans:
            trace["x"] += [start, end, None]
            trace["y"] += [label, label, None]
            trace["text"] += [f"{label}: {what}"] * 2 + [None]
    data = [
        {**trace, "type": "scatter", "mode": "lines", "line": {"width": 14, "color": color},
         "hovertemplate": "%{text}<extra></extra>"}
        for trace, color in ((held, "#5b8bd0"), (idle, "#d9534f"))
    ]  # fmt: skip
    return widgets.chart(
        data,
        120 + 28 * len(view.holds),
        showlegend=False,
        xaxis={"range": [view.start, view.end]},
    )


def telemetry(view: GpuView) -> go.Figure | dict[str, Any]:
    """One panel per telemetry column, stacked on one shared time axis, as a figure
    dictionary: the panels are laid out here, since plotly's subplot helper and trace
    validation take longer than the query behind them."""
    frame = view.telemetry
    if frame is None or not frame.height:
        return widgets.blank("No telemetry of this GPU to show in the range.")
    n, gap = len(_PANELS), 0.04
    tall = (1 - gap * (n - 1)) / n
    x = frame["t"].to_list()
    unreported = view.unreported
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {
        "template": widgets.LOOK,
        "height": 180 * n,
        "margin": {"l": 50, "r": 20, "t": 40},
        "annotations": [],
    }
    for k, (column, title, scale) in enumerate(_PANELS, start=1):
        top = 1 - (k - 1) * (tall + gap)
        suffix = "" if k == 1 else str(k)
        layout[f"xaxis{suffix}"] = {
            "anchor": f"y{suffix}",
            "domain": [0.0, 1.0],
            "showticklabels": k == n,
            **({"matches": f"x{n}"} if k != n else {}),
        }
        bottom = max(0.0, round(top - tall, 6))  # the last panel's is 0 to a float's last bit
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "domain": [bottom, round(top, 6)]}
        layout["annotations"].append(
            {"text": title, "showarrow": False, "font": {"size": 16}, "xref": "paper",
             "yref": "paper", "x": 0.5, "y": top, "xanchor": "center", "yanchor": "bottom"}
        )  # fmt: skip
        if column in unreported:  # an empty panel that says why, not a line at zero
            layout["annotations"].append(
                {"text": _UNREPORTED, "showarrow": False, "font": {"color": "#5b6478"},
                 "xref": f"x{suffix} domain", "yref": f"y{suffix} domain", "x": 0.5, "y": 0.5}
            )  # fmt: skip
            continue
        series = (
            [("Utilisation (mean)", "util_mean"), ("Utilisation (busiest sample)", "util_max")]
            if column == "util_mean"
            else [(title, column)]
        )
        for name, source in series:
            y = [None if v is None else v * scale for v in frame[source].to_list()]
            data.append(
                {"type": "scatter", "x": x, "y": y, "name": name,
                 "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}
            )  # fmt: skip
    return {"data": data, "layout": layout}


def _view(filters: Filters, who: Viewer, uuid: str) -> GpuView:
    """The GPU page's answer, in the order the answer cache asks (filters, viewer, rest)."""
    return gpu_view(uuid, filters, who)


@callback(
    Output("gpu-message", "children"),
    Output("gpu-identity", "children"),
    Output("gpu-timeline", "figure"),
    Output("gpu-holds", "rowData"),
    Output("gpu-telemetry", "figure"),
    Input("filters-state", "data"),
    Input("gpu-uuid", "data"),
)
def _refresh(state: str | None, uuid: str | None) -> tuple[Any, ...]:
    """The GPU's figures for the viewer and the shared filters."""
    try:
        filters, who = widgets.asked(state)
        view = ask(_view, filters, who, uuid or "")
    except (Forbidden, InputError) as exc:
        blank = widgets.blank(str(exc))
        return widgets.refusal(exc), [], blank, [], blank
    message = html.P(view.message, className="empty") if view.message else ""
    return message, identity(view), timeline(view), hold_rows(view), telemetry(view)
