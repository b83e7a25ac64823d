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

from warehouse.client import Warehouse


@functools.cache
def sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return resources.files("warehouse.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")


def render(name: str, **parts: str) -> str:
    """``sql/<name>.sql`` with each ``{{part}}`` replaced by a fixed piece of SQL (another
    named query, a keyword, engine settings); values never go this way, only as parameters."""
    text = sql(name)
    for key, piece in parts.items():
        text = text.replace("{{" + key + "}}", piece)
    if "{{" in text:
        raise ValueError(
            f"sql/{name}.sql has a part nobody filled: {text[text.index('{{') :][:40]}"
        )
    return text


def run(wh: Warehouse, name: str, **params: Any) -> pl.DataFrame:
    """Run the named query with ``params`` (plus ``db``) and return a frame."""
    return wh.frame(sql(name), {"db": wh.database, **params})


def last_sample(wh: Warehouse, cluster: str) -> dt.datetime | None:
    """The newest raw sample's time for ``cluster``, or None."""
    value = wh.rows(sql("last_sample"), {"db": wh.database, "cluster": cluster})[0][0]
    return value
