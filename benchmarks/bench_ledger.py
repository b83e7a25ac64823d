"""The ledger at scale: gpuledger from raw samples and from rollups, polars, and PromQL.

``run(scale)`` builds a synthetic cluster in a fresh embedded engine under ``/var/tmp`` (deleted
afterwards), then prints one line per figure and returns them:

- ``full``: 1,024 GPUs x 30 days at 10 s (265,420,800 samples); ``quick``: 64 GPUs x 2 days.
  Jobs of 1-8 GPUs lasting hours (training, inference, notebooks, idle squatters), about 70% of
  the GPU-hours allocated, with checkpoint dips, start-up phases and idle stretches, so that
  the idle threshold *and* the minimum duration both matter. Jobs go in through the real job
  path (``Ingestor.write_job_events`` -> allocation intervals); the samples' bulk goes in with
  ``INSERT INTO gpu_samples SELECT ...`` generated inside the engine (the materialised views
  fill the rollups as on any insert), because the ingest path (validation in polars, Arrow
  insert) is measured on its own in ``python -m benchmarks``; then ``OPTIMIZE ... FINAL``, as
  merges would have settled on a month-old table.
- ``compute_ledger(source="raw" | "rollup")``: warm runs, median of 3.
- polars: the raw samples and the allocations exported to Parquet (by the engine), the same
  figures (allocated, used, idle GPU-hours per tenant, same idle definition) with
  ``scan_parquet``; its time and the largest difference from gpuledger's answer.
- Prometheus (Debian's ``prometheus``/``promtool``): a subset (``full``: 512 GPUs x 14 days at
  15 s; ``quick``: 32 GPUs x 1 day) rendered as OpenMetrics text by the engine, one file per day
  fed to ``promtool tsdb create-blocks-from openmetrics`` and deleted, served by our own
  instance on loopback; idle allocated GPU-hours per namespace (= tenant) in PromQL through
  ``/api/v1/query``, against the same subset in gpuledger. PromQL cannot express "for at least
  the minimum duration", so both answer the threshold-only question there (gpuledger with
  ``idle_min_duration_s=0``); the difference left is PromQL's 5-minute lookback, which keeps an
  ended pod's last sample alive (backfilled series carry no staleness markers).

Figures go to ``benchmarks/out/ledger.json``. Run alone with
``python -m benchmarks.bench_ledger --scale quick|full [--no-prometheus] [--no-polars]
[--no-ledger]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime as dt
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from collector.records import GpuInventory, JobEvent, Price, Tenant
from warehouse.client import Warehouse, connect
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import IdleRule, Window, compute_ledger, seal_days
from warehouse.migrate import RenderOptions, migrate

OUT = Path(__file__).with_name("out")
CLUSTER = "bench"
MODEL = "NVIDIA H100 80GB HBM3"
PRICE = "2.50"
THRESHOLD = 0.05
MIN_IDLE_S = 1800
TENANTS = [
    (org, project)
    for org in ("vision", "language", "speech", "platform")
    for project in ("research", "prod", "eval")
]
#: Job kinds: (name, workload type, share of jobs, utilisation level range).
KINDS = [
    ("free", "other", 0.0, (0.0, 0.0)),
    ("training", "training", 0.6, (0.55, 0.98)),
    ("inference", "inference", 0.2, (0.15, 0.6)),
    ("notebook", "notebook", 0.15, (0.2, 0.7)),
    ("squatter", "other", 0.05, (0.0, 0.0)),
]


@dataclasses.dataclass(frozen=True)
class Scale:
    """Dataset sizes: the main cluster, and the subset that Prometheus also answers."""

    gpus: int
    days: int
    step_s: int
    prom_gpus: int
    prom_days: int
    prom_step_s: int


SCALES = {"full": Scale(1024, 30, 10, 512, 14, 15), "quick": Scale(64, 2, 10, 32, 1, 15)}


# -- the synthetic cluster ----------------------------------------------------------------------
@dataclasses.dataclass
class Cluster:
    """A schedule: ``slots`` (one row per GPU and job or free stretch) and the jobs' events."""

    t0: dt.datetime
    gpus: int
    seconds: int
    step_s: int
    slots: pl.DataFrame
    events: list[JobEvent]

    @property
    def t1(self) -> dt.datetime:
        return self.t0 + dt.timedelta(seconds=self.seconds)


def ledger_of(
    wh: Warehouse,
    t0: dt.datetime,
    t1: dt.datetime,
    *,
    idle_threshold_ratio: float = 0.05,
    idle_min_duration_s: int = 1800,
    **kw: Any,
) -> Any:
    """``compute_ledger`` as the CLI calls it, without stranded hours (not part of what is
    timed here), the clock far past the window."""
    return compute_ledger(
        wh,
        Window(t0, t1),
        now=t1,
        idle=IdleRule(idle_threshold_ratio, idle_min_duration_s),
        stranded=False,
        **kw,
    )


def _uuid(g: int) -> str:
    return f"GPU-{g:08x}-5eed-4b1d-a11c-{g:012x}"


