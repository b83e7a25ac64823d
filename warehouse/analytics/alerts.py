"""What is open now: the alerts that fired and have not resolved (table ``alerts``) and the
scheduler advice still in force (table ``advice``). Both tables keep history, one row per
change; the state of an alert or advice is its latest row.

Alerting and advice are written by the chargeback-and-alerts and scheduler-hooks work; until
then both tables are empty, and so are these answers.

Who sees what: a tenant's view (``tenant=``, an org or org/project) holds the alerts on its
own jobs alone (an alert naming no tenant, a node's or a GPU's, is the cluster's; in its
message, the other tenants it names are not named: :data:`ANOTHER_TENANT`) and the
advice that takes GPUs from it or gives GPUs to it. In advice, the tenant on the other side is
not named (:data:`ANOTHER_TENANT`), that side's jobs are not listed, and the free-text reason
and patch are left out unless both sides are its own.
"""

from __future__ import annotations

import datetime as dt
import re

import polars as pl

from gpuledger_errors import InputError
from warehouse import queries
from warehouse.analytics import fleet
from warehouse.analytics.tenancy import owns
from warehouse.client import Warehouse

#: Alert states after which an alert is no longer open.
CLOSED_STATES = ("resolved", "closed")
#: Advice statuses after which advice is no longer in force.
DONE_STATUSES = ("applied", "rejected", "superseded", "withdrawn", "expired")
#: How a tenant's view names the tenant on the other side of advice.
ANOTHER_TENANT = "(another tenant)"
LIMIT = 500


def written(wh: Warehouse) -> tuple[int, int]:
    """How many rows alerting and advice have written in all: (alerts, advice); (0, 0) until
    the work that fills them runs, which a page tells apart from "nothing open now"."""
    row = queries.run(wh, "alerts_written").row(0)
    return int(row[0]), int(row[1])


def _utc(at: dt.datetime) -> dt.datetime:
    if not isinstance(at, dt.datetime) or at.tzinfo is None:
        raise InputError(f"at {at!r} must be a timezone-aware datetime (UTC)")
    return at.astimezone(dt.UTC)


def _unprefixed(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.rename({c: c.removeprefix("last_") for c in frame.columns})


def open_alerts(
    wh: Warehouse,
    at: dt.datetime,
    *,
    cluster: str = "",
    tenant: str | None = None,
    limit: int = LIMIT,
) -> pl.DataFrame:
    """The alerts open at ``at``, most recently changed first (at most ``limit``).

    Columns: alert_id, rule, severity, state, first_ts, last_ts, cluster, node, gpu_uuid,
    job_id, tenant, value, threshold, message.
    """
    frame = queries.run(
        wh,
        "alerts_open",
        at=_utc(at),
        cluster=cluster,
        tenant=tenant or "",
        closed=list(CLOSED_STATES),
        limit=limit,
    )
    frame = _unprefixed(frame)
    if tenant is None or not frame.height:
        return frame
    others = [t for t in fleet.known_tenants(wh) if not owns(tenant, t)]
    return frame.with_columns(
        pl.col("message").map_elements(lambda m: unnamed(m, tenant, others), pl.String)
    )


def unnamed(message: str, tenant: str, others: list[str]) -> str:
    """``message`` with every tenant of ``others`` (org/project keys) that ``tenant`` does not
    own named :data:`ANOTHER_TENANT`: an alert on a tenant's job may name the tenants beside
    it (those whose jobs wait, or who share the GPU). Its keys go first, then its org and
    project names alone, as whole words, where they are not names of ``tenant``'s own."""
    own = set(tenant.split("/"))
    for key in sorted(others, key=len, reverse=True):
        message = message.replace(key, ANOTHER_TENANT)
    words = {w for key in others for w in key.split("/") if w and w not in own}
    for word in sorted(words, key=len, reverse=True):
        message = re.sub(rf"(?<![\w/-]){re.escape(word)}(?![\w/-])", ANOTHER_TENANT, message)
    return message


def current_advice(
    wh: Warehouse,
    at: dt.datetime,
    *,
    cluster: str = "",
    tenant: str | None = None,
    limit: int = LIMIT,
) -> pl.DataFrame:
    """The advice in force at ``at``, newest first (at most ``limit``), as ``tenant`` may see
    it (see the module docstring).

    Columns: advice_id, kind, first_ts, last_ts, cluster, pool, gpu_model, from_tenant,
    to_tenant, gpus, job_ids, reason, payload, status.
    """
    frame = _unprefixed(
        queries.run(
            wh,
            "advice_current",
            at=_utc(at),
            cluster=cluster,
            tenant=tenant or "",
            done=list(DONE_STATUSES),
            limit=limit,
        )
    )
    return frame if tenant is None else told_to(frame, tenant)


def told_to(advice: pl.DataFrame, tenant: str) -> pl.DataFrame:
    """``advice`` as ``tenant`` may see it: the other side unnamed, its jobs unlisted, and
    the reason and patch left out unless both sides are the tenant's own."""
    rows = []
    for row in advice.iter_rows(named=True):
        # advice with one side only (a tenant's own limit or weight) has no other tenant
        giver = not row["from_tenant"] or owns(tenant, row["from_tenant"])
        taker = not row["to_tenant"] or owns(tenant, row["to_tenant"])
        rows.append(
            row
            | {
                "from_tenant": row["from_tenant"] if giver else ANOTHER_TENANT,
                "to_tenant": row["to_tenant"] if taker else ANOTHER_TENANT,
                "job_ids": list(row["job_ids"] or ()) if giver else [],
                "reason": row["reason"] if giver and taker else "",
                "payload": row["payload"] if giver and taker else "",
            }
        )
    return pl.DataFrame(rows, schema=advice.schema, orient="row") if rows else advice
