"""The chargeback's charts: each tenant's daily direct cost and daily efficiency (used ÷
allocated GPU-hours), as Plotly figures. The HTML report embeds them interactive; the PDF gets
PNG images drawn by kaleido with the system's Chromium (PNG, because its SVG carries random
ids and the reports must come out the same for the same data)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import plotly.graph_objects as go

from reports.chargeback import Chargeback

_LAYOUT = {
    "template": "plotly_white",
    "height": 360,
    "width": 900,
    "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
    "legend": {"orientation": "h", "y": -0.15},
    "xaxis": {"type": "date", "tickformat": "%b %d", "dtick": 86_400_000},
}


def cost_trend(cb: Chargeback) -> go.Figure:
    """Direct cost per day, stacked by tenant."""
    fig = go.Figure(layout={**_LAYOUT, "title": f"Direct cost per day ({cb.currency})"})
    days: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for p in cb.trend:
        days[p.tenant].append((p.day.isoformat(), float(p.direct_cost)))
    for tenant, points in sorted(days.items()):
        fig.add_scatter(
            x=[d for d, _ in points],
            y=[v for _, v in points],
            name=tenant,
            stackgroup="cost",
            mode="lines",
        )
    return fig


def efficiency_trend(cb: Chargeback) -> go.Figure:
    """Used ÷ allocated GPU-hours per day, a line per tenant."""
    fig = go.Figure(
        layout={
            **_LAYOUT,
            "title": "Efficiency per day (used ÷ allocated GPU-hours)",
            "yaxis": {"tickformat": ".0%", "rangemode": "tozero"},
        }
    )
    days: dict[str, list[tuple[str, float | None]]] = defaultdict(list)
    for p in cb.trend:
        ratio = (
            p.used_gpu_hours / p.allocated_gpu_hours
            if p.used_gpu_hours is not None and p.allocated_gpu_hours
            else None
        )
        days[p.tenant].append((p.day.isoformat(), ratio))
    for tenant, points in sorted(days.items()):
        fig.add_scatter(
            x=[d for d, _ in points], y=[v for _, v in points], name=tenant, mode="lines+markers"
        )
    return fig


def figures(cb: Chargeback) -> list[tuple[str, go.Figure]]:
    """Every chart of the report, with a stable id for each."""
    return [("cost-trend", cost_trend(cb)), ("efficiency-trend", efficiency_trend(cb))]


@contextmanager
def image_server() -> Iterator[None]:
    """Kaleido's Chromium kept running while many images are drawn (one start, not one per
    image)."""
    import kaleido

    kaleido.start_sync_server(silence_warnings=True)
    try:
        yield
    finally:
        kaleido.stop_sync_server(silence_warnings=True)


def png(fig: go.Figure) -> bytes:
    """``fig`` as a PNG, drawn by the system Chromium (call inside :func:`image_server`)."""
    import kaleido

    layout = fig.layout
    opts = {"format": "png", "width": layout.width or 900, "height": layout.height or 360}
    return bytes(kaleido.calc_fig_sync(fig, opts=opts))
