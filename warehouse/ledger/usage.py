"""Usage and capacity read from the warehouse: every allocation interval in a window with the
GPU-hours it held, used and left idle (``sql/ledger_usage.sql``), and every GPU's inventory
states (``sql/ledger_capacity.sql``). Computed live from the minute rollup or the raw samples;
:mod:`warehouse.ledger.seal` keeps finished days of the same rows."""

from __future__ import annotations

import datetime as dt

import polars as pl

from warehouse import queries
from warehouse.client import Warehouse
from warehouse.ledger.result import IdleRule, LedgerError

SOURCES = ("rollup", "raw")

#: Settings per source, sent with the query. Raw samples are grouped GPU by GPU in
#: table order, and each reading stream hands on its GPU-days every 1 MB rather than every
#: 50 MB, so the minutes are cut into hours on both cores while samples are still being read
#: (see benchmarks/RESULTS.md); the rollup's rows are few enough for the engine's defaults.
_SOURCE_SETTINGS = {
    "rollup": {},
    "raw": {"optimize_aggregation_in_order": 1, "aggregation_in_order_max_block_bytes": 1_000_000},
}


def usage_margin(idle: IdleRule) -> dt.timedelta:
    """How far around a window the usage query reads minutes (ledger_usage.sql's lo and hi):
    enough to judge an idle run crossing the window's edge."""
    return dt.timedelta(seconds=idle.min_duration_s + 60)


def live_usage_frame(
    wh: Warehouse,
    start: dt.datetime,
    end: dt.datetime,
    *,
    now: dt.datetime,
    idle: IdleRule,
    cluster: str = "",
    source: str = "rollup",
) -> pl.DataFrame:
    """Every allocation interval in [start, end) with allocated_gpu_ms and used and idle
    GPU-hours, from the minutes (``rollup``) or the samples (``raw``) alone; intervals still
    open are held up to ``now`` when the window reaches past it."""
    if source not in SOURCES:
        raise LedgerError(f"source {source!r} must be rollup or raw")
    margin = usage_margin(idle)
    settings = dict(_SOURCE_SETTINGS[source])
    materialized = wh.has_setting("enable_materialized_cte")
    if materialized:
        settings["enable_materialized_cte"] = 1
    text = queries.render(
        "ledger_usage",
        minutes=queries.sql(f"ledger_minutes_{source}"),
        materialized="MATERIALIZED" if materialized else "",
    )
    return wh.frame(
        text,
        {
            "db": wh.database,
            "cluster": cluster,
            "a": start,
            "b": max(start, min(end, now)),
            "lo": start - margin,
            "hi": end + margin,
            "threshold": float(idle.threshold_ratio),
            "min_idle_s": int(idle.min_duration_s),
        },
        settings,
    )


def capacity_frame(
    wh: Warehouse, start: dt.datetime, end: dt.datetime, *, now: dt.datetime, cluster: str = ""
) -> pl.DataFrame:
    """Every GPU's inventory states clipped to [start, min(end, now)), with capacity_gpu_ms."""
    return queries.run(wh, "ledger_capacity", cluster=cluster, a=start, b=max(start, min(end, now)))