def make_cluster(
    t0: dt.datetime, gpus: int, days: int, step_s: int, seed: int = 1, align_s: int = 10
) -> Cluster:
    """Place jobs of 1-8 GPUs on 8-GPU nodes (greedy, earliest-free GPUs), about 70% allocated.

    Jobs start and end on multiples of ``align_s`` (a multiple of ``step_s``); some started up
    to two days before the window, some run past its end (no terminal event: still running).
    """
    rng = np.random.default_rng(seed)
    seconds = days * 86_400
    rows: list[tuple[int, int, int, int, float, str, str, str]] = []
    events: list[JobEvent] = []
    n_job = 0
    for node in range(gpus // 8):
        free_at = rng.uniform(-2 * 86_400, 0, 8)
        while True:
            k = int(rng.choice([1, 2, 4, 8], p=[0.35, 0.2, 0.2, 0.25]))
            chosen = np.argsort(free_at, kind="stable")[:k]
            start = float(free_at[chosen].max()) + rng.exponential(900)
            start = align_s * round(start / align_s)
            if start >= seconds:
                break
            hours = float(np.clip(rng.lognormal(np.log(3.0), 0.9), 0.25, 72))
            end = start + align_s * round(hours * 3600 / align_s)
            free_at[chosen] = end
            if end <= 0:
                continue
            kinds = int(rng.choice(len(KINDS) - 1, p=[k[2] for k in KINDS[1:]])) + 1
            lo, hi = KINDS[kinds][3]
            level = float(rng.uniform(lo, hi))
            org, project = TENANTS[int(rng.integers(len(TENANTS)))]
            job = f"job-{n_job:06d}"
            n_job += 1
            namespace = f"{org}-{project}"
            uuids = tuple(_uuid(node * 8 + int(i)) for i in sorted(chosen))
            for i in sorted(chosen):
                rows.append(
                    (node * 8 + int(i), start, end, kinds, level, job, f"{job}-0", namespace)
                )
            started = JobEvent(
                t0 + dt.timedelta(seconds=start),
                CLUSTER,
                job,
                "started",
                tenant=f"{org}/{project}",
                org=org,
                project=project,
                user=f"user-{int(rng.integers(40)):02d}",
                namespace=namespace,
                pool="pool-a",
                queue=f"{org}-queue",
                workload_type=KINDS[kinds][1],
                gpu_model=MODEL,
                gpus_requested=float(k),
                node=f"node-{node:04d}",
                gpu_uuids=uuids,
                source="bench",
            )
            events.append(started)
            if end <= seconds:  # else still running at the window's end
                events.append(
                    started._replace(
                        ts=t0 + dt.timedelta(seconds=end), event="finished", started_at=started.ts
                    )
                )
    jobs = pl.DataFrame(
        rows,
        orient="row",
        schema={
            "g": pl.UInt16,
            "s": pl.Int64,
            "e": pl.Int64,
            "kind": pl.UInt8,
            "level": pl.Float32,
            "job": pl.String,
            "pod": pl.String,
            "namespace": pl.String,
        },
    )
    free = _free_slots(jobs, gpus, seconds)
    slots = pl.concat([jobs, free]).filter((pl.col("e") > 0) & (pl.col("s") < seconds))
    slots = (
        slots.sort("g", "s")
        .with_row_index("sid")
        .with_columns(
            pl.col("sid").cast(pl.UInt32),
            pl.col("g").map_elements(_uuid, return_dtype=pl.String).alias("gpu_uuid"),
            (pl.lit("node-") + (pl.col("g") // 8).cast(pl.String).str.zfill(4)).alias("node"),
        )
    )
    return Cluster(t0, gpus, seconds, step_s, slots, events)


def _free_slots(jobs: pl.DataFrame, gpus: int, seconds: int) -> pl.DataFrame:
    """The stretches of [0, seconds) that no job holds, per GPU."""
    rows = []
    by_gpu = {g: sorted(zip(f["s"], f["e"], strict=True)) for (g,), f in jobs.group_by("g")}
    for g in range(gpus):
        t = 0
        for s, e in by_gpu.get(g, []):
            if s > t:
                rows.append((g, t, min(s, seconds)))
            t = max(t, e)
            if t >= seconds:
                break
        if t < seconds:
            rows.append((g, t, seconds))
    return pl.DataFrame(
        rows, orient="row", schema={"g": pl.UInt16, "s": pl.Int64, "e": pl.Int64}
    ).with_columns(
        pl.lit(0, pl.UInt8).alias("kind"),
        pl.lit(0.0, pl.Float32).alias("level"),
        pl.lit("").alias("job"),
        pl.lit("").alias("pod"),
        pl.lit("").alias("namespace"),
    )


#: The samples of one day, generated in the engine from the schedule: per slot, one sample per
#: step. Utilisation (a percentage, as DCGM reports it, stored as a ratio) is low (0-4%) for
#: free GPUs, squatters, a job's 10-25 minute start-up, 10-minute checkpoint dips of training
#: jobs (5%, shorter than the minimum idle duration), half-hour quiet spells of inference (30%)
#: and hour-long idle spells of notebooks (60%); otherwise the job's level +-10 points, >= 6%.
_SAMPLES_SQL = """
INSERT INTO {db:Identifier}.gpu_samples
    (ts, cluster, node, gpu_uuid, gpu_index, mig_instance, mig_profile, vendor, gpu_model,
     gpu_util_ratio, mem_util_ratio, memory_used_bytes, memory_total_bytes, power_watts,
     temperature_celsius, sm_clock_mhz, pod, namespace, container, job_id, source)
SELECT fromUnixTimestamp64Milli({t0_ms:Int64} + toInt64(t) * 1000, 'UTC'), {cluster:String},
       node, gpu_uuid, g % 8, '', '', 'nvidia', {model:String}, toFloat32(u), toFloat32(u / 2),
       if(kind = 0, 0, toUInt64(2e10 + level * 5e10)), 85899345920, toFloat32(70 + u * 600),
       toFloat32(30 + u * 50), 1980, pod, namespace, if(kind = 0, '', 'main'), job, 'bench'
FROM (
    SELECT g, node, gpu_uuid, kind, level, pod, namespace, job, t,
           if(kind IN (0, 4) OR t - s < 600 + (sid % 4) * 300
              OR (kind = 1 AND cityHash64(sid, intDiv(t, 600)) % 100 < 5)
              OR (kind = 2 AND cityHash64(sid, intDiv(t, 1800)) % 100 < 30)
              OR (kind = 3 AND cityHash64(sid, intDiv(t, 3600)) % 100 < 60),
              (cityHash64(sid, t) % 5) / 100,
              greatest(0.06, least(1.0,
                  round(level + ((cityHash64(sid, t) % 21) - 10) / 100, 2)))) AS u
    FROM {db:Identifier}.bench_slots
    ARRAY JOIN range(toUInt32(greatest(s, {d0:Int64})), toUInt32(least(e, {d1:Int64})),
                     {step:UInt32}) AS t
    WHERE s < {d1:Int64} AND e > {d0:Int64}
)
"""
_SLOTS_DDL = """
CREATE TABLE {db:Identifier}.bench_slots
    (sid UInt32, g UInt16, s Int64, e Int64, kind UInt8, level Float32, job String, pod String,
     namespace String, gpu_uuid String, node String)
ENGINE = MergeTree ORDER BY (g, s)
"""


def load(wh: Warehouse, cl: Cluster) -> dict[str, Any]:
    """Migrate ``wh``'s database and fill it: inventory, prices, tenants, jobs, samples."""
    ten_years = 3650
    migrate(
        wh,
        RenderOptions(
            database=wh.database,
            raw_retention_days=ten_years,
            rollup_1m_retention_days=ten_years,
            rollup_1h_retention_days=ten_years,
        ),
    )
    ing = Ingestor(wh, ten_years, now=lambda: cl.t1)
    before = cl.t0 - dt.timedelta(days=3)
    ing.write_gpus(
        [
            GpuInventory(
                before,
                CLUSTER,
                "pool-a",
                f"node-{g // 8:04d}",
                _uuid(g),
                g % 8,
                MODEL,
                memory_total_bytes=80 * 2**30,
            )
            for g in range(cl.gpus)
        ]
    )
    ing.write_config(
        tenants=[Tenant(f"{o}/{p}", o, p) for o, p in TENANTS], prices=[Price(before, MODEL, PRICE)]
    )
    started = time.perf_counter()
    for i in range(0, len(cl.events), 20_000):
        ing.write_job_events(cl.events[i : i + 20_000])
    events_s = time.perf_counter() - started
    db = {"db": wh.database}
    wh.command(_SLOTS_DDL, db)
    columns = ["sid", "g", "s", "e", "kind", "level", "job", "pod", "namespace", "gpu_uuid", "node"]
    wh.insert_arrow("bench_slots", cl.slots.select(columns).to_arrow())
    started = time.perf_counter()
    for d0 in range(0, cl.seconds, 86_400):
        wh.command(
            _SAMPLES_SQL,
            {
                **db,
                "t0_ms": int(cl.t0.timestamp() * 1000),
                "cluster": CLUSTER,
                "model": MODEL,
                "d0": d0,
                "d1": min(d0 + 86_400, cl.seconds),
                "step": cl.step_s,
            },
            settings={"insert_deduplicate": 0},
        )
    insert_s = time.perf_counter() - started
    started = time.perf_counter()
    for table in ("gpu_samples", "gpu_samples_1m", "gpu_samples_1h", "gpu_minutes_1h"):
        wh.command("OPTIMIZE TABLE {db:Identifier}.{t:Identifier} FINAL", {**db, "t": table})
    optimize_s = time.perf_counter() - started
    wh.command("DROP TABLE {db:Identifier}.bench_slots SYNC", db)
    return {
        "jobs": len({e.job_id for e in cl.events}),
        "job_events": len(cl.events),
        "job_events_s": round(events_s, 1),
        "insert_select_s": round(insert_s, 1),
        "optimize_final_s": round(optimize_s, 1),
        **table_sizes(wh),
    }


def table_sizes(wh: Warehouse) -> dict[str, Any]:
    """Rows and compressed bytes of the tables the ledger reads."""
    rows = wh.rows(
        "SELECT table, sum(rows), sum(data_compressed_bytes) FROM system.parts "
        "WHERE database = {db:String} AND active AND table IN ('gpu_samples', "
        "'gpu_samples_1m', 'gpu_samples_1h', 'gpu_minutes_1h', 'allocations') "
        "GROUP BY table",
        {"db": wh.database},
    )
    sizes: dict[str, Any] = {
        f"{t}_{k}": v for t, n, b in rows for k, v in (("rows", n), ("bytes", b))
    }
    # the engine picks the default codec per part by its size (LZ4, or ZSTD(3) for large ones),
    # so the same data can take other sizes from one load to the next
    sizes["gpu_samples_parts_by_default_codec"] = dict(
        wh.rows(
            "SELECT default_compression_codec, count() FROM system.parts WHERE database = "
            "{db:String} AND table = 'gpu_samples' AND active GROUP BY 1 ORDER BY 1",
            {"db": wh.database},
        )
    )
    sizes["gpu_samples_column_bytes"] = dict(
        wh.rows(
            "SELECT name, data_compressed_bytes FROM system.columns WHERE database = "
            "{db:String} AND table = 'gpu_samples' ORDER BY data_compressed_bytes DESC",
            {"db": wh.database},
        )
    )
    return sizes


# -- timing ---------------------------------------------------------------------------------------
def timed(fn: Callable[[], Any], runs: int = 3) -> tuple[Any, float, float]:
    """(result, median wall seconds, median CPU seconds of this process) over ``runs`` warm runs.

    One untimed run first (warm caches). CPU time counts every thread of this process, which is
    where the embedded engine and polars run: on a shared machine it is the steadier figure.
    """
    result = fn()
    walls, cpus = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return result, statistics.median(walls), statistics.median(cpus)


def per_tenant(ledger_rows: Any) -> dict[str, tuple[float, float, float]]:
    """{tenant: (allocated, used, idle GPU-hours)} from a Ledger's rows."""
    return {
        r.key: (r.allocated_gpu_hours, r.used_gpu_hours or 0.0, r.idle_gpu_hours or 0.0)
        for r in ledger_rows
        if not r.key.startswith("__")
    }


def max_diff(a: Mapping[str, tuple[float, ...]], b: Mapping[str, tuple[float, ...]]) -> float:
    """The largest absolute difference between two per-tenant answers (a missing key: 0)."""
    width = max((len(v) for v in (*a.values(), *b.values())), default=0)
    zero = (0.0,) * width
    return max(
        (
            abs(x - y)
            for k in set(a) | set(b)
            for x, y in zip(a.get(k, zero), b.get(k, zero), strict=True)
        ),
        default=0.0,
    )


# -- polars on the same data, exported to Parquet ----------------------------------------------
_EXPORT_SAMPLES = """
INSERT INTO FUNCTION file({path:String}, 'Parquet')
SELECT ts, cluster, gpu_uuid, mig_instance, util_ratio, job_id
FROM {db:Identifier}.gpu_samples ORDER BY cluster, gpu_uuid, mig_instance, ts
"""
_EXPORT_ALLOCATIONS = """
INSERT INTO FUNCTION file({path:String}, 'Parquet')
SELECT cluster, gpu_uuid, mig_instance, job_id, attempt, tenant, fraction, start_ts, end_ts
FROM {db:Identifier}.allocations FINAL
"""


def export_parquet(wh: Warehouse, folder: Path) -> dict[str, Any]:
    """The raw samples (the columns the ledger reads) and the allocations, as Parquet files."""
    started = time.perf_counter()
    for name, sql in (("samples", _EXPORT_SAMPLES), ("allocations", _EXPORT_ALLOCATIONS)):
        wh.command(sql, {"db": wh.database, "path": str(folder / f"{name}.parquet")})
    return {
        "export_s": round(time.perf_counter() - started, 1),
        "samples_parquet_bytes": (folder / "samples.parquet").stat().st_size,
        "allocations_parquet_bytes": (folder / "allocations.parquet").stat().st_size,
    }


def polars_ledger(
    folder: Path,
    a: dt.datetime,
    b: dt.datetime,
    threshold: float = THRESHOLD,
    min_idle_s: int = MIN_IDLE_S,
) -> dict[str, tuple[float, float, float]]:
    """Allocated, used and idle GPU-hours per tenant, the ledger's definitions, in polars.

    Written plainly rather than fast: per GPU and minute the mean and highest utilisation; used
    hours as prefix sums read at each allocation end (as-of join, partial minutes pro rata);
    the GPU's low minutes joined into runs, every run paired with every allocation of its GPU,
    cut to the allocation's span (within [a - min_idle - 1 min, b + min_idle + 1 min)) and
    counted inside the window where the cut run lasts at least ``min_idle_s``.
    """
    keys = ["cluster", "gpu_uuid", "mig_instance"]
    margin = dt.timedelta(seconds=min_idle_s + 60)
    lo, hi = a - margin, b + margin
    minute = pl.col("ts").dt.truncate("1m")
    minutes = (
        pl.scan_parquet(folder / "samples.parquet")
        .filter(minute.is_between(lo, hi, closed="left"))
        .group_by(*keys, minute.alias("m"))
        .agg(
            pl.col("util_ratio").cast(pl.Float64).mean().alias("util"),
            pl.col("util_ratio").max().alias("umax"),
        )
        .sort(*keys, "m")
        .collect(engine="streaming")
    )
    same_gpu = pl.all_horizontal([pl.col(k) == pl.col(k).shift(1) for k in keys])
    low = pl.col("umax").is_not_null() & (pl.col("umax") < threshold)
    minutes = minutes.with_columns(
        low.alias("low"),
        (pl.col("util").fill_null(0.0) / 60).cum_sum().over(keys).alias("used_cum"),
        (pl.col("util").fill_null(0.0) / 60).alias("used_h"),
    ).with_columns(
        (
            same_gpu
            & pl.col("low")
            & pl.col("low").shift(1)
            & ((pl.col("m") - pl.col("m").shift(1)) == dt.timedelta(minutes=1))
        )
        .fill_null(False)
        .alias("cont")
    )
    runs = (
        minutes.with_columns((~pl.col("cont")).cum_sum().alias("run"))
        .filter(pl.col("low"))
        .group_by(*keys, "run")
        .agg(
            pl.col("m").min().alias("rs"), (pl.col("m").max() + dt.timedelta(minutes=1)).alias("re")
        )
        .drop("run")
    )
    allocs = (
        pl.scan_parquet(folder / "allocations.parquet")
        .with_columns(
            pl.max_horizontal(pl.col("start_ts"), pl.lit(a)).alias("s"),
            pl.min_horizontal(pl.col("end_ts").fill_null(b), pl.lit(b)).alias("e"),
            pl.max_horizontal(pl.col("start_ts"), pl.lit(lo)).alias("js"),
            pl.min_horizontal(pl.col("end_ts").fill_null(hi), pl.lit(hi)).alias("je"),
        )
        .filter(
            (pl.col("start_ts") < b)
            & (pl.col("end_ts").fill_null(b) > a)
            & (pl.col("e") > pl.col("s"))
        )
        .with_row_index("alloc")
        .collect()
    )
    ends = (
        pl.concat(
            [
                allocs.select(*keys, "alloc", pl.col("s").alias("t"), pl.lit(-1.0).alias("sign")),
                allocs.select(*keys, "alloc", pl.col("e").alias("t"), pl.lit(1.0).alias("sign")),
            ]
        )
        .filter(pl.col("gpu_uuid") != "")
        .with_columns(pl.col("t").dt.cast_time_unit("ms"))
        .sort(*keys, "t")
    )
    looked = ends.join_asof(
        minutes.select(*keys, "m", "used_h", "used_cum").with_columns(
            pl.col("m").dt.cast_time_unit("ms")
        ),
        left_on="t",
        right_on="m",
        by=keys,
        strategy="backward",
        check_sortedness=False,
    )
    frac = (pl.col("t") - pl.col("m")).dt.total_milliseconds() / 60_000
    in_minute = pl.col("m") == pl.col("t").dt.truncate("1m")
    used_at = pl.when(in_minute).then(
        pl.col("used_cum") - pl.col("used_h") + pl.col("used_h") * frac
    ).otherwise(pl.col("used_cum")).fill_null(0.0) * pl.col("sign")
    used = looked.group_by("alloc").agg(used_at.sum().alias("used"))

    def ms(x: pl.Expr) -> pl.Expr:
        return x.dt.total_milliseconds().cast(pl.Float64)

    cut = pl.min_horizontal("re", "je") - pl.max_horizontal("rs", "js")
    inside = (pl.min_horizontal("re", "e") - pl.max_horizontal("rs", "s")).clip(
        lower_bound=dt.timedelta(0)
    )
    idle = (
        allocs.select(*keys, "alloc", "s", "e", "js", "je")
        .join(runs.with_columns(pl.col("rs", "re").dt.cast_time_unit("ms")), on=keys)
        .with_columns(pl.col("s", "e", "js", "je").dt.cast_time_unit("ms"))
        .filter(ms(cut) >= min_idle_s * 1000)
        .group_by("alloc")
        .agg((ms(inside) / 3.6e6).sum().alias("idle"))
    )
    table = (
        allocs.join(used, on="alloc", how="left")
        .join(idle, on="alloc", how="left")
        .group_by("tenant")
        .agg(
            (pl.col("fraction") * (pl.col("e") - pl.col("s")).dt.total_milliseconds() / 3.6e6)
            .sum()
            .alias("allocated"),
            (pl.col("fraction") * pl.col("used").fill_null(0.0)).sum().alias("used"),
            (pl.col("fraction") * pl.col("idle").fill_null(0.0)).sum().alias("idle"),
        )
    )
    return {t: (al, us, idl) for t, al, us, idl in table.iter_rows()}


# -- Prometheus on a subset -----------------------------------------------------------------------
METRIC = "DCGM_FI_DEV_GPU_UTIL"
#: The samples of one day as dcgm-exporter lines, in time order (a pod's series carries its pod,
#: namespace and container; a GPU nobody holds reports without them, as the exporter does).
_OPENMETRICS_SQL = """
INSERT INTO FUNCTION file({path:String}, 'TSVRaw', 'line String')
SELECT concat('DCGM_FI_DEV_GPU_UTIL{gpu="', toString(gpu_index), '",UUID="', gpu_uuid,
              '",device="nvidia', toString(gpu_index), '",modelName="', gpu_model,
              '",Hostname="', node, '"',
              if(pod = '', '', concat(',container="', container, '",namespace="', namespace,
                                      '",pod="', pod, '"')),
              ',instance="', node, ':9400",job="dcgm-exporter"} ',
              toString(toUInt8(round(gpu_util_ratio * 100))), ' ', toString(toUnixTimestamp(ts)))
FROM (SELECT * FROM {db:Identifier}.gpu_samples
      WHERE ts >= {d0:DateTime64(3)} AND ts < {d1:DateTime64(3)} ORDER BY ts)
"""
#: Per namespace: the samples of pods under the threshold (the exact threshold-only answer), and
#: what PromQL's lookback adds: each ended pod series whose last sample is under the threshold
#: stays visible at every 15 s step for 5 more minutes (20 steps), within the window.
_PROM_TRUTH_SQL = """
SELECT namespace, sum(idle) AS idle_samples,
       sumIf(least(20, intDiv(toUnixTimestamp({last:DateTime64(3)}) - toUnixTimestamp(t_last),
                              {step:UInt32})), v_last < {pct:UInt8}) AS lookback_samples
FROM (
    SELECT namespace, gpu_uuid, pod, countIf(toUInt8(round(gpu_util_ratio * 100)) < {pct:UInt8})
               AS idle,
           max(ts) AS t_last, toUInt8(round(argMax(gpu_util_ratio, ts) * 100)) AS v_last
    FROM {db:Identifier}.gpu_samples
    WHERE pod != '' AND ts >= {a:DateTime64(3)} AND ts < {b:DateTime64(3)}
    GROUP BY namespace, gpu_uuid, pod
)
GROUP BY namespace
"""


def write_openmetrics(wh: Warehouse, cl: Cluster, path: Path) -> int:
    """Render the cluster's samples as one OpenMetrics file (a day at a time); its size."""
    path.write_text(f"# HELP {METRIC} GPU utilization (in %).\n# TYPE {METRIC} gauge\n")
    for d0 in range(0, cl.seconds, 86_400):
        start = cl.t0 + dt.timedelta(seconds=d0)
        wh.command(
            _OPENMETRICS_SQL,
            {"db": wh.database, "path": str(path), "d0": start, "d1": start + dt.timedelta(days=1)},
        )
    with path.open("a") as f:
        f.write("# EOF\n")
    return path.stat().st_size


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusKilled(RuntimeError):
    """The server outgrew its memory allowance during a query and was stopped."""


class Prometheus:
    """Our own Prometheus on loopback over ``tsdb`` (no scrape targets), stopped on exit.

    A watchdog stops the server when its resident memory passes ``rss_limit`` bytes: the
    machine is shared, and one PromQL subquery over weeks can take more than all of it.
    """

    def __init__(self, tsdb: Path, log: Path, rss_limit: int = 6 * 2**30):
        self.tsdb, self.log, self.rss_limit = tsdb, log, rss_limit
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss = 0
        self.killed = False

    def __enter__(self) -> Prometheus:
        self.port = _free_port()
        config = self.tsdb.parent / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.tsdb}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=100y",
                    "--query.max-samples=500000000",
                    "--query.timeout=30m",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.killed = False
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5):
                    return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"prometheus did not become ready: see {self.log}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process so far."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def _watch(self, done: threading.Event) -> None:
        while not done.wait(0.05):
            try:
                rss = self.rss()
            except (OSError, ValueError):
                return
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.rss_limit and self.proc is not None:
                self.killed = True
                self.proc.kill()
                return

    def query(self, promql: str, at: dt.datetime) -> list[dict[str, Any]]:
        """An instant query through the HTTP API; its result vector."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql, "time": f"{at.timestamp():.3f}"}
        )
        with urllib.request.urlopen(url, timeout=3600) as r:
            doc = json.load(r)
        if doc.get("status") != "success":
            raise RuntimeError(f"PromQL {promql!r} failed: {doc}")
        return list(doc["data"]["result"])

    def run(
        self, queries: list[tuple[str, dt.datetime]], workers: int
    ) -> tuple[list[list[dict[str, Any]]], float, float]:
        """Send ``queries`` (``workers`` at a time): (results, wall s, server CPU s).

        Raises :class:`PrometheusKilled` when the watchdog had to stop the server.
        """
        self.peak_rss = 0
        done = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(done,), daemon=True)
        watchdog.start()
        wall, cpu = time.perf_counter(), self.cpu_s()
        try:
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(lambda q: self.query(*q), queries))
            return results, time.perf_counter() - wall, self.cpu_s() - cpu
        except OSError as exc:
            if self.killed:
                raise PrometheusKilled(f"over {self.rss_limit / 2**30:.0f} GiB") from exc
            raise
        finally:
            done.set()
            watchdog.join()


def _namespace_to_tenant(namespace: str) -> str:
    org, _, project = namespace.partition("-")
    return f"{org}/{project}"


def promql_plans(cl: Cluster) -> dict[str, tuple[str, list[tuple[str, dt.datetime]], int]]:
    """Ways to ask PromQL for idle allocated samples per namespace over the whole window.

    Each is (description, [(query, evaluation time)], concurrent requests). The subquery's
    steps fall on the samples' timestamps (both multiples of the step from the epoch), so each
    sample is counted once, plus what the 5-minute lookback adds. A window cut into days gives
    the same counts: each day's first steps still look back into the day before.
    """
    step = cl.step_s
    sel = f'{METRIC}{{pod!=""}}'

    def count(span_s: int) -> str:
        return f"sum by (namespace) (count_over_time(({sel} < 5)[{span_s - step}s:{step}s]))"

    def bool_sum(span_s: int) -> str:
        return f"sum by (namespace) (sum_over_time(({sel} < bool 5)[{span_s - step}s:{step}s]))"

    def ends(span_s: int) -> list[dt.datetime]:
        return [
            cl.t0 + dt.timedelta(seconds=t - step) for t in range(span_s, cl.seconds + 1, span_s)
        ]

    day = 86_400
    whole = cl.t1 - dt.timedelta(seconds=step)
    return {
        "daily_count_2_at_a_time": (count(day), [(count(day), t) for t in ends(day)], 2),
        "daily_count_sequential": (count(day), [(count(day), t) for t in ends(day)], 1),
        "daily_bool_sum_2_at_a_time": (bool_sum(day), [(bool_sum(day), t) for t in ends(day)], 2),
        "one_query_whole_window": (count(cl.seconds), [(count(cl.seconds), whole)], 1),
    }


def _sum_by_tenant(
    results: list[list[dict[str, Any]]], hours_per_sample: float
) -> dict[str, float]:
    out: dict[str, float] = {}
    for result in results:
        for r in result:
            t = _namespace_to_tenant(r["metric"].get("namespace", ""))
            out[t] = out.get(t, 0.0) + float(r["value"][1]) * hours_per_sample
    return out


def bench_prometheus(
    engine: Warehouse, sc: Scale, now: dt.datetime, folder: Path
) -> dict[str, Any]:
    """The subset in Prometheus (PromQL) and in gpuledger: times, answers, their difference."""
    # One 486 h block holds the whole subset: promtool then parses the text twice, not per 2 h.
    block = 486 * 3600
    # The subset starts at the first midnight in the block (a day's window, as the CLI asks).
    start = int((now - dt.timedelta(days=sc.prom_days + 1)).timestamp()) // block * block
    start += -start % 86400
    cl = make_cluster(
        dt.datetime.fromtimestamp(start, dt.UTC),
        sc.prom_gpus,
        sc.prom_days,
        sc.prom_step_s,
        seed=2,
        align_s=60,
    )
    wh = Warehouse(engine.client, "ledger_bench_prom", engine.dsn)
    sizes = load(wh, cl)
    out: dict[str, Any] = {
        "gpus": sc.prom_gpus,
        "days": sc.prom_days,
        "step_s": sc.prom_step_s,
        "samples": sizes["gpu_samples_rows"],
        "from": cl.t0.isoformat(),
        "to": cl.t1.isoformat(),
    }
    text = folder / "dcgm-openmetrics.txt"
    started = time.perf_counter()
    out["openmetrics_bytes"] = write_openmetrics(wh, cl, text)
    out["openmetrics_write_s"] = round(time.perf_counter() - started, 1)
    tsdb = folder / "tsdb"
    started = time.perf_counter()
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--quiet",
            "--max-block-duration=504h",
            str(text),
            str(tsdb),
        ],
        check=True,
    )
    out["promtool_s"] = round(time.perf_counter() - started, 1)
    text.unlink()
    out["tsdb_bytes"] = sum(f.stat().st_size for f in tsdb.rglob("*") if f.is_file())
    print(
        f"prometheus subset: {sc.prom_gpus} GPUs x {sc.prom_days} days at {sc.prom_step_s} s, "
        f"{out['samples']:,} samples; OpenMetrics {out['openmetrics_bytes'] / 1e9:.2f} GB "
        f"(deleted), promtool {out['promtool_s']} s, TSDB {out['tsdb_bytes'] / 1e6:.0f} MB",
        flush=True,
    )

    step = sc.prom_step_s
    at = cl.t1 - dt.timedelta(seconds=step)
    hours_per_sample = step / 3600
    timings: dict[str, dict[str, Any]] = {}
    answers: dict[str, dict[str, float]] = {}
    prom = Prometheus(tsdb, folder / "prometheus.log")
    for name, (promql, queries, workers) in promql_plans(cl).items():
        runs = 3 if name == "daily_count_2_at_a_time" else 1
        walls, cpus = [], []
        try:
            with prom:
                prom.run(queries, workers)  # warm
                for _ in range(runs):
                    results, wall, cpu = prom.run(queries, workers)
                    walls.append(wall)
                    cpus.append(cpu)
        except PrometheusKilled as exc:
            timings[name] = {
                "promql": promql,
                "queries": len(queries),
                "concurrent": workers,
                "failed": f"stopped: resident memory {exc}",
            }
            print(f"PromQL {name}: stopped, the server's memory went {exc} ({promql})", flush=True)
            continue
        answers[name] = _sum_by_tenant(results, hours_per_sample)
        timings[name] = {
            "promql": promql,
            "queries": len(queries),
            "concurrent": workers,
            "runs": runs,
            "wall_s": round(statistics.median(walls), 3),
            "server_cpu_s": round(statistics.median(cpus), 3),
            "peak_rss_bytes": prom.peak_rss,
        }
        print(
            f"PromQL {name} ({len(queries)} quer{'y' if len(queries) == 1 else 'ies'}, "
            f"{workers} at a time): {timings[name]['wall_s']} s (server CPU "
            f"{timings[name]['server_cpu_s']} s, peak RSS {prom.peak_rss / 2**30:.1f} GiB): "
            f"{promql}",
            flush=True,
        )
    fastest = min(
        (n for n in timings if "wall_s" in timings[n]), key=lambda n: timings[n]["wall_s"]
    )
    answer = answers[fastest]
    agree = max(
        max_diff({t: (v,) for t, v in a.items()}, {t: (v,) for t, v in answer.items()})
        for a in answers.values()
    )

    ours: dict[str, Any] = {}
    idle: dict[str, dict[str, float]] = {}
    for source in ("rollup", "raw"):
        ledger, wall, cpu = timed(
            functools.partial(
                ledger_of,
                wh,
                cl.t0,
                cl.t1,
                source=source,
                sealed=False,
                idle_min_duration_s=0,
                idle_threshold_ratio=THRESHOLD,
            )
        )
        ours[source] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}
        idle[source] = {k: v[2] for k, v in per_tenant(ledger.rows).items()}
        print(
            f"gpuledger on the subset ({source}, threshold only): {wall:.3f} s (CPU {cpu:.3f} s)",
            flush=True,
        )
    ours["sealed"], sealed = bench_sealed(
        wh,
        cl.t0,
        cl.t1,
        {t: (v,) for t, v in idle["rollup"].items()},
        slice(2, 3),
        idle_min_duration_s=0,
        idle_threshold_ratio=THRESHOLD,
    )
    idle["sealed"] = {k: v[2] for k, v in sealed.items()}
    truth_rows = wh.rows(
        _PROM_TRUTH_SQL,
        {"db": wh.database, "a": cl.t0, "b": cl.t1, "last": at, "step": step, "pct": 5},
    )
    exact = {_namespace_to_tenant(ns): n * hours_per_sample for ns, n, _ in truth_rows}
    lookback = {_namespace_to_tenant(ns): extra * hours_per_sample for ns, _, extra in truth_rows}
    tenants = sorted(set(answer) | set(exact))
    out.update(
        {
            "promql": timings,
            "promql_fastest": fastest,
            "promql_variants_max_abs_disagreement_gpu_hours": agree,
            "gpuledger": ours,
            "ratio_promql_over_gpuledger_sealed": round(
                timings[fastest]["wall_s"] / ours["sealed"]["wall_s"], 1
            ),
            "ratio_promql_over_gpuledger_rollup": round(
                timings[fastest]["wall_s"] / ours["rollup"]["wall_s"], 1
            ),
            "ratio_promql_over_gpuledger_raw": round(
                timings[fastest]["wall_s"] / ours["raw"]["wall_s"], 1
            ),
            "idle_gpu_hours": {
                t: {
                    "promql": round(answer.get(t, 0.0), 4),
                    "gpuledger": round(idle["rollup"].get(t, 0.0), 4),
                    "exact_from_samples": round(exact.get(t, 0.0), 4),
                    "predicted_lookback_excess": round(lookback.get(t, 0.0), 4),
                }
                for t in tenants
            },
        }
    )
    totals = {
        k: sum(v[k] for v in out["idle_gpu_hours"].values())
        for k in ("promql", "gpuledger", "exact_from_samples", "predicted_lookback_excess")
    }
    out["idle_gpu_hours_total"] = {k: round(v, 4) for k, v in totals.items()}
    out["gpuledger_minus_exact_max_abs"] = max_diff(
        {t: (idle["rollup"].get(t, 0.0),) for t in tenants},
        {t: (exact.get(t, 0.0),) for t in tenants},
    )
    out["promql_minus_exact_total"] = round(totals["promql"] - totals["exact_from_samples"], 4)
    print(
        f"idle allocated GPU-hours (threshold only): PromQL {totals['promql']:.2f}, gpuledger "
        f"{totals['gpuledger']:.2f}, exact from the samples {totals['exact_from_samples']:.2f}; "
        f"PromQL over by {out['promql_minus_exact_total']:.2f} (5-minute lookback predicts "
        f"{totals['predicted_lookback_excess']:.2f}); PromQL ({fastest}) / gpuledger: "
        f"{out['ratio_promql_over_gpuledger_sealed']}x (sealed days), "
        f"{out['ratio_promql_over_gpuledger_rollup']}x (rollup), "
        f"{out['ratio_promql_over_gpuledger_raw']}x (raw)",
        flush=True,
    )
    wh.command("DROP DATABASE IF EXISTS {db:Identifier} SYNC", {"db": wh.database})
    return out


def bench_sealed(
    wh: Warehouse,
    t0: dt.datetime,
    t1: dt.datetime,
    minutes: Mapping[str, tuple[float, ...]],
    figures: slice = slice(None),
    **idle: Any,
) -> tuple[dict[str, Any], dict[str, tuple[float, float, float]]]:
    """Seal the window's days (``gpuledger seal``), then time the ledger that reads them
    (``compute_ledger`` as the CLI calls it); its answer (the per-tenant ``figures``) against
    ``minutes`` (the minute rollup's)."""
    settings = {"idle_threshold_ratio": 0.05, "idle_min_duration_s": 1800, **idle}
    started, cpu0 = time.perf_counter(), time.process_time()
    until = (t1 + dt.timedelta(days=1) - dt.timedelta(microseconds=1)).date()
    report = seal_days(
        wh,
        idle=IdleRule(settings["idle_threshold_ratio"], settings["idle_min_duration_s"]),
        now=dt.datetime.now(dt.UTC),
        since=t0.date(),
        until=until,
    )
    seal_s, seal_cpu = time.perf_counter() - started, time.process_time() - cpu0
    ledger, wall, cpu = timed(functools.partial(ledger_of, wh, t0, t1, **settings))
    answer = per_tenant(ledger.rows)
    out = {
        "seal_s": round(seal_s, 1),
        "seal_cpu_s": round(seal_cpu, 1),
        "days_sealed": len(report.sealed),
        "sealed_usage_rows": report.usage_rows,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "max_abs_diff_gpu_hours_vs_rollup": max_diff(
            {t: v[figures] for t, v in answer.items()}, minutes
        ),
    }
    print(
        f"gpuledger ledger from sealed days: {wall:.3f} s (CPU {cpu:.3f} s; median of 3 warm "
        f"runs), after `gpuledger seal` sealed {len(report.sealed)} days "
        f"({report.usage_rows:,} usage rows) in {seal_s:.1f} s; largest difference from the "
        f"rollup's figures {out['max_abs_diff_gpu_hours_vs_rollup']:.2e} GPU-hours",
        flush=True,
    )
    return out, answer


# -- the run --------------------------------------------------------------------------------------
def bench_gpuledger(
    engine: Warehouse, sc: Scale, now: dt.datetime, folder: Path, with_polars: bool
) -> dict[str, Any]:
    """The main dataset: load it, time the ledger from raw and from rollups, and polars."""
    t0 = (now - dt.timedelta(days=sc.days + 2)).replace(hour=0, minute=0, second=0, microsecond=0)
    cl = make_cluster(t0, sc.gpus, sc.days, sc.step_s)
    wh = Warehouse(engine.client, "ledger_bench", engine.dsn)
    started = time.perf_counter()
    data: dict[str, Any] = {
        "gpus": sc.gpus,
        "days": sc.days,
        "step_s": sc.step_s,
        "from": cl.t0.isoformat(),
        "to": cl.t1.isoformat(),
        **load(wh, cl),
    }
    data["load_s"] = round(time.perf_counter() - started, 1)
    print(
        f"dataset: {sc.gpus} GPUs x {sc.days} days at {sc.step_s} s = "
        f"{data['gpu_samples_rows']:,} samples ({data['gpu_samples_bytes'] / 1e9:.2f} GB "
        f"compressed; parts by default codec {data['gpu_samples_parts_by_default_codec']}; "
        f"util_ratio {data['gpu_samples_column_bytes']['util_ratio'] / 1e6:.0f} MB), "
        f"{data['jobs']:,} jobs, {data['allocations_rows']:,} allocation rows; "
        f"loaded in {data['load_s']} s (INSERT ... SELECT {data['insert_select_s']} s, "
        f"OPTIMIZE FINAL {data['optimize_final_s']} s)",
        flush=True,
    )
    out: dict[str, Any] = {"dataset": data}
    answers: dict[str, dict[str, tuple[float, float, float]]] = {}
    for source in ("rollup", "raw"):
        ledger, wall, cpu = timed(
            functools.partial(ledger_of, wh, cl.t0, cl.t1, source=source, sealed=False)
        )
        answers[source] = per_tenant(ledger.rows)
        t = ledger.totals
        out[source] = {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "allocated_gpu_hours": round(t.allocated_gpu_hours, 3),
            "used_gpu_hours": round(t.used_gpu_hours or 0.0, 3),
            "idle_gpu_hours": round(t.idle_gpu_hours or 0.0, 3),
        }
        print(
            f"gpuledger ledger from {source}: {wall:.3f} s (CPU {cpu:.3f} s; median of 3 warm "
            f"runs): allocated {t.allocated_gpu_hours:,.1f}, used {t.used_gpu_hours or 0:,.1f}, "
            f"idle {t.idle_gpu_hours or 0:,.1f} GPU-hours",
            flush=True,
        )
    out["raw_vs_rollup_max_abs_gpu_hours"] = max_diff(answers["raw"], answers["rollup"])
    out["sealed"], answers["sealed"] = bench_sealed(wh, cl.t0, cl.t1, answers["rollup"])
    if with_polars:
        out["polars"] = export_parquet(wh, folder)
        theirs, wall, cpu = timed(functools.partial(polars_ledger, folder, cl.t0, cl.t1))
        out["polars"].update(
            {
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "max_abs_diff_gpu_hours_vs_gpuledger": max_diff(theirs, answers["rollup"]),
                "ratio_polars_over_rollup": round(wall / out["rollup"]["wall_s"], 1),
                "ratio_polars_over_sealed": round(wall / out["sealed"]["wall_s"], 1),
                "ratio_polars_over_raw": round(wall / out["raw"]["wall_s"], 2),
            }
        )
        for name in ("samples", "allocations"):
            (folder / f"{name}.parquet").unlink()
        p = out["polars"]
        print(
            f"polars (scan_parquet, {p['samples_parquet_bytes'] / 1e9:.2f} GB Parquet, "
            f"exported in {p['export_s']} s): {wall:.3f} s (CPU {cpu:.3f} s); polars' time / "
            f"gpuledger's: {p['ratio_polars_over_sealed']}x (sealed days), "
            f"{p['ratio_polars_over_rollup']}x (rollup), "
            f"{p['ratio_polars_over_raw']}x (raw); largest difference in any tenant's "
            f"figure {p['max_abs_diff_gpu_hours_vs_gpuledger']:.2e} GPU-hours",
            flush=True,
        )
    wh.command("DROP DATABASE IF EXISTS {db:Identifier} SYNC", {"db": wh.database})
    return out


def machine() -> dict[str, Any]:
    """What the figures were measured on, and how busy the machine was."""
    return {
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
    }


def run(
    scale: str = "full",
    *,
    ledger: bool = True,
    prometheus: bool = True,
    polars: bool = True,
    engine: Warehouse | None = None,
) -> dict[str, Any]:
    """Run the ledger benchmark at ``scale`` (``full`` or ``quick``); print and return figures.

    ``engine``: an embedded engine already open in this process (the engine allows one data
    directory per process); the benchmark then works in its own databases there and drops
    them. Without one it opens its own under /var/tmp and deletes it afterwards.
    """
    sc = SCALES[scale]
    now = dt.datetime.now(dt.UTC)
    work = Path(tempfile.mkdtemp(prefix="gpuledger-ledger-bench-", dir="/var/tmp"))
    own = engine is None
    if engine is None:
        engine = connect(f"chdb://{work / 'engine'}", "default")
    results: dict[str, Any] = {"when": now.isoformat(), "scale": scale, "machine_before": machine()}
    try:
        if ledger:
            results["ledger"] = bench_gpuledger(engine, sc, now, work, polars)
        if prometheus:
            results["prometheus"] = bench_prometheus(engine, sc, now, work)
    finally:
        if own:
            engine.close()
        shutil.rmtree(work, ignore_errors=True)
    results["machine_after"] = machine()
    OUT.mkdir(exist_ok=True)
    (OUT / "ledger.json").write_text(json.dumps(results, indent=2))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_ledger")
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--no-prometheus", action="store_true", help="skip the PromQL part")
    parser.add_argument("--no-polars", action="store_true", help="skip the polars part")
    parser.add_argument(
        "--no-ledger", action="store_true", help="skip the main dataset (and polars)"
    )
    args = parser.parse_args(argv)
    run(
        args.scale,
        ledger=not args.no_ledger,
        prometheus=not args.no_prometheus,
        polars=not args.no_polars,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
