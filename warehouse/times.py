"""The instants the warehouse can hold, from FIRST_INSTANT up to END_INSTANT (excluded), and
the days, times and durations people type and read.

Its DateTime columns (the rollups) run from 1970 to early 2106, its Date columns (the sealed
days) to 2149. A time asked about must lie in between: outside, the engine would clamp it or
refuse it in its own words. (A module of its own, importing no driver, so that the command
line and the dashboards can check what is typed without loading the engine's.)
"""

from __future__ import annotations

import datetime as dt
import math

from gpuledger_errors import InputError

FIRST_INSTANT = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
END_INSTANT = dt.datetime(2106, 1, 1, tzinfo=dt.UTC)


#: The days a window may name: its end (the day after the last) must still be held.
FIRST_DAY = FIRST_INSTANT.date()
LAST_DAY = END_INSTANT.date() - dt.timedelta(days=1)


def next_month(t: dt.datetime) -> dt.datetime:
    """Midnight UTC of the first day of the month after ``t``'s (where a month's window ends)."""
    return (month_start(t) + dt.timedelta(days=32)).replace(day=1)


def month_start(t: dt.datetime) -> dt.datetime:
    """Midnight UTC of the first day of ``t``'s month."""
    return dt.datetime(t.year, t.month, 1, tzinfo=dt.UTC)


def month_days(first: dt.datetime, until: dt.datetime) -> float:
    """The days from a month's first midnight ``first`` to ``until``, to the thousandth (about
    a minute and a half): how much of a month not over yet a month over month compares."""
    return round((until - first) / dt.timedelta(days=1), 3)


def first_days_end(first: dt.datetime, days: float) -> dt.datetime:
    """The end of the first ``days`` of the month from ``first``: at least an hour of it, at
    most the whole month."""
    whole = min(next_month(first), first + dt.timedelta(days=days))
    return max(whole, first + dt.timedelta(hours=1))


def same_days_before(now: dt.datetime) -> dt.datetime:
    """Where the month before ``now``'s is cut to be compared with ``now``'s month so far: as
    many of its first days as :func:`month_days` counts of this one."""
    first = month_start(now)
    return first_days_end(month_start(first - dt.timedelta(days=1)), month_days(first, now))


def day(text: str, flag: str) -> dt.datetime:
    """Midnight UTC of the day ``text`` (YYYY-MM-DD); ``flag`` names it in the error (the
    command line's ``--from``, the API's ``from``)."""
    try:
        date = dt.date.fromisoformat(text)
    except ValueError:
        raise InputError(f"{flag} {text!r} is not a date: use YYYY-MM-DD") from None
    if not FIRST_DAY <= date <= LAST_DAY:
        raise InputError(
            f"{flag} {text} is outside the days the warehouse holds: pick one from "
            f"{FIRST_DAY} to {LAST_DAY}"
        )
    return dt.datetime(date.year, date.month, date.day, tzinfo=dt.UTC)


def instant(text: str, flag: str, example: str, *, offset: bool = False) -> dt.datetime:
    """The ISO time ``text``, UTC when it has no offset (with ``offset``, one is required);
    ``flag`` names it in the error (``--at``, the API's ``at``) and ``example`` is shown when
    it is not one."""
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


def format_duration(seconds: float | None) -> str:
    """A duration as a person reads it: ``45 s``, ``12 m 5 s``, ``3 h 7 m``, ``2 d 0 h 38 m``
    (seconds are dropped from an hour on, as a wait of hours is not read to the second)."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h {minutes} m"
    if hours:
        return f"{hours} h {minutes} m"
    if minutes:
        return f"{minutes} m {secs} s"
    return f"{secs} s"
