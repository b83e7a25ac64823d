"""The ledger on a hand-computed cluster, written through the real ingest path.

Window 2026-11-02 00:00 → 10:00 UTC (10 h). Prices per GPU-hour: H100 $2.00, L40S $1.00,
A100 $1.50. Samples every minute. idle: under 5% for at least 30 min.

  GPU            capacity (GPU-h)            jobs (tenant, share, held in window)      util
  G1 H100        10 healthy                  j1 A 1.0 00:00-04:00 finished   4.0 GPU-h  0.5
  G2 H100        5 healthy + 5 unhealthy     j2 A 1.0 02:00-03:00 preempted  1.0 GPU-h  0.0
                 (Xid 79 at 05:00)
  G3 L40S        10 healthy                  j3 B 0.5 01:00-(running)        4.5 GPU-h  0.8
                                             j4 B 0.5 (23:00 day before)-02:00 1.0 GPU-h
  G4 A100 MIG 1  0.5 x 10 = 5 healthy        j5 C 0.5 00:00-10:00            5.0 GPU-h  0.3
  G4 A100 MIG 2  0.5 x 10 = 5 healthy        -

  capacity 40 GPU-h, $65.00 (20 x 2 + 10 x 1 + 10 x 1.5); allocated 15.5 GPU-h
  tenant  allocated  used                    idle   direct   weighted share   even    none
  A       5.0        4 x .5 + 0 = 2.0        1.0    10.00    18.26            14.00   -
  B       5.5        4.5x.8 + 1x.8 = 4.4     0.0     5.50    10.04            14.00   -
  C       5.0        5 x .3 = 1.5            0.0     7.50    13.70 (+1 cent)  14.00   -
  unallocated cost 42.00 (65 - 23); under `none` it is the __unallocated__ line.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import polars as pl
import pytest
from conftest import ledger_between, recent

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent, Price, Tenant
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import (
    UNALLOCATED,
    IdleRule,
    LedgerError,
    PriceBook,
    load_price_book,
    seal_days,
)

T0 = recent(dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.UTC))
T10 = T0 + dt.timedelta(hours=10)


def h(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


def _samples() -> pl.DataFrame:
    rows = []

    def gpu(uuid: str, model: str, util: float, holder, mig: str = "") -> None:
        for minute in range(-60, 11 * 60):
            t = T0 + dt.timedelta(minutes=minute)
            rows.append(
                (
                    t,
                    "c1",
                    "n1",
                    uuid,
                    0,
                    model,
                    "nvidia",
                    mig,
                    "",
                    util(t),
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    "",
                    "",
                    "",
                    holder(t),
                    "t",
                )
            )

    gpu("G1", "H100", lambda t: 0.5 if t < h(4) else 0.0, lambda t: "j1" if t < h(4) else "")
    gpu("G2", "H100", lambda t: 0.0, lambda t: "j2" if h(2) <= t < h(3) else "")
    gpu("G3", "L40S", lambda t: 0.8, lambda t: "j3" if t >= h(1) else "j4")
    gpu("G4", "A100", lambda t: 0.3, lambda t: "j5", mig="1")
    gpu("G4", "A100", lambda t: 0.0, lambda t: "", mig="2")
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


@pytest.fixture
def cluster(wh: Warehouse) -> Warehouse:
    ing = Ingestor(wh, 35, now=lambda: T10 + dt.timedelta(hours=2))
    before = T0 - dt.timedelta(days=1)
    inv = [
        GpuInventory(before, "c1", "p1", "n1", "G1", 0, "H100"),
        GpuInventory(before, "c1", "p1", "n1", "G2", 1, "H100"),
        GpuInventory(
            h(5),
            "c1",
            "p1",
            "n1",
            "G2",
            1,
            "H100",
            health="unhealthy",
            health_reason="Xid 79: GPU has fallen off the bus",
        ),
        GpuInventory(before, "c1", "p1", "n1", "G3", 2, "L40S"),
        GpuInventory(
            before, "c1", "p1", "n1", "G4", 3, "A100", mig_instance="1", capacity_fraction=0.5
        ),
        GpuInventory(
            before, "c1", "p1", "n1", "G4", 3, "A100", mig_instance="2", capacity_fraction=0.5
        ),
    ]
    assert ing.write_gpus(inv).quarantined_total == 0  # first: samples need their GPUs known
    assert ing.write_samples(_samples()).quarantined_total == 0
    tenants = {"A": ("ml", "vision"), "B": ("ml", "audio"), "C": ("web", "search")}

    def ev(
        t: dt.datetime,
        job: str,
        kind: str,
        tenant: str,
        gpu: str,
        model: str,
        share: float = 1.0,
        mig: str = "",
        started: dt.datetime | None = None,
    ) -> JobEvent:
        org, project = tenants[tenant]
        return JobEvent(
            t,
            "c1",
            job,
            kind,
            tenant=f"{org}/{project}",
            org=org,
            project=project,
            user=f"u{tenant}",
            pool="p1",
            queue=f"q{tenant}",
            gpu_model=model,
            gpus_requested=share,
            gpu_fraction=share,
            node="n1",
            gpu_uuids=(gpu,),
            mig_instances=(mig,) if mig else (),
            started_at=started,
            workload_type="training",
        )

    events = [
        ev(h(0), "j1", "started", "A", "G1", "H100"),
        ev(h(4), "j1", "finished", "A", "G1", "H100", started=h(0)),
        ev(h(2), "j2", "started", "A", "G2", "H100"),
        ev(h(3), "j2", "preempted", "A", "G2", "H100"),
        ev(h(1), "j3", "started", "B", "G3", "L40S", 0.5),
        ev(h(-1), "j4", "started", "B", "G3", "L40S", 0.5),
        ev(h(2), "j4", "finished", "B", "G3", "L40S", 0.5),
        ev(h(0), "j5", "started", "C", "G4", "A100", 0.5, mig="1"),
        ev(h(10), "j5", "finished", "C", "G4", "A100", 0.5, mig="1"),
    ]
    assert ing.write_job_events(events).quarantined_total == 0
    jan = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    ing.write_config(
        tenants=[Tenant(f"{o}/{p}", o, p) for o, p in tenants.values()],
        prices=[Price(jan, "H100", "2.00"), Price(jan, "L40S", "1.00"), Price(jan, "A100", "1.50")],
    )
    return wh


def ledger(wh: Warehouse, **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("start", T0)
    kw.setdefault("end", T10)
    return ledger_between(wh, kw.pop("start"), kw.pop("end"), cluster="c1", **kw)


def by_key(result) -> dict:  # type: ignore[no-untyped-def]
    return {r.key: r for r in result.rows}


@pytest.mark.parametrize(
    ("policy", "shared"),
    [
        ("weighted", {"ml/vision": "18.26", "ml/audio": "10.04", "web/search": "13.70"}),
        ("even", {"ml/vision": "14.00", "ml/audio": "14.00", "web/search": "14.00"}),
        ("none", {"ml/vision": "0.00", "ml/audio": "0.00", "web/search": "0.00"}),
    ],
)
def test_hand_computed_costs_under_every_policy(
    cluster: Warehouse, policy: str, shared: dict[str, str]
) -> None:
    result = ledger(cluster, idle_policy=policy)
    rows = by_key(result)
    direct = {"ml/vision": "10.00", "ml/audio": "5.50", "web/search": "7.50"}
    for tenant in direct:
        assert rows[tenant].direct_cost == Decimal(direct[tenant])
        assert rows[tenant].shared_cost == Decimal(shared[tenant])
    t = result.totals
    assert t.capacity_cost == Decimal("65.00")
    assert t.total_cost == Decimal("65.00") and result.conserved
    assert t.unshared_cost == (Decimal("42.00") if policy == "none" else Decimal(0))
    assert UNALLOCATED not in rows
    if policy == "none":
        line = result.unallocated
        assert line is not None and line.cost == Decimal("42.00")
        assert line.gpu_hours == pytest.approx(24.5) and line.name == "unallocated capacity"
    else:
        assert result.unallocated is None


def test_an_org_is_the_sum_of_its_projects_under_every_policy(cluster: Warehouse) -> None:
    """Shares are decided per tenant and rounded once, so every grouping adds up the same
    lines: no view changes what an org owes, and direct cost never depends on the policy."""
    direct_by_policy = set()
    for policy in ("weighted", "even", "none"):
        tenants = by_key(ledger(cluster, idle_policy=policy))
        orgs = by_key(ledger(cluster, by="org", idle_policy=policy))
        for org in ("ml", "web"):
            mine = [r for k, r in tenants.items() if k.startswith(org + "/")]
            for money in ("direct_cost", "shared_cost", "total_cost"):
                assert getattr(orgs[org], money) == sum(
                    (getattr(r, money) for r in mine), Decimal(0)
                ), (policy, org, money)
        direct_by_policy.add(tuple(sorted((k, r.direct_cost) for k, r in tenants.items())))
        models = ledger(cluster, by="gpu_model", idle_policy=policy)
        assert models.totals.total_cost == Decimal("65.00") and models.conserved
    assert len(direct_by_policy) == 1
    # even: each of the three tenants carries 14.00, so the org of two carries 28.00
    assert by_key(ledger(cluster, by="org", idle_policy="even"))["ml"].shared_cost == Decimal(
        "28.00"
    )


def test_hours_without_a_price_are_counted_and_said(cluster: Warehouse) -> None:
    result = ledger(cluster, prices=PriceBook(()))
    assert result.totals.unpriced_gpu_hours == pytest.approx(15.5)
    assert result.totals.total_cost == Decimal("0.00") == result.totals.capacity_cost
    assert {(u.gpu_model, round(u.allocated_gpu_hours, 6)) for u in result.unpriced} == {
        ("H100", 5.0),
        ("L40S", 5.5),
        ("A100", 5.0),
    }
    note = result.conservation_note()
    assert "have no price" in note and "add them to the price book" in note
    assert all(r.unpriced_gpu_hours == r.allocated_gpu_hours for r in result.rows)


def test_hand_computed_hours(cluster: Warehouse) -> None:
    result = ledger(cluster)
    rows = by_key(result)
    expect = {
        "ml/vision": (5.0, 2.0, 1.0),
        "ml/audio": (5.5, 4.4, 0.0),
        "web/search": (5.0, 1.5, 0.0),
    }
    for tenant, (alloc, used, idle) in expect.items():
        r = rows[tenant]
        assert r.allocated_gpu_hours == pytest.approx(alloc, abs=1e-9)
        assert r.used_gpu_hours == pytest.approx(used, abs=1e-6)
        assert r.idle_gpu_hours == pytest.approx(idle, abs=1e-9)
    t = result.totals
    assert t.capacity_gpu_hours == pytest.approx(40.0)
    assert t.healthy_gpu_hours == pytest.approx(35.0)
    assert t.unhealthy_gpu_hours == pytest.approx(5.0)
    assert t.allocated_gpu_hours == pytest.approx(15.5)
    assert t.unallocated_gpu_hours == pytest.approx(24.5)


@pytest.mark.parametrize(
    "by", ["org", "user", "gpu_model", "pool", "node", "queue", "workload_type", "project"]
)
def test_every_grouping_conserves(cluster: Warehouse, by: str) -> None:
    for policy in ("weighted", "even", "none"):
        result = ledger(cluster, by=by, idle_policy=policy)
        assert result.conserved, (by, policy)
        assert sum(r.allocated_gpu_hours for r in result.rows) == pytest.approx(15.5)
    models = by_key(ledger(cluster, by="gpu_model", idle_policy="none"))
    assert models["H100"].direct_cost == Decimal("10.00")
    assert models["L40S"].direct_cost == Decimal("5.50")


def test_splitting_the_window_changes_nothing(cluster: Warehouse) -> None:
    whole = by_key(ledger(cluster))
    halves = [
        by_key(ledger(cluster, start=T0, end=h(2.5))),
        by_key(ledger(cluster, start=h(2.5), end=T10)),
    ]
    for tenant, row in whole.items():
        parts = [p[tenant] for p in halves if tenant in p]
        assert sum(p.allocated_gpu_hours for p in parts) == pytest.approx(row.allocated_gpu_hours)
        assert sum(p.used_gpu_hours for p in parts) == pytest.approx(row.used_gpu_hours)
        assert sum(p.idle_gpu_hours for p in parts) == pytest.approx(row.idle_gpu_hours)
        assert sum(p.direct_cost for p in parts) == row.direct_cost


def test_raw_and_rollup_agree(cluster: Warehouse) -> None:
    rollup, raw = by_key(ledger(cluster)), by_key(ledger(cluster, source="raw"))
    for tenant, row in rollup.items():
        assert raw[tenant].used_gpu_hours == pytest.approx(row.used_gpu_hours)
        assert raw[tenant].idle_gpu_hours == pytest.approx(row.idle_gpu_hours)
        assert raw[tenant].total_cost == row.total_cost


def test_idle_needs_the_minimum_duration(cluster: Warehouse) -> None:
    # j2's hour at 0% is idle with a 30-min minimum, not with a 2-hour one
    assert by_key(ledger(cluster, idle_min_duration_s=7200))["ml/vision"].idle_gpu_hours == 0.0
    # with a threshold above 0.5, j1's hours at 50% count as idle too
    loose = by_key(ledger(cluster, idle_threshold_ratio=0.6))["ml/vision"]
    assert loose.idle_gpu_hours == pytest.approx(5.0)


def test_price_change_mid_window(cluster: Warehouse) -> None:
    Ingestor(cluster, 35).write_config(prices=[Price(h(2), "H100", "4.00", pool="p1")])
    rows = by_key(ledger(cluster, idle_policy="none"))
    # j1: 2 h at $2 + 2 h at $4 (the pool's own price from 02:00); j2: 1 h at $4
    assert rows["ml/vision"].direct_cost == Decimal("16.00")
    result = ledger(cluster, idle_policy="weighted")
    assert result.conserved
    # capacity: H100 20 GPU-h, 4 at $2 + 16 at $4
    assert result.totals.capacity_cost == Decimal("8.00") + Decimal("64.00") + 10 + 15


def test_hours_without_samples_are_unmeasured(cluster: Warehouse) -> None:
    """j6 (tenant C) holds G5 06:00-10:00 but G5 reported only 07:00-09:00, at 50%: 1.0 used,
    0 idle, and 2.0 unmeasured (neither used nor idle is known there), from raw samples, the
    rollup and sealed days alike; every other job's hours were sampled."""
    ing = Ingestor(cluster, 35, now=lambda: T10 + dt.timedelta(hours=2))
    ing.write_gpus([GpuInventory(T0 - dt.timedelta(days=1), "c1", "p1", "n1", "G5", 4, "H100")])
    minutes = [h(7) + dt.timedelta(minutes=m) for m in range(120)]
    none10 = [None] * 10
    rows = [
        (t, "c1", "n1", "G5", 4, "H100", "nvidia", "", "", 0.5, *none10, "", "", "", "j6", "t")
        for t in minutes
    ]
    assert (
        ing.write_samples(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")).quarantined_total
        == 0
    )
    j6 = dict(tenant="web/search", org="web", project="search", pool="p1", gpu_model="H100")
    j6 |= dict(gpus_requested=1.0, node="n1", gpu_uuids=("G5",))
    ing.write_job_events(
        [
            JobEvent(h(6), "c1", "j6", "started", **j6),
            JobEvent(h(10), "c1", "j6", "finished", started_at=h(6), **j6),
        ]
    )
    for source in ("rollup", "raw"):
        result = ledger(cluster, source=source)
        rows_by = by_key(result)
        c = rows_by["web/search"]
        assert c.allocated_gpu_hours == pytest.approx(9.0)  # j5 5.0 + j6 4.0
        assert c.used_gpu_hours == pytest.approx(1.5 + 1.0)
        assert c.unmeasured_gpu_hours == pytest.approx(2.0), source
        assert rows_by["ml/vision"].unmeasured_gpu_hours == pytest.approx(0.0, abs=1e-9)
        assert result.totals.unmeasured_gpu_hours == pytest.approx(2.0)
    by_project = by_key(ledger(cluster, by="project"))
    assert by_project["search"].unmeasured_gpu_hours == pytest.approx(2.0)
    # the whole day, computed live and then from its seal
    day = {"end": T0 + dt.timedelta(days=1)}
    live = by_key(ledger(cluster, sealed=False, **day))["web/search"].unmeasured_gpu_hours
    assert seal_days(cluster, idle=IdleRule(), now=T10 + dt.timedelta(days=2)).sealed
    sealed = by_key(ledger(cluster, **day))["web/search"].unmeasured_gpu_hours
    assert sealed == pytest.approx(live) and live >= 2.0


def test_ledger_json_shape(cluster: Warehouse) -> None:
    doc = ledger(cluster).to_json()
    assert set(doc["rows"][0]) == {
        "key",
        "allocated_gpu_hours",
        "used_gpu_hours",
        "idle_gpu_hours",
        "unmeasured_gpu_hours",
        "direct_cost",
        "shared_cost",
        "total_cost",
        "unpriced_gpu_hours",
    }
    assert doc["totals"]["capacity_cost"] == "65.00" and doc["totals"]["total_cost"] == "65.00"
    assert {
        "capacity_gpu_hours",
        "allocated_gpu_hours",
        "used_gpu_hours",
        "idle_gpu_hours",
        "unallocated_gpu_hours",
        "stranded_gpu_hours",
        "capacity_cost",
        "unshared_cost",
        "total_cost",
    } <= set(doc["totals"])


def test_a_price_book_in_another_currency_is_refused(cluster: Warehouse) -> None:
    """Prices are never converted: a ledger kept in EUR over a book in USD says so."""
    assert load_price_book(cluster, "USD").currency == "USD"
    with pytest.raises(LedgerError, match=r"prices are in USD, but ledger\.currency is 'EUR'"):
        load_price_book(cluster, "EUR")


def test_censored_holds_are_those_whose_latest_version_is_censored(cluster: Warehouse) -> None:
    """j7 is cut at 08:00 when its source stopped observing; j8 was cut at 07:00 too, then its
    real end (06:30, before the cut) arrived late and replaced that version of its interval:
    only j7 is told as censored."""
    ing = Ingestor(cluster, 35, now=lambda: T10 + dt.timedelta(hours=2))
    ing.write_gpus([GpuInventory(T0 - dt.timedelta(days=1), "c1", "p1", "n1", "G5", 4, "H100")])
    common = dict(tenant="web/search", org="web", project="search", pool="p1", gpu_model="H100")
    common |= dict(gpus_requested=1.0, node="n1", gpu_uuids=("G5",))
    events = [
        JobEvent(h(6), "c1", "j7", "started", **common),
        JobEvent(h(8), "c1", "j7", "censored", started_at=h(6), **common),
        JobEvent(h(6), "c1", "j8", "started", **common),
        JobEvent(h(7), "c1", "j8", "censored", started_at=h(6), **common),
    ]
    assert ing.write_job_events(events).quarantined_total == 0
    late = JobEvent(h(6.5), "c1", "j8", "finished", started_at=h(6), **common)
    assert ing.write_job_events([late]).quarantined_total == 0
    (cut,) = ledger(cluster).censored
    assert (cut.cluster, cut.allocations, cut.observation_end) == ("c1", 1, h(8))
    assert cut.gpu_hours == pytest.approx(2.0)
