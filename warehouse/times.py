"""The instants the warehouse can hold, from FIRST_INSTANT up to END_INSTANT (excluded).

Its DateTime columns (the rollups) run from 1970 to early 2106, its Date columns (the sealed
days) to 2149. A time asked about must lie in between: outside, the engine would clamp it or
refuse it in its own words. (A module of its own, importing no driver, so that the command
line can check what is typed without loading the engine's.)
"""

from __future__ import annotations

import datetime as dt

from gpuledger_errors import InputError

FIRST_INSTANT = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
END_INSTANT = dt.datetime(2106, 1, 1, tzinfo=dt.UTC)


#: The days a window may name: its end (the day after the last) must still be held.
FIRST_DAY = FIRST_INSTANT.date()
LAST_DAY = END_INSTANT.date() - dt.timedelta(days=1)


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
