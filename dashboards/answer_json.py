"""Dash's answers written as JSON by orjson in one pass.

Dash writes every callback's answer through plotly's ``to_json_plotly``, which hands the
answer to orjson whole and, as soon as it holds one thing orjson does not know (any Dash
component: a KPI's ``html.Div``), walks the whole answer again in Python to clean it, figures
and grids included: about a third of a GPU page's answer time. Here orjson asks
:func:`_plain` for such things instead, which answers what plotly's cleaning would
(a component's JSON form, a Decimal as a float); anything else falls back to plotly's own
writer, so every answer reads as plotly would have written it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
import plotly.io.json

_PLOTLY = plotly.io.json.to_json_plotly
_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
#: What plotly escapes in its JSON (an answer is also inlined in a page's HTML, where "</"
#: would end the script).
_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("/", "\\u002f"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def _plain(obj: Any) -> Any:
    if hasattr(obj, "to_plotly_json"):
        return obj.to_plotly_json()
    if isinstance(obj, Decimal):
        return float(obj)
    raise TypeError(f"{type(obj).__name__} is left to plotly's writer")


def to_json(value: Any, pretty: bool = False, engine: str | None = None) -> str:
    """``value`` as plotly's ``to_json_plotly`` writes it with the orjson engine."""
    if pretty or engine not in (None, "orjson"):
        return str(_PLOTLY(value, pretty=pretty, engine=engine))
    try:
        text = orjson.dumps(value, default=_plain, option=_OPTIONS).decode("utf8")
    except TypeError:
        return str(_PLOTLY(value, pretty=pretty, engine=engine))
    for unsafe, safe in _ESCAPES:
        if unsafe in text:
            text = text.replace(unsafe, safe)
    return text


def install() -> None:
    """Make Dash write its answers with :func:`to_json` (Dash looks ``to_json_plotly`` up
    in ``plotly.io.json`` each time it writes one)."""
    plotly.io.json.to_json_plotly = to_json  # type: ignore[attr-defined]
