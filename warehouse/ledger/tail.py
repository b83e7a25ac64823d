"""The live hours of the day under way, computed once for every page that asks.

Every ledger of a window reaching today reads its sealed days and today's sealed hours, then
computes the hours after the seal's cut live (:func:`~warehouse.ledger.seal.usage_with_seals`).
On a large fleet that live query is most of an answer's time, and a dashboard asks it of many
answers at once (the idle report, both halves of the month to date, the ledger, the tenants'
tree), each the same rows. A :class:`LiveTail` computes those rows once, for every cluster, as
of one instant, and keeps them until the next pass; a usage read whose live part is exactly
that span, as of exactly that instant, takes them (its own cluster's rows) instead of asking
the warehouse again. The GPUs idle in jobs' hands at that instant are kept alike, for every
cluster and tenant, and so are the fingerprints that a read checks its sealed days against
(:func:`~warehouse.ledger.seal.fingerprints`, this month's days and the month before's): data
that arrives late shows from the next pass on. Each cluster's moment at that instant (the jobs
waiting, what each tenant holds against its guarantee, its fragmentation, inventory and GPUs
not healthy: what the Overview's findings and the Capacity page show now, and what its waiting
jobs are judged against: the Queues page's "why waiting") is kept alike. The rows of those
days' seals are kept too, read once per seal (a seal's rows never change; a day sealed again
is read again at the next pass), so a month's ledger reads no sealed row from the warehouse:
about 45 MB per 30 days of the 1,024-GPU demo.

What pages make of these figures is kept with them too (:func:`kept_made`): a window's
priced lines, and its lines decided under a policy, which every tenant's view, grouping and job
list of that window takes its cents from, and its usage rows day by day (the idle report's),
are made once per pass by the first to ask and taken by the others. The server's ``warm``
makes those of the windows the pages open on right after each pass, before anyone asks.

Nothing else changes: the rows are those the live query gives for the same arguments (a
cluster's are the whole fleet's rows of that cluster, since ledger_usage.sql filters by cluster
on the allocations alone), so a caller whose "now" is the tail's own instant gets the figures
it would compute, sooner; any other caller (another instant, another span, other idle
settings, another warehouse) misses and computes live as before. The dashboard's server takes
the ledger's "now" from :meth:`LiveTail.now`, so its pages show the ledger's figures as of that
instant, at most one pass old (alerts, advice and telemetry read the clock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeVar

import polars as pl

from gpuledger_errors import InputError
from warehouse.analytics import capacity, fleet, moment, pending, queues, stranded
from warehouse.analytics import idle as idle_runs
from warehouse.analytics.fragmentation import FragmentationReport, fragmentation_at, over_range
from warehouse.analytics.tenancy import in_tenant
from warehouse.client import Warehouse, WarehouseError
from warehouse.ledger.result import IdleRule
from warehouse.ledger.seal import (
    KeptFingerprints,
    KeptSealedRows,
    LiveUsage,
    day_number,
    day_start,
    fingerprints,
    sealed_rows,
    seals,
    usage_with_seals,
)
from warehouse.ledger.usage import live_usage_frame
from warehouse.times import FIRST_INSTANT, next_month, same_days_before

log = logging.getLogger(__name__)

#: The days before today whose fingerprints a pass keeps: this month and the whole of the
#: one before, which the month over month reads.
FINGERPRINT_DAYS = 62

#: The most answers one pass keeps made from its figures (:func:`kept_made`): a bound on the
#: memory that the windows asked of one pass take (a month's priced lines of a large fleet
#: hold its usage rows), with room for those the server warms and a few more.
MADE_PER_PASS = 24

#: A kept tail older than this many passes is not offered (its refresher stopped or fell
#: behind): the pages then read the clock and compute live, rather than show old figures.
STALE_PASSES = 3


@dataclasses.dataclass(frozen=True)
class Tail:
    """The usage rows of every cluster as of ``now``, per span [start, end) of a live query a
    page asks: from today's sealed cut (``start``; midnight without one) to the next midnight,
    where a window up to today ends, and to the next month's first, where this month's ends;
    and the hours of the month before's day where its month over month cuts it
    (:func:`~warehouse.times.same_days_before`), when that is not a midnight."""

    warehouse: tuple[str, str]  # (dsn, database)
    idle: IdleRule
    start: dt.datetime
    rows: Mapping[tuple[dt.datetime, dt.datetime], pl.DataFrame]
    now: dt.datetime
    #: Every GPU idle in a job's hands at ``now`` (:func:`warehouse.analytics.idle.idle_now`
    #: of every cluster and tenant; one GPU's run never depends on who else is asked for).
    idle_now: pl.DataFrame
    #: :func:`~warehouse.ledger.seal.fingerprints` as of ``now`` of the
    #: :data:`FINGERPRINT_DAYS` whole days before today, and of today up to ``cut`` (its
    #: seal's, when it has one): what a usage read checks its sealed days against. A day's
    #: fingerprint depends on the day alone, never on the span asked, so one pass serves
    #: every window within these days.
    fingerprints: Mapping[int, tuple[int, int]]
    cut: dt.datetime | None
    #: Every cluster's usage rows per seal id of the latest seals of those days (today's
    #: sealed hours included), as :func:`~warehouse.ledger.seal.sealed_rows` read them.
    sealed_rows: Mapping[int, pl.DataFrame] = dataclasses.field(default_factory=dict)
    #: Every known cluster at ``now``.
    moments: Mapping[str, Moment] = dataclasses.field(default_factory=dict)
    #: The whole fleet's hours (:func:`~warehouse.analytics.fleet.fleet_hourly` of every
    #: cluster, pool and model) from ``hourly_since`` (midnight, :data:`FINGERPRINT_DAYS`
    #: before today) to ``now``.
    hourly: pl.DataFrame | None = None
    hourly_since: dt.datetime | None = None
    #: Per known cluster: its stranded capacity's rows of every hour from its first sealed
    #: day of those days (today, without one) to ``now``
    #: (:func:`~warehouse.analytics.stranded.stranded_rows`, the sealed settings), and
    #: where they start.
    stranded: Mapping[str, tuple[dt.datetime, pl.DataFrame, pl.DataFrame]] = dataclasses.field(
        default_factory=dict
    )
    #: Per known cluster: every job attempt of a window ending at the next midnight, as
    #: :func:`~warehouse.analytics.queues.attempts` gives them for the whole history.
    attempts: Mapping[str, pl.DataFrame] = dataclasses.field(default_factory=dict)
    #: What pages made from these figures, per what they asked (:func:`kept_made`).
    made: dict[Hashable, _Made] = dataclasses.field(default_factory=dict, compare=False, repr=False)


class _Made:
    """One answer made from a tail's figures: the first to ask makes it, the others wait."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: Any = _UNMADE


