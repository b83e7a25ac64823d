"""The JSON API for other tools: ``GET /api/v1/<name>`` answers what the pages show, from the
same functions (:mod:`dashboards.answers`), limited to what the asking viewer may see.

Every answer is JSON: a mistake in a parameter is 400 naming it, a tenant outside the
viewer's is 403, a fault of the server's own is 500 with no traceback.
"""

from __future__ import annotations

import logging

import flask

from dashboards import context
from dashboards.answers import Answer
from dashboards.answers import capacity as capacity_answers
from dashboards.answers import cost as cost_answers
from dashboards.answers import idle as idle_answers
from dashboards.answers import ledger as ledger_answers
from dashboards.answers import queues as queue_answers
from dashboards.answers import tenants as tenant_answers
from dashboards.context import Forbidden
from dashboards.filters import Filters
from gpuledger_errors import InputError

log = logging.getLogger(__name__)

#: Every answer the API serves, by the last part of its path.
ANSWERS: dict[str, Answer] = {
    "ledger": ledger_answers.answer,
    "fragmentation": capacity_answers.answer,
    "queues": queue_answers.answer,
    "idle": idle_answers.answer,
    "tenants": tenant_answers.answer,
    "jobs": tenant_answers.jobs_answer,
    "cost_change": cost_answers.answer,
}


def register(server: flask.Flask) -> None:
    """Add ``/api/v1/<name>`` for every answer in :data:`ANSWERS` to ``server``."""
    api = flask.Blueprint("gpuledger_answers", __name__)

    @api.get("/api/v1/<name>")
    def serve_answer(name: str) -> flask.typing.ResponseReturnValue:
        found = ANSWERS.get(name)
        if found is None:
            known = ", ".join(f"/api/v1/{n}" for n in sorted(ANSWERS))
            return flask.jsonify(error=f"/api/v1/{name} is not an answer: try {known}"), 404
        try:
            viewer = context.viewer()
            params = flask.request.args.to_dict()
            filters = Filters.parse(params, today=context.get().now().date())
            return flask.jsonify(found(filters, viewer, params))
        except Forbidden as exc:
            return flask.jsonify(error=str(exc)), 403
        except InputError as exc:
            return flask.jsonify(error=str(exc)), 400

    api.register_error_handler(Exception, _fault)
    server.register_blueprint(api)


def _fault(exc: Exception) -> flask.typing.ResponseReturnValue:
    """A fault of the server's own: logged with its traceback, answered as JSON."""
    log.exception("%s failed", flask.request.path)
    return flask.jsonify(
        error=f"the server failed on this request ({type(exc).__name__}); the operator finds "
        "it in the server's log"
    ), 500
