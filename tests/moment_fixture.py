"""A small cluster "right now", computed by hand, for the idle figures, the GPU page, the
overview and its findings.

NOW = T + 3 h. Samples every minute from T - 1 h up to NOW (g-stale's stop at NOW - 1 h);
H100 costs 2.50 per GPU-hour; idle: every sample under 5 % for at least 30 min.

  node GPU      utilisation          job      tenant    share held            idle now
  n1   g-idle   1 %                  j-idle   team-x/a  1.0   T -> open       3 h: 3 GPU-h, 7.50
  n1   g-busy   60 %                 j-busy   team-y/b  1.0   T -> open       no
  n1   g-short  60 %, 1 % from       j-short  team-x/a  1.0   T -> open       no (20 min < 30)
                NOW - 20 min
  n1   g-half   1 %                  j-prev   team-x/a  1.0   T-1h -> NOW-1h  (ended)
                                     j-half   team-y/b  0.5   NOW-1h -> open  1 h: 0.5 GPU-h, 1.25
  n2   g-stale  1 % until NOW - 1 h, j-stale  team-y/b  1.0   T -> open       no (no sample for
                no samples after                                              an hour)
  n2   g-sick   unhealthy (Xid 79), no job

The ledger of T's day counts as idle: j-idle 3 h, j-prev 3 h (T-1h -> NOW-1h), j-half 0.5,
j-short 0 (20 min < 30), j-stale 2 h (T -> NOW-1h; unmeasured after).
Waiting at NOW: j-wait (team-y/b, 2 H100, submitted NOW - 40 min). Quotas: team-x/a
guaranteed 1 H100 in p1 (holds 2: j-idle, j-short), team-y/b guaranteed 4 (holds 2.5).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal

import polars as pl
from conftest import recent

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent, Price, Quota
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

T = recent(dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC))
NOW = T + dt.timedelta(hours=3)
DAY = T.date().isoformat()
PRICE = Decimal("2.50")
MINUTE = dt.timedelta(minutes=1)


def at(hours: float) -> dt.datetime:
    """T + ``hours``."""
    return T + dt.timedelta(hours=hours)


UTIL: dict[str, Callable[[dt.datetime], float | None]] = {
    "g-idle": lambda t: 0.01,
    "g-busy": lambda t: 0.6,
    "g-short": lambda t: 0.01 if t >= NOW - dt.timedelta(minutes=20) else 0.6,
    "g-half": lambda t: 0.01,
    "g-stale": lambda t: 0.01 if t < NOW - dt.timedelta(hours=1) else None,
}
NODE = {"g-idle": "n1", "g-busy": "n1", "g-short": "n1", "g-half": "n1", "g-stale": "n2"}
#: job: (GPU, tenant, share, start, end or None)
JOBS: dict[str, tuple[str, str, float, dt.datetime, dt.datetime | None]] = {
    "j-idle": ("g-idle", "team-x/a", 1.0, at(0), None),
    "j-busy": ("g-busy", "team-y/b", 1.0, at(0), None),
    "j-short": ("g-short", "team-x/a", 1.0, at(0), None),
    "j-prev": ("g-half", "team-x/a", 1.0, at(-1), at(2)),
    "j-half": ("g-half", "team-y/b", 0.5, at(2), None),
    "j-stale": ("g-stale", "team-y/b", 1.0, at(0), None),
}
#: idle GPU-hours of each job in the ledger of T's day (see the table above)
LEDGER_IDLE = {
    "j-idle": 3.0,
    "j-busy": 0.0,
    "j-short": 0.0,
    "j-prev": 3.0,
    "j-half": 0.5,
    "j-stale": 2.0,
}


def samples() -> pl.DataFrame:
    rows = []
    for i, (gpu, util) in enumerate(UTIL.items()):
        for k in range(240):
            ts = at(-1) + k * MINUTE
            u = util(ts)
            if u is None:
                continue
            rows.append(
                (
                    *(ts, "c1", NODE[gpu], gpu, i, "H100", "nvidia", "", "", u, None, None),
                    *(10 * 2**30, 80 * 2**30, 100 + 200 * u, None, 40.0 + 30 * u, 1500, None, None),
                    *("", "", "", "", "test"),
                )
            )
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


def write(wh: Warehouse) -> Warehouse:
    """Write the cluster into ``wh``."""
    ing = Ingestor(wh, 35, now=lambda: NOW)
    before = T - dt.timedelta(days=1)
    gpus = [GpuInventory(before, "c1", "p1", NODE[g], g, i, "H100") for i, g in enumerate(UTIL)]
    gpus.append(
        GpuInventory(
            before,
            "c1",
            "p1",
            "n2",
            "g-sick",
            5,
            "H100",
            health="unhealthy",
            health_reason="Xid 79: GPU has fallen off the bus",
        )
    )
    assert ing.write_gpus(gpus).quarantined_total == 0
    assert ing.write_samples(samples()).quarantined_total == 0
    events = []
    for job, (gpu, tenant, share, start, end) in JOBS.items():
        started = JobEvent(
            start,
            "c1",
            job,
            "started",
            tenant=tenant,
            org=tenant.split("/")[0],
            project=tenant.split("/")[1],
            pool="p1",
            gpu_model="H100",
            gpus_requested=share,
            gpu_fraction=share,
            node=NODE[gpu],
            gpu_uuids=(gpu,),
        )
        events.append(started._replace(ts=start - dt.timedelta(minutes=5), event="submitted"))
        events.append(started)
        if end is not None:
            events.append(started._replace(ts=end, event="finished", started_at=start))
    events.append(
        JobEvent(
            NOW - dt.timedelta(minutes=40),
            "c1",
            "j-wait",
            "submitted",
            tenant="team-y/b",
            org="team-y",
            project="b",
            pool="p1",
            gpu_model="H100",
            gpus_requested=2.0,
        )
    )
    assert ing.write_job_events(events).quarantined_total == 0
    ing.write_config(
        prices=[Price(before, "H100", str(PRICE))],
        quotas=[
            Quota(before, "team-x/a", "p1", "H100", 1.0),
            Quota(before, "team-y/b", "p1", "H100", 4.0),
        ],
    )
    return wh