_UNMADE = object()
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Moment:
    """A cluster at one instant, as :mod:`warehouse.analytics.moment` tells it: the jobs
    waiting (:func:`~warehouse.analytics.moment.waiting`), held against guaranteed
    (:func:`~warehouse.analytics.moment.held_vs_guaranteed`) and its fragmentation
    (:func:`~warehouse.analytics.fragmentation.fragmentation_at` with its defaults), and what
    its waiting jobs are judged against (:func:`~warehouse.analytics.pending.queue_at`), and
    its inventory and GPUs not healthy (the Capacity page's)."""

    waiting: pl.DataFrame
    held: pl.DataFrame
    fragmentation: FragmentationReport
    queue: pending.Queue
    #: :func:`~warehouse.analytics.capacity.inventory` and
    #: :func:`~warehouse.analytics.capacity.unhealthy` at that instant, of every pool and model
    inventory: pl.DataFrame
    unhealthy: pl.DataFrame


def moment_of(wh: Warehouse, cluster: str, at: dt.datetime) -> Moment:
    """:class:`Moment` of ``cluster`` at ``at``, asked of the warehouse."""
    queue = pending.queue_at(wh, cluster, at)  # its waiting attempts are the moment's too
    return Moment(
        moment.waited(queue.waiting, at),
        moment.held_vs_guaranteed(wh, cluster, at),
        fragmentation_at(wh, cluster, at),
        queue,
        capacity.inventory(wh, cluster, at),
        capacity.unhealthy(wh, cluster, at),
    )


