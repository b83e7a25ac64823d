"""The Dash app shell: a header, navigation, and the registered pages (``dashboards/pages``)."""

from __future__ import annotations

from pathlib import Path

import dash
from dash import Dash, dcc, html

from dashboards import context
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule


def create_app(wh: Warehouse, *, idle: IdleRule | None = None, currency: str = "USD") -> Dash:
    """Build the app over ``wh``, judging idle time by ``idle`` and showing money in
    ``currency``. Serve it with ``app.run(...)`` (never with a forking server)."""
    context.set_context(context.Context(wh, idle or IdleRule(), currency))
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder=str(Path(__file__).with_name("pages")),
        title="gpuledger",
        suppress_callback_exceptions=True,
    )
    app.layout = html.Div(
        [
            html.Header(
                [
                    html.H1("gpuledger", className="brand"),
                    html.Nav(
                        [
                            dcc.Link(page["name"], href=page["relative_path"], className="nav-link")
                            for page in dash.page_registry.values()
                        ]
                    ),
                ],
                className="header",
            ),
            html.Main(dash.page_container, className="main"),
        ]
    )
    return app
