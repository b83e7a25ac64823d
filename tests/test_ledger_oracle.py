"""The fast ledger equals the plain reference (``tests/ledger_reference.py``) on random
simulated fleets, from raw samples, the minute rollup and sealed days, for every grouping, and
shares the unallocated cost as each idle policy says."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import ledger_reference as ref
import pytest
from conftest import ledger_between, recent, simulate
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from warehouse.client import Warehouse
from warehouse.ledger import GROUPINGS, IdleRule, seal_days

CENT = Decimal("0.01")
HOUR = dt.timedelta(hours=1)


def _inputs(
    wh: Warehouse, cluster: str
) -> tuple[list[ref.Alloc], list[tuple[tuple[str, str, str], int, float]], list]:  # type: ignore[type-arg]
    """The rows as stored: allocation intervals, raw samples, GPU-hour prices."""
    p = {"db": wh.database, "c": cluster}
    allocs = [
        ref.Alloc(
            (c, g, m),
            int(s),
            None if e is None else int(e),
            float(f),
            model,
            pool,
            dict(zip(GROUPINGS, keys, strict=True)),
        )
        for c, g, m, s, e, f, model, pool, *keys in wh.rows(
            "SELECT cluster, gpu_uuid, mig_instance, toUnixTimestamp64Milli(start_ts), "
            "toUnixTimestamp64Milli(end_ts), fraction, gpu_model, pool, "
            + ", ".join(GROUPINGS)
            + " FROM {db:Identifier}.allocations FINAL WHERE cluster = {c:String}",
            p,
        )
    ]
    samples = [
        ((c, g, m), int(t), float(u))
        for c, g, m, t, u in wh.rows(
            "SELECT cluster, gpu_uuid, mig_instance, toUnixTimestamp64Milli(ts), util_ratio "
            "FROM {db:Identifier}.gpu_samples WHERE cluster = {c:String}",
            p,
        )
    ]
    book = [
        (model, pool, int(t), Decimal(price))
        for model, pool, t, price in wh.rows(
            "SELECT gpu_model, pool, toUnixTimestamp64Milli(effective_from), toString(price) "
            "FROM {db:Identifier}.price_book FINAL WHERE resource = 'gpu_hour'",
            {"db": wh.database},
        )
    ]
    return allocs, samples, book


def _same(fast, expected: dict[str, ref.Usage]) -> None:  # type: ignore[no-untyped-def]
    rows = {r.key: r for r in fast.rows}
    assert set(rows) == set(expected)
    for key, want in expected.items():
        got = rows[key]
        assert got.allocated_gpu_hours == pytest.approx(want.allocated_h, rel=1e-9, abs=1e-9)
        assert (got.used_gpu_hours or 0.0) == pytest.approx(want.used_h, rel=1e-6, abs=1e-6)
        assert (got.idle_gpu_hours or 0.0) == pytest.approx(want.idle_h, rel=1e-9, abs=1e-9)
        unmeasured = want.allocated_h - want.measured_h
        assert got.unmeasured_gpu_hours == pytest.approx(unmeasured, rel=1e-6, abs=1e-6)
        # rounded once per line (each within a cent), then added up
        assert abs(got.direct_cost - want.direct) < CENT * len(want.lines), key


def _policies_hold(
    wh: Warehouse,
    cluster: str,
    a: dt.datetime,
    b: dt.datetime,
    now: dt.datetime,
    expected: dict[str, ref.Usage],
) -> None:
    """What each policy promises, on the tenant rows (each tenant's money rounded once per line
    of it, so within that many cents of the exact share): ``none`` keeps the unallocated cost
    on its own line, ``even`` gives every tenant the same share, ``weighted`` shares in
    proportion to direct cost; every ledger conserves cost to the cent."""
    got = {
        p: ledger_between(wh, a, b, now=now, cluster=cluster, idle_policy=p)
        for p in ("none", "even", "weighted")
    }
    for ledger in got.values():
        assert ledger.conserved
    exact_direct = sum((u.direct for u in expected.values()), Decimal(0))
    unallocated = got["none"].totals.capacity_cost - exact_direct
    line = got["none"].unallocated
    assert line is not None and line.cost == got["none"].totals.unshared_cost
    assert abs(line.cost - unallocated) < CENT * (1 + sum(len(u.lines) for u in expected.values()))
    for policy, share in (
        ("none", {t: Decimal(0) for t in expected}),
        ("even", {t: unallocated / len(expected) for t in expected}),
        ("weighted", {t: unallocated * u.direct / exact_direct for t, u in expected.items()}),
    ):
        rows = {r.key: r for r in got[policy].rows}
        for tenant, want in share.items():
            assert abs(rows[tenant].shared_cost - want) <= CENT * len(expected[tenant].lines), (
                policy,
                tenant,
            )


@settings(
    max_examples=4,
    deadline=None,
    phases=[
        Phase.explicit,
        Phase.reuse,
        Phase.generate,
    ],  # each example simulates a fleet: no shrinking
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 10_000),
    start_h=st.integers(0, 20),
    hours=st.integers(1, 30),
    threshold=st.sampled_from([0.05, 0.2, 0.5]),
    min_idle_s=st.sampled_from([60, 900, 1800, 5400]),
)
def test_the_fast_ledger_equals_the_reference(
    wh: Warehouse, seed: int, start_h: int, hours: int, threshold: float, min_idle_s: int
) -> None:
    cluster = f"oracle-{seed}"
    now = recent(dt.datetime(2026, 11, 20, 6, tzinfo=dt.UTC))
    simulate(wh, cluster=cluster, days=1.5, gpus=16, seed=seed, now=now)
    allocs, samples, book = _inputs(wh, cluster)
    first = now - dt.timedelta(days=1.5)
    a = first.replace(minute=0, second=0, microsecond=0) + start_h * HOUR
    b = min(a + hours * HOUR, now)
    idle = {"idle_threshold_ratio": threshold, "idle_min_duration_s": min_idle_s}
    for by in GROUPINGS:
        expected = ref.usage(
            allocs, samples, book, a, b, threshold=threshold, min_idle_s=min_idle_s, group_by=by
        )
        _same(ledger_between(wh, a, b, now=now, cluster=cluster, by=by, **idle), expected)
        if by in ("tenant", "gpu_model"):
            raw = ledger_between(wh, a, b, now=now, cluster=cluster, by=by, source="raw", **idle)
            _same(raw, expected)
    seal_days(wh, idle=IdleRule(threshold, min_idle_s), now=now)
    expected = ref.usage(
        allocs, samples, book, a, b, threshold=threshold, min_idle_s=min_idle_s, group_by="tenant"
    )
    _same(ledger_between(wh, a, b, now=now, cluster=cluster, **idle), expected)
    _policies_hold(wh, cluster, a, b, now, expected)