class LiveTail:
    """Today's live usage rows after its seal, recomputed every ``every_s`` seconds as of the
    clock (see the module's docstring)."""

    def __init__(
        self,
        wh: Warehouse,
        idle: IdleRule,
        *,
        every_s: float,
        clock: Callable[[], dt.datetime],
        warm: Callable[[dt.datetime], object] | None = None,
    ) -> None:
        if every_s <= 0:
            raise ValueError(f"a live tail is computed every positive time, not {every_s} s")
        self.wh, self.idle, self.every_s, self.clock = wh, idle, every_s, clock
        #: called with each pass's instant once it is offered, to make what the pages will
        #: ask of it (:func:`kept_made`) before they ask
        self.warm = warm
        self._tail: Tail | None = None
        self.served = 0  # reads (usage rows, GPUs idle now) answered from it
        self.fingerprints_served = 0  # sealed days' checks answered from it
        self.sealed_rows_served = 0  # reads of sealed days' rows answered from it
        self.made_served = 0  # answers made once from it and asked again

    def refresh(self) -> Tail:
        """Compute the tail as of the clock now, keep it and return it."""
        now = self.clock().replace(microsecond=0)  # a page shows the second it is as of
        d = day_number(now)
        latest = seals(self.wh, d - FINGERPRINT_DAYS, d + 1, self.idle)
        sealed = latest.get(d)
        cut = sealed[4] if sealed is not None else None
        if cut is not None and cut > now:
            cut = None
        start = cut if cut is not None else day_start(d)
        spans = {(start, day_start(d + 1)), (start, next_month(now))}
        before = same_days_before(now)
        if before != day_start(day_number(before)):
            spans.add((day_start(day_number(before)), before))
        rows = {(s, e): live_usage_frame(self.wh, s, e, now=now, idle=self.idle) for s, e in spans}
        idle_now = idle_runs.idle_now(
            self.wh,
            now,
            threshold_ratio=self.idle.threshold_ratio,
            min_duration_s=self.idle.min_duration_s,
        )
        prints = fingerprints(self.wh, d - FINGERPRINT_DAYS, d, self.idle)  # today's is cut
        if cut is not None:
            prints.update(fingerprints(self.wh, d, d + 1, self.idle, cut=cut))
        key = (self.wh.dsn, self.wh.database)
        held = self._tail.sealed_rows if self._tail is not None else {}
        kept = {}
        for day, seal in latest.items():
            found = held.get(seal[0])
            if found is None:
                found = sealed_rows(self.wh, day, seal)
            if found is not None:  # else it was sealed again meanwhile: the next pass reads it
                kept[seal[0]] = found
        clusters = fleet.known_clusters(self.wh)
        moments = {c: moment_of(self.wh, c, now) for c in clusters}
        since = day_start(d - FINGERPRINT_DAYS)
        hourly = fleet.fleet_hourly(self.wh, "", since, now)
        strand = {}
        for c in clusters:
            if (hours := self._stranded(c, d, now)) is not None:
                strand[c] = hours
        tried = {c: queues.attempts(self.wh, c, FIRST_INSTANT, day_start(d + 1)) for c in clusters}
        tail = Tail(
            key,
            self.idle,
            start,
            rows,
            now,
            idle_now,
            prints,
            cut,
            kept,
            moments,
            hourly,
            since,
            strand,
            tried,
        )
        self._tail = tail
        return tail

    def _stranded(
        self, cluster: str, d: int, now: dt.datetime
    ) -> tuple[dt.datetime, pl.DataFrame, pl.DataFrame] | None:
        """``cluster``'s stranded rows from its first sealed day of the kept days to ``now``
        (days before any seal would all be sampled live: not kept), or None at the midnight
        that starts the first (no hour to keep)."""
        sealed = stranded.seals(self.wh, cluster, d - FINGERPRINT_DAYS, d + 1)
        since = day_start(min(sealed)) if sealed else day_start(d)
        if since >= now:
            return None
        return (since, *stranded.stranded_rows(self.wh, cluster, since, now))

    def current(self) -> Tail | None:
        """The kept tail, unless it is :data:`STALE_PASSES` passes old or more."""
        tail = self._tail
        if tail is None:
            return None
        if self.clock() - tail.now >= dt.timedelta(seconds=STALE_PASSES * self.every_s):
            return None
        return tail

    def now(self) -> dt.datetime:
        """The instant the pages' figures are as of: the kept tail's, or the clock's when none
        is kept (the pages then compute their live part themselves)."""
        tail = self.current()
        return tail.now if tail is not None else self.clock()

    @contextlib.contextmanager
    def offered(self) -> Iterator[LiveTail]:
        """Offer the kept tail to usage reads (:func:`kept_rows`) inside the block."""
        with _lock:
            _offered.append(self)
        try:
            yield self
        finally:
            with _lock:
                _offered.remove(self)

    def start(self, stop: threading.Event) -> threading.Thread:
        """Refresh the tail every ``every_s`` and offer it, in a daemon thread until ``stop``
        is set; a failed pass is logged, the kept tail ages out and the pages compute live
        meanwhile."""

        def loop() -> None:
            with self.offered():
                wait = 0.0
                while not stop.wait(wait):
                    wait = self.every_s
                    try:
                        tail = self.refresh()
                        if self.warm is not None:
                            self.warm(tail.now)
                    # a part the warehouse refused, or an answer refused for what it holds
                    # (a cluster without inventory…), fails this pass alone
                    except (WarehouseError, InputError) as exc:
                        log.error("computing the live tail failed (next in %g s): %s", wait, exc)

        thread = threading.Thread(target=loop, name="ledger-live-tail", daemon=True)
        thread.start()
        return thread


