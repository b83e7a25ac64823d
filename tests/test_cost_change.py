"""Why cost changed, on a hand-computed pair of months.

month     H100 GPU-h  price   L40S GPU-h  price   direct
2026-10   10          2.00    10          1.00    30.00
2026-11   20          3.00     0          -       60.00     (H100 price rose on Nov 1)

H_A = 20, p̄_A = 0.5 x 2 + 0.5 x 1 = 1.50, H_B = 20
volume = (20 - 20) x 1.50                       =  0.00
mix    = 20 x ((1 - 0.5) x 2 + (0 - 0.5) x 1)   = 10.00
price  = 20 x (3 - 2)                           = 20.00   → +30.00 in all
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from collector.records import JobEvent, Price
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import LedgerError, Window
from warehouse.ledger.cost_change import decompose, month_window, why_cost

NOW = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)  # after both months: nothing is cut


def _job(ing: Ingestor, job: str, model: str, start: dt.datetime, hours: int) -> None:
    common = {
        "cluster": "c1",
        "tenant": "ml/vision",
        "org": "ml",
        "project": "vision",
        "gpu_model": model,
        "pool": "p1",
        "gpus_requested": 1.0,
        "node": "n1",
        "gpu_uuids": (f"{job}-gpu",),
    }
    ing.write_job_events(
        [
            JobEvent(start, job_id=job, event="started", **common),
            JobEvent(start + dt.timedelta(hours=hours), job_id=job, event="finished", **common),
        ]
    )


def test_hand_computed_decomposition(wh: Warehouse) -> None:
    ing = Ingestor(wh, 35)
    oct5, nov5 = dt.datetime(2026, 10, 5, tzinfo=dt.UTC), dt.datetime(2026, 11, 5, tzinfo=dt.UTC)
    _job(ing, "a", "H100", oct5, 10)
    _job(ing, "b", "L40S", oct5, 10)
    _job(ing, "c", "H100", nov5, 20)
    sep = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
    ing.write_config(
        prices=[
            Price(sep, "H100", "2.00"),
            Price(sep, "L40S", "1.00"),
            Price(dt.datetime(2026, 11, 1, tzinfo=dt.UTC), "H100", "3.00"),
        ]
    )
    change = why_cost(wh, "2026-11", cluster="c1", now=NOW)
    assert change.previous.total == Decimal("30.00") and change.current.total == Decimal("60.00")
    assert (change.volume, change.mix, change.price) == (Decimal(0), Decimal(10), Decimal(20))
    assert change.unallocated_share == 0  # no inventory: nothing unallocated to share
    assert change.volume + change.mix + change.price + change.unallocated_share == change.change
    text = change.to_text()
    assert text.startswith(
        "Cost of the cluster rose from 30.00 USD in 2026-10 to 60.00 USD in 2026-11 (+30.00 USD)"
    )
    assert text.splitlines()[1].split()[:2] == ["price", "+20.00"]  # biggest effect first
    # the jobs reported no samples: their hours are charged but unmeasured, and it says so
    assert (change.previous.unmeasured_gpu_hours, change.current.unmeasured_gpu_hours) == (20, 20)
    assert "note: 20.0 of 2026-11's 20.0 GPU-hours were held with no utilisation samples" in text
    doc = change.to_json()
    assert doc["current"]["unmeasured_gpu_hours"] == 20.0
    assert doc["because"] == {
        "volume": "0.00",
        "gpu_model_mix": "10.00",
        "price": "20.00",
        "unallocated_share": "0.00",
    }
    tenant = why_cost(wh, "2026-11", tenant="ml/vision", cluster="c1", now=NOW)
    assert tenant.change == Decimal(30)
    assert doc["currency"] == "USD" and doc["partial"] is False
    # a month not over yet is compared with the same first days of the month before: on
    # 11-06, November's first 5 days (job c, 20 h at 3.00) against October's first 5 days
    # (jobs a and b, 10 h each at 2.00 and 1.00)
    early = why_cost(wh, "2026-11", cluster="c1", now=dt.datetime(2026, 11, 6, tzinfo=dt.UTC))
    assert early.current.partial and early.current.days == 5 and early.previous.days == 5
    assert early.previous.total == Decimal("30.00") and early.current.total == Decimal("60.00")
    assert "2026-11 (first 5 of 30 days)" in early.to_text()
    assert "its first 5 days are compared with the first 5 days of 2026-10" in early.to_text()


def test_month_parsing() -> None:
    assert month_window("2026-12") == Window(
        dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        dt.datetime(2027, 1, 1, tzinfo=dt.UTC),
    )
    with pytest.raises(LedgerError, match="use YYYY-MM"):
        month_window("Nov")


def test_first_month_is_all_volume() -> None:
    from warehouse.ledger.cost_change import MonthCost

    empty = MonthCost("2026-10", {}, {}, Decimal(0), 0.0)
    now = MonthCost("2026-11", {"H100": 5.0}, {"H100": Decimal("10.00")}, Decimal("1.00"), 0.0)
    change = decompose("", empty, now)
    assert change.volume == Decimal("10.00") and change.unallocated_share == Decimal("1.00")
    assert change.volume + change.mix + change.price + change.unallocated_share == change.change


def test_an_org_is_all_of_its_projects_and_names_no_other(wh: Warehouse) -> None:
    """tenant=ORG sums its projects (2 x 10 H100-hours at 2.00 in November, none in
    October); a tenant that held nothing is told so without the others' names when asked."""
    ing = Ingestor(wh, 35)
    nov5 = dt.datetime(2026, 11, 5, tzinfo=dt.UTC)
    for job, tenant in (("v", "ml/vision"), ("n", "ml/nlp"), ("b", "bio/lab")):
        org, project = tenant.split("/")
        common = {
            "cluster": "c1",
            "tenant": tenant,
            "org": org,
            "project": project,
            "gpu_model": "H100",
            "pool": "p1",
            "gpus_requested": 1.0,
            "node": "n1",
            "gpu_uuids": (f"{job}-gpu",),
        }
        ing.write_job_events(
            [
                JobEvent(nov5, job_id=job, event="started", **common),
                JobEvent(nov5 + dt.timedelta(hours=10), job_id=job, event="finished", **common),
            ]
        )
    ing.write_config(prices=[Price(dt.datetime(2026, 9, 1, tzinfo=dt.UTC), "H100", "2.00")])
    org = why_cost(wh, "2026-11", tenant="ml", cluster="c1", now=NOW, idle_policy="none")
    assert org.current.total == Decimal("40.00") and org.current.hours == 20
    assert org.previous.total == 0 and org.change == Decimal("40.00")
    assert "tenant ml " in org.to_text() and "bio" not in org.to_text()
    with pytest.raises(LedgerError, match="bio/lab"):
        why_cost(wh, "2026-11", tenant="geo", cluster="c1", now=NOW)
    with pytest.raises(LedgerError, match="held no GPU") as refused:
        why_cost(wh, "2026-11", tenant="geo", cluster="c1", now=NOW, name_others=False)
    assert "bio" not in str(refused.value) and "ml/" not in str(refused.value)
