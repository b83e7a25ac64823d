"""The instants the warehouse can hold, from FIRST_INSTANT up to END_INSTANT (excluded).

Its DateTime columns (the rollups) run from 1970 to early 2106, its Date columns (the sealed
days) to 2149. A time asked about must lie in between: outside, the engine would clamp it or
refuse it in its own words. (A module of its own, with no imports, so that the command line
can check what is typed without loading the engine's driver.)
"""

from __future__ import annotations

import datetime as dt

FIRST_INSTANT = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
END_INSTANT = dt.datetime(2106, 1, 1, tzinfo=dt.UTC)
