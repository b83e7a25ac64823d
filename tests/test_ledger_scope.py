"""A tenant's view of the ledger: its own lines, with the cents they carry in the whole ledger,
and nothing of anyone else's (what a `tenant:` user is shown everywhere)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import pytest
from conftest import fresh_database, ledger_between, simulate

from warehouse.client import Warehouse

NOW = dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC)
START, END = NOW - dt.timedelta(days=1), NOW


@pytest.fixture(scope="module")
def fleet(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=5, now=NOW)
        yield wh


@pytest.mark.parametrize("policy", ["weighted", "even", "none"])
def test_a_tenant_sees_its_lines_with_the_whole_cents(fleet: Warehouse, policy: str) -> None:
    whole = ledger_between(fleet, START, END, now=NOW, by="tenant", idle_policy=policy)
    tenants = [r.key for r in whole.rows if "/" in r.key]
    orgs = sorted({t.split("/")[0] for t in tenants})
    assert len(orgs) >= 2, "the fixture must hold several orgs for this test to mean anything"
    for org in orgs:
        mine = ledger_between(
            fleet, START, END, now=NOW, by="tenant", idle_policy=policy, tenant=org
        )
        assert mine.tenant == org
        assert [r.key for r in mine.rows] == [t for t in tenants if t.startswith(org + "/")]
        assert list(mine.rows) == [r for r in whole.rows if r.key.startswith(org + "/")]
        assert mine.totals.total_cost == sum((r.total_cost for r in mine.rows), Decimal(0))
        assert mine.totals.capacity_gpu_hours is None and mine.unallocated is None
        assert mine.totals.allocated_gpu_hours == pytest.approx(
            sum(r.allocated_gpu_hours for r in mine.rows)
        )
        doc = mine.to_json()
        assert doc["tenant"] == org and doc["totals"]["capacity_cost"] is None


def test_every_grouping_keeps_only_the_tenants_hours(fleet: Warehouse) -> None:
    whole = ledger_between(fleet, START, END, now=NOW, by="tenant")
    project = next(r.key for r in whole.rows if "/" in r.key)
    mine = whole.row(project)
    assert mine is not None
    for by in ("gpu_model", "pool", "node", "user", "queue"):
        scoped = ledger_between(fleet, START, END, now=NOW, by=by, tenant=project)
        assert scoped.totals.allocated_gpu_hours == pytest.approx(mine.allocated_gpu_hours)
        assert sum((r.total_cost for r in scoped.rows), Decimal(0)) == mine.total_cost
        unscoped = ledger_between(fleet, START, END, now=NOW, by=by)
        assert scoped.totals.allocated_gpu_hours < unscoped.totals.allocated_gpu_hours


def test_a_tenant_with_no_lines_sees_an_empty_ledger(fleet: Warehouse) -> None:
    nobody = ledger_between(fleet, START, END, now=NOW, tenant="no-such-org")
    assert nobody.rows == () and nobody.totals.total_cost == 0
    # a prefix of another org's name is not that org
    org = next(r.key for r in ledger_between(fleet, START, END, now=NOW, by="org").rows)
    assert ledger_between(fleet, START, END, now=NOW, by="org", tenant=org[:-1]).rows == ()


def test_only_keeps_one_pool_or_model_with_its_cents(fleet: Warehouse) -> None:
    by_model = ledger_between(fleet, START, END, now=NOW, by="gpu_model")
    model = by_model.rows[0]
    part = ledger_between(fleet, START, END, now=NOW, by="tenant", only={"gpu_model": model.key})
    assert part.totals.total_cost == model.total_cost
    assert part.totals.allocated_gpu_hours == pytest.approx(model.allocated_gpu_hours)
    assert part.to_json()["only"] == {"gpu_model": model.key}
    assert "alone" in part.conservation_note()
    with pytest.raises(Exception, match="colour"):
        ledger_between(fleet, START, END, now=NOW, only={"colour": "red"})


def test_several_groupings_split_each_row_to_the_cent(fleet: Warehouse) -> None:
    by_tenant = ledger_between(fleet, START, END, now=NOW, by="tenant")
    fine = ledger_between(fleet, START, END, now=NOW, by="tenant,user,gpu_model")
    assert fine.totals == by_tenant.totals
    assert all(len(r.parts) == 3 and r.key == "/".join(r.parts) for r in fine.rows)
    for row in by_tenant.rows:
        mine = [r for r in fine.rows if r.parts[0] == row.key]
        assert sum((r.total_cost for r in mine), Decimal(0)) == row.total_cost
        assert sum(r.allocated_gpu_hours for r in mine) == pytest.approx(row.allocated_gpu_hours)
    assert len(fine.rows) > len(by_tenant.rows)
    assert fine.to_json()["rows"][0]["parts"] == list(fine.rows[0].parts)
    with pytest.raises(Exception, match="without repeats"):
        ledger_between(fleet, START, END, now=NOW, by="tenant,tenant")
