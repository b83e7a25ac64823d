"""The ledger, finer (org → project → user, and per job), against the ledger itself on a
simulated fleet: every breakdown adds up to the ledger's rows to the cent, under every idle
policy, and a job's direct cost is its GPU-hours times the price of its model."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal

import pytest
from conftest import fresh_database, ledger_between, simulate

from warehouse.client import Warehouse
from warehouse.ledger import (
    IdleRule,
    LedgerError,
    Window,
    cost_breakdown,
    job_costs,
    load_price_book,
)

NOW = dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC)
START, END = NOW - dt.timedelta(days=1), NOW
WINDOW = Window(START, END)


@pytest.fixture(scope="module")
def fleet(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=1, gpus=16, seed=5, now=NOW)
        yield wh


def _sums(rows: list[tuple[str, Decimal, Decimal, float]]) -> dict[str, tuple[Decimal, ...]]:
    acc: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    hours: dict[str, float] = defaultdict(float)
    for key, direct, shared, allocated in rows:
        acc[key][0] += direct
        acc[key][1] += shared
        hours[key] += allocated
    return {k: (v[0], v[1], Decimal(round(hours[k], 6))) for k, v in acc.items()}


def _ledger_sums(wh: Warehouse, by: str, policy: str) -> dict[str, tuple[Decimal, ...]]:
    ledger = ledger_between(wh, START, END, now=NOW, by=by, idle_policy=policy)
    return {
        r.key: (r.direct_cost, r.shared_cost, Decimal(round(r.allocated_gpu_hours, 6)))
        for r in ledger.rows
    }


@pytest.mark.parametrize("policy", ["weighted", "even", "none"])
def test_org_project_user_adds_up_to_every_grouping(fleet: Warehouse, policy: str) -> None:
    tree = cost_breakdown(
        fleet, WINDOW, keys=("tenant", "user"), now=NOW, idle_policy=policy, idle=IdleRule()
    )
    assert len({r.key[1] for r in tree.rows}) >= 3, "the fixture needs several users"
    for i, by in enumerate(("tenant", "user")):
        got = _sums(
            [
                (
                    r.key[i] or "(none)",
                    r.hours.direct_cost,
                    r.hours.shared_cost,
                    r.hours.allocated_gpu_hours,
                )
                for r in tree.rows
            ]
        )
        assert got == _ledger_sums(fleet, by, policy)


@pytest.mark.parametrize("policy", ["weighted", "none"])
def test_jobs_add_up_to_the_ledger_to_the_cent(fleet: Warehouse, policy: str) -> None:
    jobs = job_costs(fleet, WINDOW, now=NOW, idle_policy=policy, idle=IdleRule())
    assert len(jobs.rows) > 20 and any(j.running for j in jobs.rows)
    for by in ("tenant", "user"):
        got = _sums(
            [
                (
                    getattr(j, by) or "(none)",
                    j.hours.direct_cost,
                    j.hours.shared_cost,
                    j.hours.allocated_gpu_hours,
                )
                for j in jobs.rows
            ]
        )
        assert got == _ledger_sums(fleet, by, policy)
    whole = ledger_between(fleet, START, END, now=NOW, idle_policy=policy)
    assert jobs.total_cost == whole.totals.total_cost - whole.totals.unshared_cost


def test_a_jobs_direct_cost_is_its_hours_times_its_price(fleet: Warehouse) -> None:
    """Independent of the ledger's code: the simulator's prices are constant per model."""
    book = load_price_book(fleet)
    price = {e.gpu_model: e.price for e in book.entries if e.resource == "gpu_hour"}
    jobs = job_costs(fleet, WINDOW, now=NOW, idle=IdleRule())
    for j in jobs.rows:
        expected = Decimal(j.hours.allocated_gpu_hours) * price[j.gpu_model]
        assert abs(j.hours.direct_cost - expected) <= Decimal("0.02"), j
        assert START <= j.start <= j.end <= END
        assert j.hours.idle_gpu_hours is None or j.hours.idle_gpu_hours <= (
            j.hours.allocated_gpu_hours + 1e-9
        )


def test_a_tenants_jobs_are_its_own_with_the_whole_cents(fleet: Warehouse) -> None:
    everyone = job_costs(fleet, WINDOW, now=NOW, idle=IdleRule())
    org = everyone.rows[0].tenant.split("/")[0]
    mine = job_costs(fleet, WINDOW, now=NOW, idle=IdleRule(), tenant=org)
    assert mine.rows and all(j.tenant.startswith(org + "/") for j in mine.rows)
    assert list(mine.rows) == [j for j in everyone.rows if j.tenant.startswith(org + "/")]
    user = mine.rows[0].user
    theirs = job_costs(fleet, WINDOW, now=NOW, idle=IdleRule(), tenant=org, only={"user": user})
    assert {j.user for j in theirs.rows} == {user}
    with pytest.raises(LedgerError, match="colour"):
        job_costs(fleet, WINDOW, now=NOW, only={"colour": "red"})
