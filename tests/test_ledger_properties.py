"""Properties of the ledger over random clusters (hypothesis)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import polars as pl
import pytest
from conftest import ledger_between, recent, simulate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warehouse.ledger import GROUPINGS, IdlePolicy, IdleRule, Window
from warehouse.ledger.compute import build_ledger, decide_lines
from warehouse.ledger.pricing import PriceSegment, round_conserving

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
MODELS = ("H100", "A100", "L40S")
POOLS = ("p1", "p2")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame, list[PriceSegment]]:
    """A random cluster: GPUs with capacity over the window, jobs holding shares of them."""
    hours = draw(st.integers(1, 72))
    end = T0 + dt.timedelta(hours=hours)
    gpus = draw(
        st.lists(st.tuples(st.sampled_from(MODELS), st.sampled_from(POOLS)), min_size=1, max_size=8)
    )
    cap_rows, use_rows = [], []
    for i, (model, pool) in enumerate(gpus):
        cap_rows.append(
            {
                "cluster": "c",
                "pool": pool,
                "node": f"n{i // 4}",
                "gpu_uuid": f"G{i}",
                "mig_instance": "",
                "gpu_model": model,
                "health": draw(st.sampled_from(["healthy", "unhealthy"])),
                "cs": T0,
                "ce": end,
                "capacity_gpu_ms": float(hours * 3_600_000),
            }
        )
        # jobs on this GPU never hold more than the whole of it at once: shares split 1.0
        for share in draw(st.sampled_from([[1.0], [0.5, 0.5], [0.25, 0.75], [0.5], []])):
            a = draw(st.integers(0, hours * 60 - 1))
            b = draw(st.integers(a + 1, hours * 60))
            s, e = T0 + dt.timedelta(minutes=a), T0 + dt.timedelta(minutes=b)
            util = draw(st.floats(0, 1))
            measured = draw(st.sampled_from([0.0, 0.5, 1.0]))  # the part with samples
            use_rows.append(
                {
                    "cluster": "c",
                    "pool": pool,
                    "node": f"n{i // 4}",
                    "gpu_uuid": f"G{i}",
                    "mig_instance": "",
                    "gpu_model": model,
                    "job_id": f"j{len(use_rows)}",
                    "attempt": 0,
                    "tenant": (tenant := draw(st.sampled_from(["a/x", "a/y", "b/z"]))),
                    "org": tenant.split("/")[0],
                    "project": tenant.split("/")[1],
                    "user": draw(st.sampled_from(["u1", "u2"])),
                    "queue": "q",
                    "workload_type": "training",
                    "end_event": "",
                    "fraction": share,
                    "s": s,
                    "e": e,
                    "allocated_gpu_ms": share * (b - a) * 60_000,
                    "used_gpu_hours": share * (b - a) / 60 * util * measured,
                    "measured_gpu_hours": share * (b - a) / 60 * measured,
                    "idle_gpu_hours": 0.0,
                }
            )
    prices = []
    for model in MODELS:
        cents = draw(st.integers(1, 100_000))
        prices.append(PriceSegment(model, "p1", T0, end, Decimal(cents) / 1000, "USD"))
        prices.append(PriceSegment(model, "p2", T0, end, Decimal(cents + 7) / 999, "USD"))
    ts = pl.Datetime("ms", "UTC")
    usage = pl.DataFrame(use_rows, schema_overrides={"s": ts, "e": ts}) if use_rows else None
    return usage, pl.DataFrame(cap_rows, schema_overrides={"cs": ts, "ce": ts}), prices


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(list(IdlePolicy)), st.sampled_from(GROUPINGS))
def test_conservation_for_every_policy_and_grouping(cluster, policy, by) -> None:  # type: ignore[no-untyped-def]
    usage, capacity, prices = cluster
    if usage is None:
        return
    end = capacity["ce"].max()
    ledger = build_ledger(
        decide_lines(usage, capacity, prices, policy),
        group_by=by,
        policy=policy,
        window=Window(T0, end),
        computed_until=end,
        idle=IdleRule(),
        currency="USD",
    )
    assert ledger.conserved
    rows = sum((r.total_cost for r in ledger.rows), Decimal(0))
    assert rows + ledger.totals.unshared_cost == ledger.totals.capacity_cost
    assert ledger.totals.unallocated_gpu_hours >= -1e-9
    assert all(r.shared_cost >= 0 for r in ledger.rows)
    # unmeasured hours are a part of allocated hours, and every view adds up to the same
    assert all(-1e-9 <= r.unmeasured_gpu_hours <= r.allocated_gpu_hours + 1e-9 for r in ledger.rows)
    unmeasured = (usage["allocated_gpu_ms"] / 3.6e6 - usage["measured_gpu_hours"]).sum()
    assert ledger.totals.unmeasured_gpu_hours == pytest.approx(unmeasured, abs=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(list(IdlePolicy)), st.sampled_from(GROUPINGS))
def test_every_grouping_adds_up_the_tenants_to_the_cent(cluster, policy, by) -> None:  # type: ignore[no-untyped-def]
    """Any grouping's rows add up the same rounded lines as the tenant rows: an org is the sum
    of its projects to the cent, and direct cost is the same under every policy."""
    usage, capacity, prices = cluster
    if usage is None:
        return
    end = capacity["ce"].max()

    def ledger(group_by: str, pol: IdlePolicy):  # type: ignore[no-untyped-def]
        return build_ledger(
            decide_lines(usage, capacity, prices, pol),
            group_by=group_by,
            policy=pol,
            window=Window(T0, end),
            computed_until=end,
            idle=IdleRule(),
            currency="USD",
        )

    tenants, grouped = ledger("tenant", policy), ledger(by, policy)
    assert grouped.totals.total_cost == tenants.totals.total_cost == tenants.totals.capacity_cost
    orgs = {r.key: r for r in ledger("org", policy).rows}
    for org, row in orgs.items():
        mine = [r for r in tenants.rows if r.key.split("/")[0] == org]
        assert row.total_cost == sum((r.total_cost for r in mine), Decimal(0))
        assert row.shared_cost == sum((r.shared_cost for r in mine), Decimal(0))
    direct = {r.key: r.direct_cost for r in tenants.rows}
    for other in IdlePolicy:
        assert {r.key: r.direct_cost for r in ledger("tenant", other).rows} == direct


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=3),
        st.decimals(min_value=0, max_value=10_000, places=7),
        min_size=1,
    )
)
def test_rounding_conserves_the_rounded_total(amounts: dict[str, Decimal]) -> None:
    total = sum(amounts.values(), Decimal(0))
    rounded = round_conserving(amounts, total)
    assert sum(rounded.values(), Decimal(0)) == total.quantize(Decimal("0.01"))
    assert all(abs(rounded[k] - amounts[k]) < Decimal("0.01") for k in amounts)


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 10_000))
def test_no_gpu_is_ever_more_than_fully_allocated(wh, seed: int) -> None:  # type: ignore[no-untyped-def]
    """A random simulated cluster, through ingest and the SQL interval derivation: at every
    instant the shares held on each GPU add up to at most 1, and the ledger conserves."""

    cluster = f"rand-{seed}"
    now = recent(dt.datetime(2026, 11, 20, tzinfo=dt.UTC))
    simulate(wh, cluster=cluster, days=0.5, gpus=16, seed=seed, now=now)
    peak = wh.rows(
        f"SELECT max(held) FROM (SELECT sum(delta) OVER (PARTITION BY gpu_uuid, mig_instance "
        f"ORDER BY t, delta ROWS UNBOUNDED PRECEDING) AS held FROM ("
        f"SELECT gpu_uuid, mig_instance, start_ts AS t, toFloat64(fraction) AS delta "
        f"FROM {wh.database}.allocations FINAL WHERE cluster = {{c:String}} AND gpu_uuid != '' "
        f"UNION ALL SELECT gpu_uuid, mig_instance, end_ts AS t, -toFloat64(fraction) "
        f"FROM {wh.database}.allocations FINAL WHERE cluster = {{c:String}} AND gpu_uuid != '' "
        f"AND end_ts IS NOT NULL))",
        {"c": cluster},
    )[0][0]
    assert 0 < peak <= 1 + 1e-6
    ledger = ledger_between(wh, now - dt.timedelta(hours=12), now, cluster=cluster)
    assert ledger.conserved
    assert ledger.totals.allocated_gpu_hours <= ledger.totals.capacity_gpu_hours + 1e-6
