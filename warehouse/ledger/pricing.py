"""Pricing: the effective-dated price book resolved into segments, GPU-time priced over them,
unallocated cost shared under the idle policy, and money rounded once, conserving every cent.

Pure functions over frames and Decimals; only :func:`load_price_book` reads the warehouse.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_FLOOR, Decimal
from typing import TypeVar

import polars as pl

from warehouse import queries
from warehouse.client import Warehouse
from warehouse.ledger.result import IdlePolicy, LedgerError

CENT = Decimal("0.01")
_MS_PER_HOUR = Decimal(3_600_000)


@dataclasses.dataclass(frozen=True)
class PriceEntry:
    """One version of one price: ``resource`` (gpu_hour or energy_kwh) of ``gpu_model`` in
    ``pool`` ('' for every pool) costs ``price`` from ``effective_from`` on."""

    resource: str
    gpu_model: str
    pool: str
    effective_from: dt.datetime
    price: Decimal
    currency: str


@dataclasses.dataclass(frozen=True)
class PriceBook:
    """The price book a ledger is priced with; ``default_currency`` names the money when the
    book has no GPU-hour prices at all."""

    entries: tuple[PriceEntry, ...]
    default_currency: str = "USD"

    @property
    def currency(self) -> str:
        found = {e.currency for e in self.entries if e.resource == "gpu_hour"}
        if len(found) > 1:
            raise LedgerError(
                f"the price book mixes currencies {sorted(found)}: convert them "
                "to one before computing a ledger"
            )
        return found.pop() if found else self.default_currency

    def price_at(self, gpu_model: str, pool: str, at: dt.datetime) -> Decimal | None:
        """The price of one GPU-hour of ``gpu_model`` in ``pool`` at ``at`` (the pool's own
        entries, else the every-pool ones, as :func:`price_segments` resolves them); None when
        the book has none."""
        segments = price_segments(self, [(gpu_model, pool)], at, at + dt.timedelta(seconds=1))
        return segments[0].price if segments else None

    def kwh_series(self) -> list[tuple[dt.datetime, Decimal]]:
        """The ``energy_kwh`` price series (pool '' entries), oldest first."""
        return sorted(
            (e.effective_from, e.price)
            for e in self.entries
            if e.resource == "energy_kwh" and not e.pool
        )


def load_price_book(wh: Warehouse, currency: str = "USD") -> PriceBook:
    """The warehouse's price book (the latest version of each entry), whose GPU-hour prices
    must be in ``currency`` (the ledger's): prices are never converted, so a book in another
    currency is an error, not a silent relabelling."""
    entries = tuple(
        PriceEntry(
            r["resource"],
            r["gpu_model"],
            r["pool"],
            r["effective_from"],
            Decimal(r["price"]),
            r["currency"],
        )
        for r in queries.run(wh, "ledger_prices").iter_rows(named=True)
    )
    book = PriceBook(entries, currency)
    if book.currency != currency:
        raise LedgerError(
            f"the price book's GPU-hour prices are in {book.currency}, but ledger.currency is "
            f'{currency!r}: set ledger.currency = "{book.currency}", or load a price book in '
            f"{currency} (prices are never converted)"
        )
    return book


@dataclasses.dataclass(frozen=True)
class PriceSegment:
    """The price of one GPU-hour of ``gpu_model`` in ``pool`` over [start, end)."""

    gpu_model: str
    pool: str
    start: dt.datetime
    end: dt.datetime
    price: Decimal
    currency: str


def price_segments(
    book: PriceBook,
    pairs: Iterable[tuple[str, str]],
    start: dt.datetime,
    end: dt.datetime,
) -> list[PriceSegment]:
    """Resolve the price book into segments for each (gpu_model, pool) in ``pairs``.

    A pool's own entries apply from the first of them on; before that, and for pools without
    entries, the entries with pool '' apply. An entry lasts until the next one of its series.
    """
    series: dict[tuple[str, str], list[tuple[dt.datetime, Decimal, str]]] = defaultdict(list)
    for entry in book.entries:
        if entry.resource == "gpu_hour":
            series[(entry.gpu_model, entry.pool)].append(
                (entry.effective_from, entry.price, entry.currency)
            )
    out: list[PriceSegment] = []
    for model, pool in sorted(set(pairs)):
        generic = sorted(series.get((model, ""), []))
        own = sorted(series.get((model, pool), [])) if pool else []
        cut = own[0][0] if own else None
        entries = [e for e in generic if cut is None or e[0] < cut] + own
        for i, (eff, price, currency) in enumerate(entries):
            seg_end = entries[i + 1][0] if i + 1 < len(entries) else end
            s, e = max(eff, start), min(seg_end, end)
            if s < e:
                out.append(PriceSegment(model, pool, s, e, price, currency))
    return out


def _segments_frame(segments: Sequence[PriceSegment]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "gpu_model": [s.gpu_model for s in segments],
            "pool": [s.pool for s in segments],
            "seg_start": [s.start for s in segments],
            "seg_end": [s.end for s in segments],
            "seg": list(range(len(segments))),
        },
        schema={
            "gpu_model": pl.String,
            "pool": pl.String,
            "seg_start": pl.Datetime("ms", "UTC"),
            "seg_end": pl.Datetime("ms", "UTC"),
            "seg": pl.Int64,
        },
    )


def priced_ms(
    frame: pl.DataFrame,
    segments: Sequence[PriceSegment],
    s: str,
    e: str,
    weight: str,
    keys: Sequence[str],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split the [s, e) intervals of ``frame`` (with a ``_row`` index) over price segments:
    (GPU-ms per key and segment, GPU-ms per key that no segment prices)."""
    joined = frame.join(_segments_frame(segments), on=["gpu_model", "pool"], how="left")
    clipped = joined.with_columns(
        pl.max_horizontal(s, "seg_start").alias("_s"), pl.min_horizontal(e, "seg_end").alias("_e")
    )
    overlap = (pl.col("_e") - pl.col("_s")).dt.total_milliseconds().clip(lower_bound=0)
    span = (pl.col(e) - pl.col(s)).dt.total_milliseconds()
    # the weight in the segment; an empty interval (a window that starts now or later is cut
    # to [start, start)) weighs nothing, rather than 0/0
    share = pl.when(span > 0).then(pl.col(weight) * overlap / span).otherwise(0.0)
    priced = (
        clipped.filter(pl.col("seg").is_not_null())
        .with_columns(share.alias("_ms"))
        .group_by([*keys, "seg"])
        .agg(pl.col("_ms").sum())
    )
    # a row that no segment prices has a null seg: it is unpriced whole
    in_segment = pl.when(pl.col("seg").is_not_null()).then(share)
    covered = clipped.group_by([*keys, "_row"]).agg(
        (pl.col(weight).first() - in_segment.fill_null(0).sum()).alias("_ms")
    )
    unpriced = covered.group_by(keys).agg(pl.col("_ms").sum())
    return priced, unpriced


def ms_to_hours(ms: float) -> Decimal:
    return Decimal(ms) / _MS_PER_HOUR


def share_unallocated(
    direct: Mapping[str, Decimal], unallocated: Decimal, policy: IdlePolicy
) -> tuple[dict[str, Decimal], Decimal]:
    """Each key's share of ``unallocated`` under ``policy``, and what stays unshared.

    Exact (unrounded) Decimals; :func:`round_conserving` rounds them once.
    """
    keys = sorted(direct)
    if policy is IdlePolicy.NONE or not keys:
        return dict.fromkeys(keys, Decimal(0)), unallocated
    if policy is IdlePolicy.EVEN:
        each = unallocated / len(keys)
        return dict.fromkeys(keys, each), Decimal(0)
    total = sum(direct.values(), Decimal(0))
    if total == 0:  # nothing to weight by: fall back to even shares
        return share_unallocated(direct, unallocated, IdlePolicy.EVEN)
    return {k: unallocated * direct[k] / total for k in keys}, Decimal(0)


#: A line's key: a tenant's name, or a line number; sortable, so ties are broken the same way.
Key = TypeVar("Key", str, int)


def round_conserving(amounts: Mapping[Key, Decimal], total: Decimal) -> dict[Key, Decimal]:
    """Round each amount to cents so that they sum to ``total`` rounded to cents.

    Largest remainder: floor everything, then hand the missing cents to the largest fractional
    parts (ties broken by key, so the result is deterministic).
    """
    target = total.quantize(CENT)
    floors = {k: v.quantize(CENT, rounding=ROUND_FLOOR) for k, v in amounts.items()}
    missing = int((target - sum(floors.values(), Decimal(0))) / CENT)
    order = sorted(amounts, key=lambda k: (-(amounts[k] - floors[k]), k))
    if missing < 0:
        order = sorted(amounts, key=lambda k: (amounts[k] - floors[k], k))
    step = CENT if missing >= 0 else -CENT
    for k in order[: abs(missing)]:
        floors[k] += step
    return floors
