"""Energy cost: the GPUs' energy counters × the price book's price per kWh.

Energy is read from the counters the sources report (``energy_millijoules``: total energy
since the driver loaded; resets handled in ``sql/energy_by_job.sql``) and attributed to the
job whose label the samples carried, minute by minute — "per pod where the source can tell".
Minutes no job label covers go to ``__unallocated__``. The price is the effective-dated
``energy_kwh`` entry of the price book (pool ''), applied hour by hour. Money is ``Decimal``
and rounded once, with the same largest-remainder rounding as the ledger, so the rows add up
to the total to the cent. Energy cost is reported beside the GPU-hour ledger, not inside its
conservation statement (which is about GPU-hour capacity).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import polars as pl

from warehouse import queries
from warehouse.client import Warehouse
from warehouse.ledger.pricing import PriceBook, round_conserving
from warehouse.ledger.result import (
    GROUPINGS,
    UNALLOCATED,
    EnergyReport,
    EnergyRow,
    LedgerError,
)

_JOB_KEYS = ("tenant", "org", "project", "user", "queue", "workload_type")
_GPU_KEYS = ("gpu_model", "pool", "node")


def price_at(series: list[tuple[dt.datetime, Decimal]], t: dt.datetime) -> Decimal | None:
    price = None
    for effective, value in series:
        if effective > t:
            break
        price = value
    return price


def attribute(
    energy: pl.DataFrame,
    jobs: pl.DataFrame,
    gpus: pl.DataFrame,
    by: str,
    prices: list[tuple[dt.datetime, Decimal]],
) -> EnergyReport:
    """Group hourly energy rows by ``by`` and price them (pure: no I/O)."""
    if by not in GROUPINGS:
        raise LedgerError(f"--by {by!r} is not one of {', '.join(GROUPINGS)}")
    if by in _JOB_KEYS:
        frame = energy.join(
            jobs.select("cluster", "job_id", by), on=["cluster", "job_id"], how="left"
        )
    else:
        frame = energy.join(
            gpus.select("cluster", "gpu_uuid", by), on=["cluster", "gpu_uuid"], how="left"
        )
    frame = frame.with_columns(
        pl.when(pl.col("job_id") == "")
        .then(pl.lit(UNALLOCATED))
        .otherwise(pl.col(by).fill_null(""))
        .alias("_key")
    )
    per_hour = frame.group_by("_key", "hour").agg(pl.col("energy_kwh").sum())
    cost: dict[str, Decimal] = {}
    kwh: dict[str, float] = {}
    unpriced = 0.0
    for key, hour, amount in per_hour.iter_rows():
        kwh[key] = kwh.get(key, 0.0) + amount
        price = price_at(prices, hour)
        if price is None:
            unpriced += amount
            cost.setdefault(key, Decimal(0))
            continue
        cost[key] = cost.get(key, Decimal(0)) + Decimal(amount) * price
    total = sum(cost.values(), Decimal(0))
    rounded = round_conserving(cost, total)
    rows = tuple(EnergyRow(k or "(none)", kwh[k], rounded[k]) for k in sorted(kwh))
    return EnergyReport(rows, sum(kwh.values()), total.quantize(Decimal("0.01")), unpriced)


def energy_cost(
    wh: Warehouse,
    start: dt.datetime,
    until: dt.datetime,
    *,
    prices: PriceBook,
    group_by: str = "tenant",
    cluster: str = "",
) -> EnergyReport:
    """Energy (kWh) and its cost over [start, until), grouped by one of the ledger's keys
    (``until`` already cut at the present by the caller)."""
    params = {"cluster": cluster, "a": start, "b": until}
    energy = queries.run(wh, "energy_by_job", **params)
    jobs = queries.run(wh, "energy_job_attributes", **params)
    gpus = queries.run(wh, "energy_gpu_attributes", cluster=cluster)
    return attribute(energy, jobs, gpus, group_by, prices.kwh_series())
