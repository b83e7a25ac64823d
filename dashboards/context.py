"""What the pages' callbacks and the JSON API reach the warehouse through: set once by
``create_app``.

Layouts never hold tenant data (they may be served to anyone); callbacks fetch it through
the warehouse query functions, at request time, for the viewer the shell says is asking.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Hashable
from typing import TypeVar

from dashboards.cache import AnswerCache
from gpuledger_errors import GpuledgerError
from warehouse.analytics.tenancy import owns
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule


class Forbidden(GpuledgerError):
    """The viewer may not see what was asked (another tenant's rows, or nothing: no login)."""


@dataclasses.dataclass(frozen=True)
class Viewer:
    """Who is asking, as the shell's login saw them: ``role`` is ``admin``, ``manager``,
    ``tenant:ORG`` or ``tenant:ORG/PROJECT``."""

    name: str
    role: str

    @property
    def tenant(self) -> str | None:
        """The org or org/project this viewer is limited to; None: sees every tenant."""
        return self.role.removeprefix("tenant:") if self.role.startswith("tenant:") else None

    @property
    def manages(self) -> bool:
        """Whether this viewer may approve or reject advice: an admin or a manager."""
        return self.role in MANAGING_ROLES

    def scope(self, asked: str | None = None) -> str | None:
        """The tenant the answer is limited to: what was ``asked`` (an org, org/project, or
        None for all) within what this viewer may see. Asking outside it is refused, never
        widened or silently narrowed."""
        asked = (asked or "").strip().strip("/") or None
        mine = self.tenant
        if mine is None:
            return asked
        if asked is None or owns(mine, asked):
            return asked or mine
        raise Forbidden(f"{self.name} ({self.role}) may see the figures of tenant {mine} alone")


#: The roles that may approve or reject advice (as on the command line).
MANAGING_ROLES = ("admin", "manager")

#: Approves or rejects advice: (advice id, "approve" or "reject", who) -> its new status. The
#: shell hands in the scheduler hooks' approval path, which this package may not import.
Decide = Callable[[str, str, str], str]

#: A viewer for in-process use without the shell's login (tests of the pages, `--insecure`).
EVERYONE = Viewer("(no login)", "admin")


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclasses.dataclass
class Context:
    wh: Warehouse
    idle: IdleRule
    currency: str
    idle_policy: str = "weighted"
    #: Who is asking, for the request being answered; None: nobody logged in.
    viewer: Callable[[], Viewer | None] = lambda: EVERYONE
    #: The clock; every callback reads "now" here so a test or a replay can pin it.
    now: Callable[[], dt.datetime] = _utc_now
    #: The pages' answers kept a short while (see :mod:`dashboards.cache`); None: none kept.
    answers: AnswerCache | None = None
    #: How advice is approved or rejected; None: not from this app (no buttons).
    decide: Decide | None = None
    #: The instant the ledger's figures are as of (the server's kept live tail,
    #: :mod:`warehouse.ledger.tail`); None: the clock. Alerts, advice and telemetry read the
    #: clock, so that a step just taken shows at once.
    as_of: Callable[[], dt.datetime] | None = None

    def ledger_now(self) -> dt.datetime:
        """The instant the answers read from the ledger (usage, idle, cost) take as now."""
        return self.as_of() if self.as_of is not None else self.now()


_current: Context | None = None


def set_context(ctx: Context) -> None:
    global _current
    _current = ctx


def get() -> Context:
    if _current is None:
        raise RuntimeError("the dashboard was not created through dashboards.app.create_app")
    return _current


def viewer() -> Viewer:
    """Who is asking; raises :class:`Forbidden` when nobody is logged in (the shell's login
    refuses such requests first; this is the second lock, in every callback)."""
    who = get().viewer()
    if who is None:
        raise Forbidden("log in to see this")
    return who


T = TypeVar("T")


def ask(fn: Callable[..., T], filters: Hashable, viewer: Viewer, *rest: Hashable) -> T:
    """``fn(filters, viewer, *rest)`` for a page, through the answer cache when there is one:
    kept under ``fn``, the filters, the tenant ``viewer`` is limited to and the one it is
    shown for them, and ``rest``. An answer never depends on who within a scope asks, so the
    first asker's call computes it for all of them; a refusal comes before any lookup."""
    cache = get().answers
    if cache is None:
        return fn(filters, viewer, *rest)
    scope = viewer.scope(getattr(filters, "tenant", None))
    key = (f"{fn.__module__}.{fn.__qualname__}", filters, viewer.tenant, scope, rest)
    return cache.get(key, functools.partial(fn, filters, viewer, *rest))
