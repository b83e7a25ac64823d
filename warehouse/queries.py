"""Named analytic queries: the SQL lives in ``sql/<name>.sql`` with server-side parameters.

Consumers (dashboards, reports, the CLI) call these functions and never hold SQL themselves.
Values always travel as ``{name:Type}`` parameters, never formatted into the text.
"""

from __future__ import annotations

import datetime as dt
import functools
from importlib import resources
from typing import Any

import polars as pl

from .client import Warehouse


@functools.cache
def sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return resources.files("warehouse.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")


def run(wh: Warehouse, name: str, **params: Any) -> pl.DataFrame:
    """Run the named query with ``params`` (plus ``db``) and return a frame."""
    return wh.frame(sql(name), {"db": wh.database, **params})


def fleet_hourly(wh: Warehouse, cluster: str, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Per hour: capacity_gpus, allocated_gpus, used_gpus (see ``sql/fleet_hourly.sql``)."""
    return run(wh, "fleet_hourly", cluster=cluster, start=start, end=end)


def fleet_summary(wh: Warehouse, cluster: str) -> pl.DataFrame:
    """GPUs in inventory now, by model and health."""
    return run(wh, "fleet_summary", cluster=cluster)


def clusters(wh: Warehouse) -> pl.DataFrame:
    """Clusters with samples: cluster, first_hour, last_hour, samples."""
    return run(wh, "clusters")


def last_sample(wh: Warehouse, cluster: str) -> dt.datetime | None:
    """The newest raw sample's time for ``cluster``, or None."""
    value = wh.rows(sql("last_sample"), {"db": wh.database, "cluster": cluster})[0][0]
    return value
