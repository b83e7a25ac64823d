"""`make bench`: ingest throughput (direct, and agents' batches through a server) and demo
backfill time, on the embedded engine; then the other parts (the alert pass, the ledger at
scale, the dashboard's callbacks).

Prints one line per figure and writes them to ``benchmarks/out/results.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from collector.records import SAMPLE_SCHEMA, GpuInventory
from gpuledger.demo import DemoRun
from gpuledger.settings import load_settings
from warehouse.client import Warehouse, connect
from warehouse.ingest.writer import Ingestor
from warehouse.migrate import RenderOptions, migrate

OUT = Path(__file__).with_name("out")


def synthetic_samples(
    rows: int, start: dt.datetime, gpus: int = 1024, seed: int = 0
) -> pl.DataFrame:
    """``rows`` samples of ``gpus`` GPUs at 10 s, with realistic values and labels."""
    rng = np.random.default_rng(seed)
    idx = np.arange(rows)
    gpu = idx % gpus
    ts = np.datetime64(start.replace(tzinfo=None), "ms") + (idx // gpus) * 10_000
    util = rng.beta(0.6, 0.9, rows).astype(np.float32)
    frame = pl.DataFrame(
        {
            "ts": pl.Series(ts).dt.replace_time_zone("UTC"),
            "cluster": "bench",
            "node": pl.Series([f"node-{g // 8:04d}" for g in gpu]),
            "gpu_uuid": pl.Series([f"GPU-{g:08x}-0000-0000-0000-000000000000" for g in gpu]),
            "gpu_index": pl.Series(gpu % 8, dtype=pl.UInt16),
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "vendor": "nvidia",
            "mig_instance": "",
            "mig_profile": "",
            "gpu_util_ratio": util,
            "gr_engine_active_ratio": util * 0.9,
            "mem_util_ratio": util / 2,
            "memory_used_bytes": (util * 80e9).astype(np.uint64),
            "memory_total_bytes": np.full(rows, 80 * 2**30, dtype=np.uint64),
            "power_watts": (70 + util * 600).astype(np.float32),
            "energy_millijoules": (idx * 1000).astype(np.uint64),
            "temperature_celsius": (30 + util * 50).astype(np.float32),
            "sm_clock_mhz": np.full(rows, 1980, dtype=np.uint32),
            "tensor_active_ratio": util * 0.5,
            "xid": pl.Series([None] * rows, dtype=pl.UInt32),
            "pod": pl.Series([f"train-{g // 8}-worker" for g in gpu]),
            "namespace": "research",
            "container": "main",
            "job_id": pl.Series([f"job-{g // 8}" for g in gpu]),
            "source": "bench",
        }
    )
    return frame.cast(SAMPLE_SCHEMA)  # type: ignore[arg-type]


def inventory_of(frame: pl.DataFrame, ts: dt.datetime) -> list[GpuInventory]:
    """One inventory row per GPU of a sample frame: samples of GPUs without are quarantined."""
    gpus = frame.select("cluster", "node", "gpu_uuid", "gpu_index", "gpu_model").unique()
    return [
        GpuInventory(ts, cluster, "", node, uuid, index, model)
        for cluster, node, uuid, index, model in gpus.iter_rows()
    ]


def bench_ingest(wh: Warehouse, batch_rows: int, batches: int) -> dict[str, float]:
    database = f"bench_ingest_{batch_rows}"
    wh = Warehouse(wh.client, database, wh.dsn)
    migrate(wh, RenderOptions(database=database))
    now = dt.datetime.now(dt.UTC)
    ing = Ingestor(wh, 35)
    frames = [
        synthetic_samples(batch_rows, now - dt.timedelta(days=2, seconds=-b * 3600), seed=b)
        for b in range(batches)
    ]
    ing.write_gpus(inventory_of(frames[0], now - dt.timedelta(days=3)))  # agents send it first
    started = time.perf_counter()
    for f in frames:
        ing.write_samples(f)
    took = time.perf_counter() - started
    written = wh.rows("SELECT count() FROM {db:Identifier}.gpu_samples", {"db": database})[0][0]
    assert written == batch_rows * batches, written
    wh.command("DROP DATABASE {db:Identifier} SYNC", {"db": database})
    return {"rows": written, "seconds": round(took, 3), "rows_per_s": round(written / took)}


def bench_backfill(engine: Warehouse, days: float, gpus: int) -> dict[str, float]:
    """Backfill a simulated cluster through the real demo path (simulate, validate, insert)."""
    database = "bench_backfill"
    settings = load_settings(
        env={},
        overrides={"simulator": {"days": days, "gpus": gpus}, "warehouse": {"database": database}},
    )
    wh = Warehouse(engine.client, database, engine.dsn)
    migrate(wh, RenderOptions(database=database))
    started = time.perf_counter()
    run = DemoRun.start(wh, settings)
    took = time.perf_counter() - started
    samples = run.result.written["gpu_samples"]
    wh.command("DROP DATABASE {db:Identifier} SYNC", {"db": database})
    return {
        "samples": samples,
        "rows": sum(run.result.written.values()),
        "seconds": round(took, 2),
        "samples_per_s": round(samples / took),
    }


def bench_end_to_end(engine: Warehouse, gpus: int, steps: int) -> dict[str, float]:
    """dcgm-exporter body over HTTP → parse → pipeline → Ingestor → embedded warehouse."""
    import http.server
    import threading

    from benchmarks.bench_dcgm import _Handler, synthetic_body
    from collector.dcgm.collector import DcgmCollector
    from collector.pipeline import Pipeline
    from collector.spool import Spool
    from warehouse.ingest.sink import WarehouseSink

    database = "bench_e2e"
    wh = Warehouse(engine.client, database, engine.dsn)
    migrate(wh, RenderOptions(database=database))
    handler = type("Handler", (_Handler,), {"body": synthetic_body(gpus, 50).encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    with tempfile.TemporaryDirectory() as spool_dir, DcgmCollector([url], "bench") as dcgm:
        pipe = Pipeline([dcgm], WarehouseSink(Ingestor(wh, 35)), Spool(spool_dir), node="b")
        began = time.perf_counter()
        for i in range(steps):
            pipe.step(start + dt.timedelta(seconds=10 * i))
        took = time.perf_counter() - began
    server.shutdown()
    server.server_close()
    thread.join()
    written = wh.rows("SELECT count() FROM {db:Identifier}.gpu_samples", {"db": database})[0][0]
    assert written == pipe.stats.samples_collected, (written, pipe.stats.samples_collected)
    wh.command("DROP DATABASE {db:Identifier} SYNC", {"db": database})
    return {
        "gpus": gpus,
        "steps": steps,
        "samples": written,
        "seconds": round(took, 3),
        "samples_per_s": round(written / took),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gpuledger-bench-"))
    engine = connect(f"chdb://{tmp}", "gpuledger")
    results: dict[str, object] = {"when": dt.datetime.now(dt.UTC).isoformat()}
    try:
        for batch_rows, batches in (
            (10_000, 3 if args.quick else 30),
            (100_000, 2 if args.quick else 10),
        ):
            r = bench_ingest(engine, batch_rows, batches)
            results[f"ingest_batch_{batch_rows}"] = r
            print(
                f"ingest, batches of {batch_rows:>7,}: {r['rows_per_s']:>10,} rows/s "
                f"({r['rows']:,} rows in {r['seconds']} s)",
                flush=True,
            )
        gpus_e2e, steps = (64, 5) if args.quick else (512, 30)
        r = bench_end_to_end(engine, gpus_e2e, steps)
        results["end_to_end"] = r
        print(
            f"end to end (dcgm scrape of {gpus_e2e} GPUs -> parse -> pipeline -> embedded "
            f"warehouse, {steps} steps): {r['samples_per_s']:,} samples/s",
            flush=True,
        )
        days, gpus = (0.5, 16) if args.quick else (7, 64)
        r = bench_backfill(engine, days, gpus)
        results["backfill"] = {"days": days, "gpus": gpus, **r}
        print(
            f"backfill {days:g} days x {gpus} GPUs at 10 s: {r['seconds']} s "
            f"({r['samples']:,} samples, {r['samples_per_s']:,} samples/s, "
            f"{r['rows']:,} rows in all)",
            flush=True,
        )
    finally:
        engine.close()
        shutil.rmtree(tmp, ignore_errors=True)
    from benchmarks import bench_dcgm, bench_kubernetes, bench_nvml, bench_server

    # Agents' small batches into a `gpuledger serve` process, one insert per batch against
    # coalesced (a server subprocess: started after this process closed its engine).
    results["server_ingest"] = bench_server.run(200 if args.quick else 1000)
    results["dcgm"] = bench_dcgm.run()
    results["nvml"] = bench_nvml.run(polls=100 if args.quick else 500)
    results["kubernetes"] = bench_kubernetes.run(1000 if args.quick else 5000)
    # The admission webhook over HTTPS from a second process: 200 requests/s, then flat out.
    from benchmarks import bench_admission

    results["admission"] = bench_admission.run(seconds=5 if args.quick else 20)
    # The alert pass on a simulated cluster, rule by rule, and its read of the waiting queue.
    from benchmarks import bench_alerts

    results["alerts"] = bench_alerts.run(32 if args.quick else 256, 1 if args.quick else 7)
    # The ledger at scale: 30 days of 1,024 GPUs from raw and rollups, against polars on
    # Parquet and Prometheus on a subset (long: it builds the data set; see bench_ledger.py).
    from benchmarks import bench_ledger

    results["ledger"] = bench_ledger.run("quick" if args.quick else "full")
    # Every registered page's callbacks over HTTP against a served demo warehouse (full: 30
    # days of 1,024 GPUs, built with `gpuledger demo`: long; see bench_dashboard.py).
    from benchmarks import bench_dashboard

    results["dashboard"] = bench_dashboard.run("small" if args.quick else "full")
    OUT.mkdir(exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
