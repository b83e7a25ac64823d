"""Idle allocated time on a hand-computed cluster: runs are judged within each job's interval.

Window 2026-11-02 00:00 → 06:00 UTC. Samples every 30 s from 23:00 the day before to 07:00,
all without a job label (NVML without the kubelet's pod mapping). idle: every sample under 5%,
for at least 30 minutes of the job's own interval. Each job is its own tenant.

  GPU  utilisation               job  share  held               idle                used
  G1   0% all the time           j1   1.0    01:00-01:20        0 (20 min < 30)     0
                                 j2   1.0    01:20-03:00        100 min             0
  G2   90%, 0% 02:40-03:20       j3   0.5    00:00-06:00        40 min x .5 = 20    .9x320 min x .5
                                 j4   0.5    03:00-06:00        0 (20 min inside)   .9x160 min x .5
  G3   0% until 01:00, then 90%  j5   1.0    00:30:30-05:00     0 (29.5 min < 30)   .9 x 4 h
  G4   0% all the time           j6   1.0    23:50 (day before) 20 min (judged on   0
                                             -00:20             its 30 min)

The job labels would join j1's and j2's low minutes into one run (and j3's with j4's): the
intervals keep them apart. Splitting the window at 02:00 splits j2's 100 minutes 40 + 60.
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from conftest import ledger_between, recent

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent, Price
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

T0 = recent(dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.UTC))
T6 = T0 + dt.timedelta(hours=6)


def h(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


UTIL = {
    "G1": lambda t: 0.0,
    "G2": lambda t: 0.0 if h(2 + 40 / 60) <= t < h(3 + 20 / 60) else 0.9,
    "G3": lambda t: 0.0 if t < h(1) else 0.9,
    "G4": lambda t: 0.0,
}
#: job: (GPU, share, start, end)
JOBS = {
    "j1": ("G1", 1.0, h(1), h(1 + 20 / 60)),
    "j2": ("G1", 1.0, h(1 + 20 / 60), h(3)),
    "j3": ("G2", 0.5, h(0), h(6)),
    "j4": ("G2", 0.5, h(3), h(6)),
    "j5": ("G3", 1.0, h(0.5 + 0.5 / 60), h(5)),
    "j6": ("G4", 1.0, h(-10 / 60), h(20 / 60)),
}
#: tenant: (used, idle) GPU-hours in the window, from the table above
EXPECT = {
    "t-j1": (0.0, 0.0),
    "t-j2": (0.0, 100 / 60),
    "t-j3": (0.9 * 320 / 60 * 0.5, 40 / 60 * 0.5),
    "t-j4": (0.9 * 160 / 60 * 0.5, 0.0),
    "t-j5": (0.9 * 4, 0.0),
    "t-j6": (0.0, 20 / 60),
}


def _samples() -> pl.DataFrame:
    nulls = (None,) * 10
    rows = [
        (t, "c1", "n1", gpu, i, "H100", "nvidia", "", "", util(t), *nulls, "", "", "", "", "t")
        for i, (gpu, util) in enumerate(UTIL.items())
        for t in (h(-1) + dt.timedelta(seconds=30 * k) for k in range(8 * 120))
    ]
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


@pytest.fixture
def cluster(wh: Warehouse) -> Warehouse:
    ing = Ingestor(wh, 35, now=lambda: T6 + dt.timedelta(hours=2))
    before = T0 - dt.timedelta(days=1)
    gpus = [GpuInventory(before, "c1", "p1", "n1", g, i, "H100") for i, g in enumerate(UTIL)]
    assert ing.write_gpus(gpus).quarantined_total == 0
    assert ing.write_samples(_samples()).quarantined_total == 0
    events = []
    for job, (gpu, share, start, end) in JOBS.items():
        started = JobEvent(
            start,
            "c1",
            job,
            "started",
            tenant=f"t-{job}",
            pool="p1",
            gpu_model="H100",
            gpus_requested=share,
            gpu_fraction=share,
            node="n1",
            gpu_uuids=(gpu,),
        )
        events += [started, started._replace(ts=end, event="finished", started_at=start)]
    assert ing.write_job_events(events).quarantined_total == 0
    ing.write_config(prices=[Price(before, "H100", "2.00")])
    return wh


def rows(wh: Warehouse, start: dt.datetime = T0, end: dt.datetime = T6, **kw):  # type: ignore[no-untyped-def]
    return {r.key: r for r in ledger_between(wh, start, end, cluster="c1", **kw).rows}


@pytest.mark.parametrize("materialized", [True, False], ids=["materialized-cte", "inlined-cte"])
@pytest.mark.parametrize("source", ["rollup", "raw"])
def test_runs_are_judged_within_each_jobs_interval(
    cluster: Warehouse, source: str, materialized: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the embedded engine has materialized CTEs; a server without them gets the inlined query
    assert cluster.has_setting("enable_materialized_cte")
    assert not cluster.has_setting("no_such_setting_anywhere")
    if not materialized:
        monkeypatch.setattr(cluster, "has_setting", lambda name: False)
    got = rows(cluster, source=source)
    for tenant, (used, idle) in EXPECT.items():
        assert got[tenant].used_gpu_hours == pytest.approx(used, abs=1e-6), tenant  # float32
        assert got[tenant].idle_gpu_hours == pytest.approx(idle, abs=1e-9), tenant


def test_a_split_window_splits_a_run_and_keeps_its_judgement(cluster: Warehouse) -> None:
    first, second = rows(cluster, T0, h(2)), rows(cluster, h(2), T6)
    assert first["t-j2"].idle_gpu_hours == pytest.approx(40 / 60)
    assert second["t-j2"].idle_gpu_hours == pytest.approx(60 / 60)
    for tenant, (_, idle) in EXPECT.items():
        parts = [p[tenant].idle_gpu_hours for p in (first, second) if tenant in p]
        assert sum(parts) == pytest.approx(idle, abs=1e-9), tenant


def test_a_shorter_minimum_counts_the_short_runs(cluster: Warehouse) -> None:
    got = rows(cluster, idle_min_duration_s=15 * 60)
    assert got["t-j1"].idle_gpu_hours == pytest.approx(20 / 60)  # 20 min >= 15
    assert got["t-j4"].idle_gpu_hours == pytest.approx(20 / 60 * 0.5)
    assert got["t-j5"].idle_gpu_hours == pytest.approx(29.5 / 60)
