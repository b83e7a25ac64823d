"""Named analytic queries: the SQL lives in ``sql/<name>.sql``.

How SQL text is made, everywhere in gpuledger (one scheme):

- every value, and every identifier a query reads (``{db:Identifier}``), is a server-side
  parameter ``{name:Type}``, sent beside the text and never formatted into it;
- a fixed piece of SQL chosen by the code (another named query, a keyword, an ``ON CLUSTER``
  clause, a table engine) is a part ``{{name}}``, or ``{{name:argument}}`` for a part that takes
  one, filled by :func:`fill` before the text is sent (:func:`render` for a named query).
  Parts are SQL written in gpuledger or validated names, never a user's value;
- schema statements (:mod:`warehouse.migrate`) are made of parts only, since the engine keeps a
  table's DDL as text, where a parameter would stay as ``_CAST(value, 'Type')`` and ``ON
  CLUSTER`` takes none.

Consumers (dashboards, reports, the CLI) call the ledger's and analytics' functions and never
hold SQL themselves.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import polars as pl

from warehouse.client import Warehouse

#: ``{{name}}`` or ``{{name:argument}}``; a server-side parameter has one brace.
PART = re.compile(r"\{\{(\w+)(?::([^{}]*))?\}\}")

#: What fills a part: a piece of SQL, or for ``{{name:argument}}`` a function of the argument.
Part = str | Callable[[str], str]


@functools.cache
def sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return resources.files("warehouse.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")


def fill(text: str, parts: Mapping[str, Part], where: str) -> str:
    """``text`` with each ``{{part}}`` replaced by its piece in ``parts`` (in one pass: a piece
    is never searched for parts). A part ``text`` names and ``parts`` lacks, or the wrong kind
    of piece for it, is an error naming ``where``."""

    def piece(match: re.Match[str]) -> str:
        name, argument = match[1], match[2]
        if name not in parts:
            raise ValueError(f"{where} has a part nobody filled: {match[0]}")
        filler = parts[name]
        if (argument is None) != isinstance(filler, str):
            raise ValueError(f"{where}: {match[0]} and the piece given for it do not match")
        return filler if isinstance(filler, str) else filler(argument or "")

    rest = PART.sub("", text)
    if "{{" in rest:
        raise ValueError(f"{where} has a malformed part near {rest[rest.index('{{') :][:40]!r}")
    return PART.sub(piece, text)


def render(name: str, **parts: Part) -> str:
    """``sql/<name>.sql`` with its ``{{part}}``s filled (see :func:`fill`)."""
    return fill(sql(name), parts, f"sql/{name}.sql")


def run(wh: Warehouse, name: str, **params: Any) -> pl.DataFrame:
    """Run the named query with ``params`` (plus ``db``) and return a frame."""
    return wh.frame(sql(name), {"db": wh.database, **params})


def last_sample(wh: Warehouse, cluster: str) -> dt.datetime | None:
    """The newest raw sample's time for ``cluster``, or None."""
    value = wh.rows(sql("last_sample"), {"db": wh.database, "cluster": cluster})[0][0]
    return value
