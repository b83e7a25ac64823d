"""What the pages' tables share: column definitions for hours, GPUs, money and ratios (AG Grid
formats them in the browser, so sorting stays numeric), and the blocks of rows a grid too long
to send whole asks for (:func:`block`: filtered, sorted and cut on the server)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import polars as pl

from gpuledger_errors import InputError

_BLANK = "params.value == null ? '–' : "


def column(field: str, header: str, **more: Any) -> dict[str, Any]:
    return {"field": field, "headerName": header, **more}


def number(field: str, header: str, digits: int = 1, **more: Any) -> dict[str, Any]:
    """A right-aligned number with ``digits`` decimals and thousands separators."""
    return column(
        field,
        header,
        type="rightAligned",
        valueFormatter={"function": f"{_BLANK}d3.format(',.{digits}f')(params.value)"},
        **more,
    )


def money(field: str, header: str, **more: Any) -> dict[str, Any]:
    return number(field, header, 2, **more)


def ratio(field: str, header: str, **more: Any) -> dict[str, Any]:
    """A ratio (0-1) shown as a percentage."""
    return column(
        field,
        header,
        type="rightAligned",
        valueFormatter={"function": f"{_BLANK}d3.format('.0%')(params.value)"},
        **more,
    )


def amount(value: str | Decimal | None) -> float | None:
    """Money for a grid cell (to the cent; the exact figures are in the downloads)."""
    return None if value is None else float(Decimal(value))


# -- a grid that asks for its rows a block at a time (AG Grid's infinite row model) ----------
#: Rows a block holds: what one request of such a grid asks for.
BLOCK_ROWS = 100

_TEXT_TESTS = {
    "equals": lambda c, v: c == v,
    "notEqual": lambda c, v: c != v,
    "contains": lambda c, v: c.str.contains(v, literal=True),
    "notContains": lambda c, v: ~c.str.contains(v, literal=True),
    "startsWith": lambda c, v: c.str.starts_with(v),
    "endsWith": lambda c, v: c.str.ends_with(v),
}
_NUMBER_TESTS = {
    "equals": lambda c, v: c == v,
    "notEqual": lambda c, v: c != v,
    "lessThan": lambda c, v: c < v,
    "lessThanOrEqual": lambda c, v: c <= v,
    "greaterThan": lambda c, v: c > v,
    "greaterThanOrEqual": lambda c, v: c >= v,
}


def _condition(frame: pl.DataFrame, column: str, model: Mapping[str, Any]) -> pl.Expr:
    """One condition of a column's filter, as AG Grid's text and number filters mean it (text
    compared without case)."""
    kind, test = model.get("filterType"), model.get("type")
    col = pl.col(column)
    if test == "blank":
        return col.is_null() | (col.cast(pl.String) == "")
    if test == "notBlank":
        return col.is_not_null() & (col.cast(pl.String) != "")
    if kind == "text" and test in _TEXT_TESTS and frame.schema[column] == pl.String:
        text = str(model.get("filter") or "").lower()
        return _TEXT_TESTS[test](col.str.to_lowercase(), text).fill_null(False)
    if kind == "number" and frame.schema[column].is_numeric():
        try:
            value = float(model["filter"])
            if test == "inRange":
                return col.is_between(value, float(model["filterTo"])).fill_null(False)
        except (KeyError, TypeError, ValueError):
            raise InputError(
                f"the grid's filter on {column} has no number to compare with: "
                f"{model.get('filter')!r}; type one"
            ) from None
        if test in _NUMBER_TESTS:
            return _NUMBER_TESTS[test](col, value).fill_null(False)
    raise InputError(
        f"the grid cannot filter {column} by {kind} {test!r}: use one of "
        f"{', '.join(_TEXT_TESTS if frame.schema[column] == pl.String else _NUMBER_TESTS)}"
    )


def _kept_by(frame: pl.DataFrame, filters: Mapping[str, Any]) -> pl.Expr:
    keep = pl.lit(True)
    for column, model in filters.items():
        if column not in frame.columns:
            raise InputError(f"the grid has no column {column!r} to filter by")
        conditions = model.get("conditions") if isinstance(model, Mapping) else None
        if conditions:  # two conditions joined by AND or OR
            parts = [_condition(frame, column, c) for c in conditions]
            joined = parts[0]
            for part in parts[1:]:
                joined = joined & part if model.get("operator") == "AND" else joined | part
            keep &= joined
        elif isinstance(model, Mapping):
            keep &= _condition(frame, column, model)
    return keep


def block(frame: pl.DataFrame, request: Mapping[str, Any] | None) -> dict[str, Any]:
    """The rows an infinite grid asks for (``getRowsRequest``: startRow, endRow, sortModel,
    filterModel), filtered and sorted over the whole of ``frame`` first, with how many match
    (``rowCount``, so the grid knows where it ends): its ``getRowsResponse``."""
    request = request or {}
    kept = frame.filter(_kept_by(frame, request.get("filterModel") or {}))
    sorts = [s for s in request.get("sortModel") or [] if s.get("sort") in ("asc", "desc")]
    unknown = [s.get("colId") for s in sorts if s.get("colId") not in frame.columns]
    if unknown:
        raise InputError(f"the grid has no column {unknown[0]!r} to sort by")
    if sorts:
        kept = kept.sort(
            [s["colId"] for s in sorts],
            descending=[s["sort"] == "desc" for s in sorts],
            nulls_last=True,
            maintain_order=True,
        )
    first = max(0, int(request.get("startRow") or 0))
    last = max(first, int(request.get("endRow") or first + BLOCK_ROWS))
    return {"rowData": kept.slice(first, last - first).to_dicts(), "rowCount": kept.height}
