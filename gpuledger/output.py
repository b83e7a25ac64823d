"""Result rendering for the command line: aligned tables, CSV, JSON."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import ipaddress
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gpuledger_errors import ConfigError, GpuledgerError, InputError


def _cell(value: Any) -> Any:
    """A value as JSON and CSV can hold it: times and dates in ISO 8601, decimals, UUIDs and
    IP addresses as text, maps as objects; floats that JSON has no spelling for as text."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(
        value, decimal.Decimal | uuid.UUID | ipaddress.IPv4Address | ipaddress.IPv6Address
    ):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(_cell(k)): _cell(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_cell(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


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


def one_line(exc: GpuledgerError) -> str:
    """An error's message on one line (a source's own text, such as sacct's stderr, may have
    more), as the CLI prints it after ``gpuledger: ``."""
    return (
        " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        or type(exc).__name__
    )


def exit_status(exc: GpuledgerError) -> int:
    """2 for a bad setting or request (ConfigError, InputError), 1 for any other error."""
    return 2 if isinstance(exc, ConfigError | InputError) else 1