_offered: list[LiveTail] = []
_lock = threading.Lock()


def kept_rows(
    wh: Warehouse,
    start: dt.datetime,
    end: dt.datetime,
    *,
    now: dt.datetime,
    idle: IdleRule,
    cluster: str,
) -> pl.DataFrame | None:
    """The live usage rows of [start, end) of ``cluster`` ('' for all) as of ``now`` from a
    kept tail computed with exactly these arguments, or None (compute them live)."""
    tail = _kept(wh, now, idle, lambda t: (start, end) in t.rows)
    if tail is None:
        return None
    rows = tail.rows[(start, end)]
    return rows.filter(pl.col("cluster") == cluster) if cluster else rows


def kept_fingerprints(wh: Warehouse, *, now: dt.datetime, idle: IdleRule) -> KeptFingerprints:
    """:func:`~warehouse.ledger.seal.fingerprints` of days [d0, d1) (the last cut at ``cut``)
    as of ``now`` from a kept tail as of exactly ``now`` that holds them all, or None (ask
    the warehouse): what :func:`~warehouse.ledger.seal.usage_with_seals` checks against."""

    def kept(d0: int, d1: int, cut: dt.datetime | None) -> dict[int, tuple[int, int]] | None:
        def holds(t: Tail) -> bool:
            today = day_number(t.now)
            whole_until = d1 if cut is None else d1 - 1
            if d0 < today - FINGERPRINT_DAYS or whole_until > today:
                return False
            return cut is None or (d1 - 1 == today and cut == t.cut)

        tail = _kept(wh, now, idle, holds, counter="fingerprints_served")
        if tail is None:
            return None
        return {d: fp for d, fp in tail.fingerprints.items() if d0 <= d < d1}

    return kept


