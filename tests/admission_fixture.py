"""Fill a data directory for the admission webhook's tests (run as a subprocess: the engine
lets one process own a directory, and the test's own process owns another).

Two tenants, each mapped from a namespace: team-a/train squats GPU-a (1% busy for three hours,
job sq-1), team-b/serve keeps GPU-b busy (90%, job busy-1). Usage: admission_fixture.py DIR
"""

from __future__ import annotations

import datetime as dt
import sys

import polars as pl

from collector.records import SAMPLE_SCHEMA, GpuInventory, JobEvent, Tenant, TenantRule
from warehouse.client import connect
from warehouse.ingest.writer import Ingestor
from warehouse.migrate import RenderOptions, migrate

HOURS = 3


def fill(data_dir: str, now: dt.datetime) -> None:
    wh = connect(f"chdb://{data_dir}", "gpuledger")
    migrate(wh, RenderOptions(database="gpuledger"))
    start = (now - dt.timedelta(hours=HOURS)).replace(second=0, microsecond=0)
    ing = Ingestor(wh, 35, now=lambda: now)
    ing.write_config(
        [Tenant("team-a/train", "team-a", "train"), Tenant("team-b/serve", "team-b", "serve")],
        [
            TenantRule("namespace", "team-a", "team-a/train", 10),
            TenantRule("namespace", "team-b", "team-b/serve", 10),
        ],
    )
    gpus = (("GPU-a", 0.01, "sq-1", "team-a"), ("GPU-b", 0.9, "busy-1", "team-b"))
    ing.write_gpus(
        [GpuInventory(start, "c1", "p1", "n1", g, i, "H100") for i, (g, *_r) in enumerate(gpus)]
    )
    rows = []
    minutes = int((now - start).total_seconds() // 60)
    for i, (gpu, util, _job, _ns) in enumerate(gpus):
        for m in range(minutes):
            ts = start + dt.timedelta(minutes=m)
            rows.append(
                (ts, "c1", "n1", gpu, i, "H100", "nvidia", "", "", util, None, None, 1, 2,
                 100.0, None, 40.0, 1500, None, None, "", "", "", "", "test")
            )  # fmt: skip
    ing.write_samples(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"))
    ing.write_job_events(
        [
            JobEvent(
                start, cluster="c1", job_id=job, event="started", gpu_uuids=(gpu,), node="n1",
                gpu_model="H100", tenant=f"{ns}/{'train' if ns == 'team-a' else 'serve'}",
                org=ns, project="train" if ns == "team-a" else "serve", namespace=ns,
            )
            for gpu, _u, job, ns in gpus
        ]
    )  # fmt: skip
    wh.close()


if __name__ == "__main__":
    fill(sys.argv[1], dt.datetime.now(dt.UTC))
