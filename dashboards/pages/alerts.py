"""Alerts and advice: the alerts open at the range's end (or now, if earlier) and the
quota-reclaim and priority advice in force then.

Both come from the ``alerts`` and ``advice`` tables, which the idle-GPU alerting and the
scheduler hooks fill; until those run the page says so, instead of showing empty tables.

Who sees what: a ``tenant:`` viewer sees the alerts on its own jobs alone, and the advice that
takes GPUs from it or gives GPUs to it, with the tenant on the other side unnamed, that side's
jobs unlisted and the free-text reason left out unless both sides are its own
(:mod:`warehouse.analytics.alerts`). Asking for another tenant (``?tenant=``) is refused.
"""

from __future__ import annotations

import dash
import polars as pl
from dash import Input, Output, callback, dcc, html
from dash.development.base_component import Component

from dashboards import widgets
from dashboards.answers import alerts as answers
from dashboards.answers.instant import at_of
from dashboards.context import Forbidden
from gpuledger_errors import InputError

dash.register_page(__name__, path="/alerts", name="Alerts", title="gpuledger — alerts and advice")

NO_ALERTS_YET = (
    "No alerts yet: idle-GPU alerting arrives with the chargeback-and-alerts work; once its "
    "rules run (GPUs allocated but idle, GPUs free while jobs wait, unhealthy GPUs, tenants "
    "over their guarantee), the alerts that fire and have not resolved appear here."
)
NO_ADVICE_YET = (
    "No advice yet: quota-reclaim and priority advice arrive with the scheduler-hooks work; "
    "the advice proposed or approved and not yet applied will appear here."
)
ALERTS = {
    "last_ts": "Changed",
    "severity": "Severity",
    "rule": "Rule",
    "state": "State",
    "tenant": "Tenant",
    "job_id": "Job",
    "node": "Node",
    "gpu_uuid": "GPU",
    "message": "Message",
    "first_ts": "Open since",
}
ADVICE = {
    "last_ts": "Changed",
    "kind": "Kind",
    "status": "Status",
    "pool": "Pool",
    "gpu_model": "GPU model",
    "from_tenant": "From",
    "to_tenant": "For",
    "gpus": "GPUs",
    "job_ids": "Jobs",
    "reason": "Reason",
}


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.Div(id="alerts-status", className="status"),
            html.H3("Open alerts"),
            dcc.Loading(html.Div(id="alerts-open")),
            html.H3("Current advice"),
            dcc.Loading(html.Div(id="alerts-advice")),
        ]
    )


@callback(
    Output("alerts-status", "children"),
    Output("alerts-open", "children"),
    Output("alerts-advice", "children"),
    Input("filters-state", "data"),
)
def _refresh(state: str | None) -> tuple[str | Component, Component, Component]:
    """Open alerts and current advice for the viewer, or why there are none."""
    try:
        filters, who = widgets.asked(state)
        at = widgets.when(at_of(filters))
        alerts = answers.open_alerts(filters, who)
        advice = answers.current_advice(filters, who)
        ever_alerts, ever_advice = answers.written()
    except (Forbidden, InputError) as exc:
        return widgets.message(str(exc), "error"), html.Div(), html.Div()
    return (
        f"As of {at}",
        widgets.table(
            "alerts-open-grid",
            alerts.with_columns(pl.col("value", "threshold").round(3)),
            ALERTS,
            empty=NO_ALERTS_YET if not ever_alerts else f"No alert open as of {at}.",
        ),
        widgets.table(
            "alerts-advice-grid",
            advice,
            ADVICE,
            empty=NO_ADVICE_YET if not ever_advice else f"No advice in force as of {at}.",
        ),
    )
