"""Energy cost on a hand-computed GPU.

One GPU at a steady 360 W, samples every 10 s from 23:55 (day before) to 03:00:

  hour   job label   energy (kWh)                                   price/kWh   cost
  00:00  j1 (A)      0.36                                           0.10        0.0360
  01:00  j1 (A)      0.36 x 3590/3600 = 0.359 (counter reset at     0.10        0.0359
                     01:30: the 10 s before the reset are lost)
  02:00  -           0.36                                           0.20        0.0720
  tenant ml/vision 0.719 kWh $0.07; __unallocated__ 0.36 kWh $0.07; total $0.14
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import polars as pl
import pytest
from conftest import recent

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent, Price
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import UNALLOCATED, load_price_book
from warehouse.ledger.energy import energy_cost

T0 = recent(dt.datetime(2026, 11, 2, tzinfo=dt.UTC))


def test_hand_computed_energy_cost(wh: Warehouse) -> None:
    rows, counter, reset = [], 0, T0 + dt.timedelta(minutes=90)
    t = T0 - dt.timedelta(minutes=5)
    while t < T0 + dt.timedelta(hours=3):
        if t == reset:
            counter = 0  # the driver reloaded
        holder = "j1" if t < T0 + dt.timedelta(hours=2) else ""
        rows.append(
            (
                t,
                "c1",
                "n1",
                "G1",
                0,
                "H100",
                "nvidia",
                "",
                "",
                0.5,
                None,
                None,
                None,
                None,
                360.0,
                counter,
                None,
                None,
                None,
                None,
                "",
                "",
                "",
                holder,
                "t",
            )
        )
        counter += 360 * 10 * 1000  # 360 W for 10 s, in mJ
        t += dt.timedelta(seconds=10)
    ing = Ingestor(wh, 35, now=lambda: T0 + dt.timedelta(hours=4))
    ing.write_gpus([GpuInventory(T0 - dt.timedelta(days=1), "c1", "p1", "n1", "G1", 0, "H100")])
    ing.write_samples(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"))
    job = {
        "cluster": "c1",
        "job_id": "j1",
        "tenant": "ml/vision",
        "org": "ml",
        "project": "vision",
        "gpu_uuids": ("G1",),
        "gpu_model": "H100",
        "pool": "p1",
    }
    ing.write_job_events(
        [
            JobEvent(T0 - dt.timedelta(minutes=5), event="started", **job),
            JobEvent(T0 + dt.timedelta(hours=2), event="finished", **job),
        ]
    )
    long_ago = T0 - dt.timedelta(days=30)
    ing.write_config(
        prices=[
            Price(long_ago, "", "0.10", resource="energy_kwh"),
            Price(T0 + dt.timedelta(hours=2), "", "0.20", resource="energy_kwh"),
        ]
    )

    book = load_price_book(wh)
    report = energy_cost(wh, T0, T0 + dt.timedelta(hours=3), cluster="c1", prices=book)
    rows_by = report.by_key()
    assert rows_by["ml/vision"].energy_kwh == pytest.approx(0.36 + 0.36 * 3590 / 3600)
    assert rows_by[UNALLOCATED].energy_kwh == pytest.approx(0.36)
    assert rows_by["ml/vision"].energy_cost == Decimal("0.07")
    assert rows_by[UNALLOCATED].energy_cost == Decimal("0.07")
    assert report.energy_cost == Decimal("0.14") == sum(r.energy_cost for r in report.rows)
    assert report.unpriced_kwh == 0
    by_model = energy_cost(
        wh, T0, T0 + dt.timedelta(hours=3), cluster="c1", group_by="gpu_model", prices=book
    ).by_key()
    assert by_model["H100"].energy_kwh == pytest.approx(0.719)