def kept_sealed_rows(wh: Warehouse, *, idle: IdleRule) -> KeptSealedRows:
    """Every cluster's usage rows of the seals asked for, from an offered tail of ``wh`` under
    ``idle`` that holds them all (as of any instant: a seal's rows never change), or None."""

    def kept(ids: list[int]) -> pl.DataFrame | None:
        tail = _kept(
            wh,
            None,
            idle,
            lambda t: all(i in t.sealed_rows for i in ids),
            counter="sealed_rows_served",
        )
        if tail is None:
            return None
        return pl.concat([tail.sealed_rows[i] for i in ids], how="vertical_relaxed")

    return kept


def kept_moment(wh: Warehouse, at: dt.datetime, *, cluster: str) -> Moment | None:
    """:class:`Moment` of ``cluster`` at ``at`` from a kept tail as of exactly ``at`` (under
    any idle rule: a moment depends on none), or None (ask the warehouse)."""
    tail = _kept(wh, at, None, lambda t: cluster in t.moments)
    return tail.moments[cluster] if tail is not None else None


def kept_fleet_hourly(
    wh: Warehouse, start: dt.datetime, end: dt.datetime, *, now: dt.datetime
) -> pl.DataFrame | None:
    """:func:`~warehouse.analytics.fleet.fleet_hourly` of the whole fleet over [start, end)
    from a kept tail as of exactly ``now`` that holds those hours, or None (ask the
    warehouse). Exact: an hour's figures depend on the end asked only in an hour it cuts, so
    the tail's hours serve a window ending at its instant or at a whole hour before it."""

    def fits(t: Tail) -> bool:
        if t.hourly is None or t.hourly_since is None:
            return False
        whole = start == _hour(start) and (end == t.now or (end <= t.now and end == _hour(end)))
        return whole and t.hourly_since <= start

    tail = _kept(wh, now, None, fits)
    if tail is None or tail.hourly is None:
        return None
    return tail.hourly.filter((pl.col("ts") >= start) & (pl.col("ts") < end))


def kept_stranded(
    wh: Warehouse, cluster: str, start: dt.datetime, end: dt.datetime, *, now: dt.datetime
) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """:func:`~warehouse.analytics.stranded.stranded_over` of ``cluster`` over [start, end)
    (hourly, the sealed settings) from a kept tail as of exactly ``now`` that holds those
    hours, or None (ask the warehouse): its rows of the instants in [start, end), added up."""

    def fits(t: Tail) -> bool:
        held = t.stranded.get(cluster)
        return held is not None and held[0] <= start == _hour(start) and end <= t.now

    tail = _kept(wh, now, None, fits)
    if tail is None:
        return None
    _since, series, tenants = tail.stranded[cluster]
    inside = (pl.col("ts") >= start) & (pl.col("ts") < end)
    return over_range(series.filter(inside), tenants.filter(inside), end)


def kept_attempts(
    wh: Warehouse, cluster: str, start: dt.datetime, end: dt.datetime, *, now: dt.datetime
) -> pl.DataFrame | None:
    """:func:`~warehouse.analytics.queues.attempts` of ``cluster`` over [start, end) from a
    kept tail as of exactly ``now`` whose attempts end there too (a window up to today), or
    None (ask the warehouse)."""

    def fits(t: Tail) -> bool:
        return cluster in t.attempts and end == day_start(day_number(t.now) + 1)

    tail = _kept(wh, now, None, fits)
    if tail is None:
        return None
    return queues.attempts_in(tail.attempts[cluster], start, end)


