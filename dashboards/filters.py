"""The filters every page and API call shares (time range, cluster, pool, GPU model, tenant,
grouping, idle policy), read from a URL's query string so that a link can be shared.

A value that does not parse is an :class:`~gpuledger_errors.InputError` naming the parameter,
the value and what to give instead; the pages show it in place of the figures, the API
answers it with 400.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode

from gpuledger_errors import InputError
from warehouse.ledger import GROUPINGS, IdlePolicy, Window
from warehouse.times import day

#: The range a page shows when the link names none: the last seven days, today included.
DEFAULT_DAYS = 7
_TEXT = ("cluster", "pool", "gpu_model", "tenant")
_MAX_TEXT = 200


@dataclasses.dataclass(frozen=True)
class Filters:
    first: dt.date
    last: dt.date  # included, as everywhere in gpuledger
    cluster: str = ""
    pool: str = ""
    gpu_model: str = ""
    tenant: str = ""  # an org or org/project; "" for all the viewer may see
    by: str = "tenant"
    idle_policy: str = ""  # "" for the settings' policy

    @classmethod
    def parse(cls, query: Mapping[str, str] | str, *, today: dt.date) -> Filters:
        """Filters from a query string (or its parsed mapping); absent ones take defaults."""
        q = dict(parse_qsl(query.lstrip("?"))) if isinstance(query, str) else dict(query)
        last = day(q["to"], "to").date() if q.get("to") else today
        first = (
            day(q["from"], "from").date()
            if q.get("from")
            else last - dt.timedelta(days=DEFAULT_DAYS - 1)
        )
        Window.days(first, last)  # an empty or out-of-range window is refused here
        text = {k: str(q.get(k, "")).strip() for k in _TEXT}
        for name, value in text.items():
            if len(value) > _MAX_TEXT or any(ord(c) < 32 for c in value):
                raise InputError(f"{name} {value[:40]!r}… is not a name: give one as listed")
        by = q.get("by") or "tenant"
        if by not in GROUPINGS:
            raise InputError(f"by {by!r} is not one of {', '.join(GROUPINGS)}")
        policy = q.get("idle_policy") or ""
        if policy:
            IdlePolicy.parse(policy)
        return cls(first, last, by=by, idle_policy=policy, **text)

    @property
    def window(self) -> Window:
        return Window.days(self.first, self.last)

    def query(self, **change: str) -> str:
        """This state (with ``change``) as a query string, leaving out what is empty."""
        state = {
            "from": self.first.isoformat(),
            "to": self.last.isoformat(),
            **{k: getattr(self, k) for k in (*_TEXT, "by", "idle_policy")},
            **change,
        }
        return "?" + urlencode({k: v for k, v in state.items() if v})


def ranges(today: dt.date) -> list[tuple[str, dt.date, dt.date]]:
    """The ranges the shell offers in one click, as (label, first day, last day): the pages'
    default, the last 30 days, this month so far and last month."""
    first = today.replace(day=1)
    last_month = first - dt.timedelta(days=1)
    return [
        (f"{DEFAULT_DAYS} days", today - dt.timedelta(days=DEFAULT_DAYS - 1), today),
        ("30 days", today - dt.timedelta(days=29), today),
        ("This month", first, today),
        ("Last month", last_month.replace(day=1), last_month),
    ]
