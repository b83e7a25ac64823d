"""What the pages' tables share: column definitions for hours, GPUs, money and ratios (AG Grid
formats them in the browser, so sorting stays numeric), and the way a page reads the shared
filters and the viewer in a callback."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

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