def _hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def kept_idle_now(
    wh: Warehouse, at: dt.datetime, *, idle: IdleRule, cluster: str, tenant: str
) -> pl.DataFrame | None:
    """:func:`warehouse.analytics.idle.idle_now` at ``at`` of ``cluster`` and ``tenant`` (''
    for all) from a kept tail as of exactly ``at``, or None (ask the warehouse)."""
    tail = _kept(wh, at, idle, lambda t: True)
    if tail is None:
        return None
    found = tail.idle_now
    if cluster:
        found = found.filter(pl.col("cluster") == cluster)
    return found.filter(in_tenant(tenant)) if tenant else found


def kept_made(
    wh: Warehouse, now: dt.datetime, idle: IdleRule, key: Hashable, make: Callable[[], T]
) -> T:
    """``make()`` made once per kept tail of ``wh`` as of exactly ``now`` under ``idle``, and
    kept with it: the first to ask ``key`` of a pass makes it, whoever asks it again of that
    pass (another page, another viewer) takes it, and the next pass makes it anew. Without
    such a tail, or once a pass holds :data:`MADE_PER_PASS` answers, ``make()`` alone.

    ``key`` must name everything ``make`` depends on but the figures as of ``now``: it then
    answers what it would compute, as the tail's rows do (data that arrives after it was made
    shows from the next pass, like the rows). A ``make`` that raises keeps nothing.
    """
    found = _offered_tail(wh, now, idle, lambda t: True)
    if found is None:
        return make()
    source, tail = found
    with _lock:
        slot = tail.made.get(key)
        if slot is None and len(tail.made) < MADE_PER_PASS:
            slot = tail.made[key] = _Made()
    if slot is None:
        return make()
    with slot.lock:
        if slot.value is _UNMADE:
            slot.value = make()
        else:
            with _lock:
                source.made_served += 1
        return slot.value  # type: ignore[no-any-return]


def _kept(
    wh: Warehouse,
    now: dt.datetime | None,
    idle: IdleRule | None,
    fits: Callable[[Tail], bool],
    *,
    counter: str = "served",
) -> Tail | None:
    """The offered tail of ``wh`` as of ``now`` (None: any instant) under ``idle`` (None:
    any) that ``fits``, counted in its source's ``counter``."""
    found = _offered_tail(wh, now, idle, fits)
    if found is None:
        return None
    source, tail = found
    with _lock:
        setattr(source, counter, getattr(source, counter) + 1)
    return tail


def _offered_tail(
    wh: Warehouse,
    now: dt.datetime | None,
    idle: IdleRule | None,
    fits: Callable[[Tail], bool],
) -> tuple[LiveTail, Tail] | None:
    with _lock:
        offered = list(_offered)
    for source in offered:
        tail = source.current()
        if tail is None or tail.warehouse != (wh.dsn, wh.database):
            continue
        if idle is not None and tail.idle != idle:
            continue
        if now is not None and tail.now != now:
            continue
        if fits(tail):
            return source, tail
    return None


def usage_kept_first(
    wh: Warehouse,
    live: LiveUsage,
    start: dt.datetime,
    end: dt.datetime,
    *,
    now: dt.datetime,
    idle: IdleRule,
    cluster: str,
) -> pl.DataFrame:
    """:func:`~warehouse.ledger.seal.usage_with_seals` of [start, end) answering from a kept
    tail what it holds: the live spans (:func:`kept_rows`), the sealed days' fingerprints
    (:func:`kept_fingerprints`) and their rows (:func:`kept_sealed_rows`)."""

    def first_kept(s: dt.datetime, e: dt.datetime) -> pl.DataFrame:
        kept = kept_rows(wh, s, e, now=now, idle=idle, cluster=cluster)
        return kept if kept is not None else live(s, e)

    return usage_with_seals(
        wh,
        first_kept,
        start,
        end,
        now=now,
        cluster=cluster,
        idle=idle,
        prints=kept_fingerprints(wh, now=now, idle=idle),
        kept_rows=kept_sealed_rows(wh, idle=idle),
    )
