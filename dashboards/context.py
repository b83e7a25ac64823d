"""What the pages' callbacks reach the warehouse through: set once by ``create_app``.

Layouts never hold tenant data (they may be served to anyone); callbacks fetch it through
the warehouse query functions, at request time.
"""

from __future__ import annotations

import dataclasses

from warehouse.client import Warehouse
from warehouse.ledger import IdleRule


@dataclasses.dataclass
class Context:
    wh: Warehouse
    idle: IdleRule
    currency: str


_current: Context | None = None


def set_context(ctx: Context) -> None:
    global _current
    _current = ctx


def get() -> Context:
    if _current is None:
        raise RuntimeError("the dashboard was not created through dashboards.app.create_app")
    return _current
