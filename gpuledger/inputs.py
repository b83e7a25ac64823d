"""The days and times a user types (``--from``, ``--at``, ``--since``, ``--start``), read the
same way by every command: a mistake, or a time outside what the warehouse holds, is an
:class:`~gpuledger_errors.InputError` that names the flag and the value."""

from __future__ import annotations

import datetime as dt

from gpuledger_errors import InputError
from warehouse.times import END_INSTANT, FIRST_INSTANT, day

__all__ = ["day", "instant"]


def instant(text: str, flag: str, example: str, *, offset: bool = False) -> dt.datetime:
    """The ISO time ``text``, UTC when it has no offset (with ``offset``, one is required);
    ``example`` is shown when it is not one."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{flag} {text!r} is not an ISO time such as {example}") from None
    if when.tzinfo is None:
        if offset:
            raise InputError(f"{flag} {text!r} has no UTC offset: add one, e.g. +00:00")
        when = when.replace(tzinfo=dt.UTC)
    if not FIRST_INSTANT <= when < END_INSTANT:
        raise InputError(
            f"{flag} {text!r} is outside the times the warehouse holds: pick one from "
            f"{FIRST_INSTANT:%Y-%m-%d} to {END_INSTANT:%Y-%m-%d} (UTC)"
        )
    return when
