"""Result rendering for the command line: aligned tables, CSV, JSON."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
from collections.abc import Sequence
from typing import Any


def _cell(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list | tuple):
        return [_cell(v) for v in value]
    return value


def format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str) -> str:
    """Render a result as an aligned text table, CSV, or a JSON array of objects."""
    if fmt == "json":
        return (
            json.dumps([dict(zip(columns, map(_cell, r), strict=True)) for r in rows], indent=1)
            + "\n"
        )
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_cell(v) for v in r] for r in rows])
        return buf.getvalue()
    cells = [[str(_cell(v)) if v is not None else "NULL" for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += [
        "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths, strict=True))
        for r in cells
    ]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
