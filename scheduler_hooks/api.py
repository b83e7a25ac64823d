"""``GET /api/advice``: the scheduler advice in force, as JSON, under the dashboards' access
rules: a logged-in viewer is needed; managers and admins see all of it, a ``tenant:`` viewer
only the advice that takes GPUs from or gives GPUs to its tenant (an org: its projects), with
the tenant on the other side unnamed and that side's jobs unlisted.

``?cluster=C`` keeps one cluster; ``?live=1`` adds each cluster's standings, priorities, limits
and recommendations worked out now (as ``gpuledger advise --no-store --format json``). The
viewer comes from the shell (a callable, since this package may not import the dashboards'),
and so does the live report (it needs the settings).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Protocol

import flask

from gpuledger_errors import InputError
from scheduler_hooks.advice import AdviceReport
from scheduler_hooks.proposals import in_force
from warehouse.analytics import fleet
from warehouse.client import Warehouse

log = logging.getLogger(__name__)


class Viewer(Protocol):
    """Who asks, as the dashboards' ``Viewer`` has it."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def tenant(self) -> str | None: ...


#: The advice of a cluster at an instant, worked out now.
LiveReport = Callable[[str, dt.datetime], AdviceReport]


def register(
    server: flask.Flask,
    wh: Warehouse,
    *,
    viewer: Callable[[], Viewer | None],
    now: Callable[[], dt.datetime],
    live: LiveReport | None = None,
) -> None:
    """Add ``GET /api/advice`` to ``server``."""
    bp = flask.Blueprint("gpuledger_advice", __name__)

    @bp.get("/api/advice")
    def advice() -> flask.typing.ResponseReturnValue:
        who = viewer()
        if who is None:
            return flask.jsonify(error="log in to see the advice"), 401
        try:
            at = now()
            cluster = fleet.pick_cluster(
                wh, flask.request.args.get("cluster", ""), name="cluster", one=False
            )
            body: dict[str, object] = {
                "at": at.isoformat(),
                "viewer": {"name": who.name, "role": who.role},
                "advice": [
                    s.to_json() for s in in_force(wh, at, cluster=cluster, tenant=who.tenant)
                ],
            }
            if flask.request.args.get("live") in ("1", "true") and live is not None:
                body["clusters"] = [
                    live(c, at).seen_by(who.tenant).to_json()
                    for c in ([cluster] if cluster else fleet.known_clusters(wh))
                ]
            return flask.jsonify(body)
        except InputError as exc:
            return flask.jsonify(error=str(exc)), 400

    @bp.errorhandler(Exception)
    def fault(exc: Exception) -> flask.typing.ResponseReturnValue:
        log.exception("%s failed", flask.request.path)
        return flask.jsonify(
            error=f"the server failed on this request ({type(exc).__name__}); the operator "
            "finds it in the server's log"
        ), 500

    server.register_blueprint(bp)
