"""A plain reference of the ledger's usage and direct cost: the oracle the fast SQL must equal.

Written for reading, not speed, straight from the definitions (docs/ARCHITECTURE.md), over the
rows as stored — raw samples, allocation intervals and price-book entries — never through the
warehouse's analytic queries:

- allocated: fraction x the part of the interval inside the window;
- used: fraction x, minute by minute, the minute's part inside the interval x the mean
  utilisation of the GPU's samples in that minute (a minute with no sample uses nothing);
- unmeasured: allocated less fraction x the parts of the interval in minutes with a sample;
- idle: fraction x the time of the interval inside runs of "low" minutes (every sample of the
  minute under the threshold), a run cut to the job's own span (its start and end, within the
  window widened by the minimum idle time and a minute) and counted only when what is left of
  it lasts at least the minimum;
- direct cost: allocated GPU-hours x the price in effect (a pool's own entries from the first of
  them on, else the pool-less ones), split where the price changes.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

MINUTE_MS = 60_000
HOUR_MS = 3_600_000


def ms(t: dt.datetime) -> int:
    return round(t.timestamp() * 1000)


@dataclasses.dataclass(frozen=True)
class Alloc:
    """One stored allocation interval (end None: still open) and the keys it is grouped by."""

    gpu: tuple[str, str, str]  # cluster, gpu_uuid, mig_instance
    start_ms: int
    end_ms: int | None
    fraction: float
    gpu_model: str
    pool: str
    keys: Mapping[str, str]


@dataclasses.dataclass
class Usage:
    allocated_h: float = 0.0
    used_h: float = 0.0
    measured_h: float = 0.0
    idle_h: float = 0.0
    direct: Decimal = Decimal(0)
    lines: set[tuple[str, ...]] = dataclasses.field(default_factory=set)  # money rounds per line


def minutes(
    samples: Iterable[tuple[tuple[str, str, str], int, float]],
) -> dict[tuple[str, str, str], dict[int, tuple[float, float]]]:
    """Per GPU and minute (its start in ms): (mean, highest) utilisation of its samples."""
    acc: dict[tuple[str, str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for gpu, t_ms, util in samples:
        acc[gpu][t_ms - t_ms % MINUTE_MS].append(util)
    return {gpu: {m: (sum(v) / len(v), max(v)) for m, v in per.items()} for gpu, per in acc.items()}


def low_runs(
    per_minute: Mapping[int, tuple[float, float]], threshold: float
) -> list[tuple[int, int]]:
    """[start, end) in ms of the maximal runs of consecutive low minutes."""
    runs: list[tuple[int, int]] = []
    for m in sorted(m for m, (_mean, top) in per_minute.items() if top < threshold):
        if runs and runs[-1][1] == m:
            runs[-1] = (runs[-1][0], m + MINUTE_MS)
        else:
            runs.append((m, m + MINUTE_MS))
    return runs


def overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def price_at(
    book: Sequence[tuple[str, str, int, Decimal]], model: str, pool: str
) -> list[tuple[int, Decimal]]:
    """The (from_ms, price) series that applies to ``model`` in ``pool``, oldest first."""
    generic = sorted((t, p) for m, pl_, t, p in book if m == model and pl_ == "")
    own = sorted((t, p) for m, pl_, t, p in book if m == model and pool and pl_ == pool)
    if own:
        generic = [e for e in generic if e[0] < own[0][0]]
    return generic + own


def direct_cost(series: list[tuple[int, Decimal]], s: int, e: int, fraction: float) -> Decimal:
    cost = Decimal(0)
    for i, (since, price) in enumerate(series):
        until = series[i + 1][0] if i + 1 < len(series) else e
        held = overlap(s, e, since, until)
        cost += Decimal(fraction * held) / HOUR_MS * price
    return cost


def usage(
    allocs: Iterable[Alloc],
    samples: Iterable[tuple[tuple[str, str, str], int, float]],
    book: Sequence[tuple[str, str, int, Decimal]],
    a: dt.datetime,
    b: dt.datetime,
    *,
    threshold: float,
    min_idle_s: int,
    group_by: str,
) -> dict[str, Usage]:
    """Allocated, used and idle GPU-hours and exact direct cost per ``group_by`` key over
    [a, b) (``b`` already cut at the present)."""
    per_gpu = minutes(samples)
    runs = {gpu: low_runs(per, threshold) for gpu, per in per_gpu.items()}
    a_ms, b_ms = ms(a), ms(b)
    margin = (min_idle_s + 60) * 1000
    lo, hi = a_ms - margin, b_ms + margin
    out: dict[str, Usage] = defaultdict(Usage)
    for al in allocs:
        s = max(al.start_ms, a_ms)
        e = min(al.end_ms if al.end_ms is not None else b_ms, b_ms)
        if e <= s:
            continue
        js = max(al.start_ms, lo)
        je = min(al.end_ms if al.end_ms is not None else hi, hi)
        row = out[al.keys[group_by]]
        row.lines.add(tuple(sorted(al.keys.items())))
        row.allocated_h += al.fraction * (e - s) / HOUR_MS
        row.direct += direct_cost(price_at(book, al.gpu_model, al.pool), s, e, al.fraction)
        per = per_gpu.get(al.gpu, {})
        for m in range(s - s % MINUTE_MS, e, MINUTE_MS):
            if m in per:
                inside = al.fraction * overlap(s, e, m, m + MINUTE_MS) / HOUR_MS
                row.used_h += inside * per[m][0]
                row.measured_h += inside
        gpu_runs = runs.get(al.gpu, [])
        first = max(0, bisect.bisect_left(gpu_runs, (js,)) - 1)
        for rs, re_ in gpu_runs[first:]:
            if rs >= je:
                break
            if overlap(rs, re_, js, je) >= min_idle_s * 1000:
                row.idle_h += al.fraction * overlap(rs, re_, s, e) / HOUR_MS
    return dict(out)
