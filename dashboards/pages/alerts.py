"""Alerts and advice: the alerts open at the range's end (or now, if earlier) and the
quota-reclaim and priority advice in force then.

Both come from the ``alerts`` and ``advice`` tables, which the idle-GPU alerting and the
scheduler hooks fill; until those run the page says so, instead of showing empty tables.

Who sees what: a ``tenant:`` viewer sees the alerts on its own jobs alone, and the advice that
takes GPUs from it or gives GPUs to it, with the tenant on the other side unnamed, that side's
jobs unlisted and the free-text reason left out unless both sides are its own
(:mod:`warehouse.analytics.alerts`). Asking for another tenant (``?tenant=``) is refused.

An admin or a manager picks proposed advice in the table and approves or rejects it with the
buttons above it, under their own name (audited); the buttons are rendered for them alone, and
the step's callback checks the viewer's role again, so a forged one from anyone else is refused
(and audited). Applying approved advice changes the scheduler: the command line does it.
"""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html
from dash.development.base_component import Component

from dashboards import context, widgets
from dashboards.answers import alerts as answers
from dashboards.answers.instant import clock_at_of
from dashboards.context import Forbidden, Viewer
from gpuledger_errors import InputError

dash.register_page(__name__, path="/alerts", name="Alerts", title="gpuledger — alerts and advice")

NO_ALERTS_YET = (
    "No alerts yet: no rule has fired in this warehouse (GPUs allocated but idle, GPUs free "
    "while jobs wait, unhealthy GPUs, tenants over their guarantee). `gpuledger serve` runs "
    "the rules on its schedule, `gpuledger alerts check` once; what fires and has not "
    "resolved appears here."
)
DECIDE_NOTE = "Pick a proposed advice in the table, then approve or reject it (audited)."
APPLY_NOTE = (
    "Approved advice is applied from the command line only (`gpuledger advise apply ID`): "
    "applying changes the scheduler."
)
NO_ADVICE_YET = (
    "No advice yet: none has been proposed in this warehouse. `gpuledger advise` proposes "
    "quota-reclaim, limit and priority advice; what is proposed or approved and not yet "
    "applied appears here."
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
    "advice_id": "Id",
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
            html.P(APPLY_NOTE, className="note"),
            dcc.Store(id="alerts-decided", data=0),  # counts the steps taken: refreshes
            html.Div(id="alerts-decision"),
            dcc.Loading(html.Div(id="alerts-advice")),
        ]
    )


@callback(
    Output("alerts-status", "children"),
    Output("alerts-open", "children"),
    Output("alerts-advice", "children"),
    Input("filters-state", "data"),
    Input("alerts-decided", "data"),
)
def _refresh(state: str | None, _decided: Any) -> tuple[str | Component, Component, Component]:
    """Open alerts and current advice for the viewer, or why there are none."""
    try:
        filters, who = widgets.asked(state)
        at = widgets.when(clock_at_of(filters))
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
        _advice(
            advice,
            who,
            empty=NO_ADVICE_YET if not ever_advice else f"No advice in force as of {at}.",
        ),
    )


def _advice(advice: pl.DataFrame, who: Viewer, *, empty: str) -> Component:
    """The advice's table; for an admin or a manager, with the buttons that approve or reject
    the advice picked in it when some is proposed."""
    decides = (
        who.manages
        and context.get().decide is not None
        and bool(advice.height)
        and bool((advice["status"] == "proposed").any())
    )
    grid = widgets.table("alerts-advice-grid", advice, ADVICE, empty=empty, pick=decides)
    if not decides:
        return grid
    buttons = html.Div(
        [
            html.Button("Approve", id="alerts-approve"),
            html.Button("Reject", id="alerts-reject"),
            html.Span(DECIDE_NOTE, className="note"),
        ],
        className="controls",
    )
    return html.Div([buttons, grid])


@callback(
    Output("alerts-decision", "children"),
    Output("alerts-decided", "data"),
    Input("alerts-approve", "n_clicks"),
    Input("alerts-reject", "n_clicks"),
    State("alerts-advice-grid", "selectedRows"),
    State("alerts-decided", "data"),
    prevent_initial_call=True,
)
def _decide(_approve: Any, _reject: Any, picked: Any, decided: Any) -> tuple[Component, Any]:
    """Approve or reject the advice picked in the table, as the viewer (checked here: the
    buttons' absence keeps no one out); the tables refresh after a step."""
    verb = {"alerts-approve": "approve", "alerts-reject": "reject"}.get(str(dash.ctx.triggered_id))
    if verb is None:
        raise dash.exceptions.PreventUpdate
    advice_id = _picked(picked)
    try:
        who = context.viewer()
        status = answers.decide(verb, advice_id, who)
    except (Forbidden, InputError) as exc:
        return widgets.message(str(exc), "error"), dash.no_update
    done = html.P(f"Advice {advice_id} {status} by {who.name}.", className="note")
    return done, (decided if isinstance(decided, int) else 0) + 1


def _picked(rows: Any) -> str:
    """The id of the advice picked in the table ("" for none), from what the browser sent."""
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        return str(rows[0].get("advice_id") or "")
    return ""
