"""Agent batches per second into a `gpuledger serve` process on the embedded engine.

Many small batches (8 GPUs x 1 sample each, as a node agent sends every interval) from
several concurrent HTTP clients, into a real server process, timed from the first request to
the moment the server has written the last batch (its ``/metrics``). Twice:

- ``before``: ``server.coalesce_max_rows = 1``, so every agent batch is written with its own
  inserts (what the server did before coalescing, plus the spool's fsync);
- ``after``: the default coalescing (groups of up to 50,000 rows or 1 s);
- ``open``: the same, by a server started ``--insecure`` (no ingest tokens checked), so that
  ``after`` against ``open`` is what tokens and their checks cost.

``run()`` prints and returns, per mode: ``batches_per_s``, ``samples_per_s``, the ack
latency median and p99 in ms, and the mean group size. A fleet of 1,000 agents every 10 s
needs 100 batches/s.

Run alone with ``python -m benchmarks.bench_server [--batches N] [--clients N]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import polars as pl
import requests

from collector.records import SAMPLE_SCHEMA, Batch, GpuInventory, GpuSample
from collector.spool import dump_batch
from gpuledger.tokens import TokenStore

ROOT = Path(__file__).resolve().parents[1]
GPUS = 8


def bodies(batches: int, clients: int) -> list[list[tuple[str, bytes]]]:
    """Each client's batches: 8 GPUs of its node, one sample each, 10 s apart."""
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=3)
    out: list[list[tuple[str, bytes]]] = [[] for _ in range(clients)]
    for i in range(batches):
        node = i % clients
        ts = start + dt.timedelta(seconds=10 * (i // clients))
        rows = [
            GpuSample(ts, "bench", f"node-{node}", f"GPU-{node}-{g}", g, "H100", 0.5, source="b")
            for g in range(GPUS)
        ]
        frame = pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")
        gpus = [  # in each client's first batch, as an agent sends its GPUs' inventory first
            GpuInventory(ts, "bench", "", s.node, s.gpu_uuid, s.gpu_index, "H100")
            for s in rows
            if i < clients
        ]
        batch = Batch(samples=frame, gpus=gpus)
        out[node].append((f"node-{node}:nvml:{i}", dump_batch(batch)))
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _serve(data: Path, port: int, max_rows: int, tokens: bool) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["PYTHONPATH"] = str(ROOT)
    env["GPULEDGER_SERVER__COALESCE_MAX_ROWS"] = str(max_rows)
    cmd = [sys.executable, "-m", "gpuledger.cli", "serve", "--port", str(port)]
    if not tokens:
        cmd.append("--insecure")
    proc = subprocess.Popen(
        [*cmd, "--data-dir", str(data)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return proc
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not start")


def measure(
    max_rows: int, work: list[list[tuple[str, bytes]]], tokens: bool = True
) -> dict[str, float]:
    """Send every client's batches concurrently; time until the server wrote the last one."""
    total = sum(len(w) for w in work)
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-server-") as tmp:
        headers = {}
        if tokens:
            token, _ = TokenStore(Path(tmp) / "ingest-tokens.json").create("bench")
            headers["Authorization"] = f"Bearer {token}"
        port = _port()
        server = _serve(Path(tmp), port, max_rows, tokens)
        base = f"http://127.0.0.1:{port}"

        def client(batches: list[tuple[str, bytes]]) -> None:
            with requests.Session() as session:
                for batch_id, body in batches:
                    while True:
                        sent = time.perf_counter()
                        reply = session.post(
                            f"{base}/api/v1/ingest",
                            data=body,
                            headers={**headers, "X-Batch-Id": batch_id},
                            timeout=60,
                        )
                        if reply.status_code < 300:
                            latencies.append(time.perf_counter() - sent)
                            break
                        time.sleep(0.1)

        try:
            threads = [threading.Thread(target=client, args=(w,)) for w in work]
            began = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            acked = time.perf_counter() - began
            while True:
                text = requests.get(f"{base}/metrics", timeout=30).text
                if _metric(text, 'gpuledger_ingest_batches_total{outcome="written"}') >= total:
                    break
                time.sleep(0.02)
            took = time.perf_counter() - began
            samples = _metric(text, 'gpuledger_rows_written_total{table="gpu_samples"}')
            groups = _metric(text, "gpuledger_ingest_group_batches_count")
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
    assert samples == GPUS * total, (samples, total)
    latencies.sort()
    return {
        "batches": total,
        "seconds": round(took, 2),
        "batches_per_s": round(total / took, 1),
        "samples_per_s": round(samples / took),
        "acked_per_s": round(total / acked, 1),
        "ack_ms_median": round(statistics.median(latencies) * 1000, 1),
        "ack_ms_p99": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1),
        "batches_per_group": round(total / groups, 1),
    }


def run(batches: int = 1000, clients: int = 8) -> dict[str, object]:
    work = bodies(batches, clients)
    results: dict[str, object] = {"clients": clients, "gpus_per_batch": GPUS}
    for mode, max_rows, tokens in (
        ("before", 1, True),
        ("after", 50_000, True),
        ("open", 50_000, False),
    ):
        r = measure(max_rows, work, tokens)
        results[mode] = r
        how = "one insert per batch" if max_rows == 1 else "coalesced"
        print(
            f"server ingest {mode:<6} ({how}, {'tokens' if tokens else 'no tokens'}"
            f", {clients} clients, {batches} batches of {GPUS} samples): "
            f"{r['batches_per_s']:>7,} batches/s, {r['samples_per_s']:>7,} samples/s "
            f"(acks {r['acked_per_s']:,}/s, median {r['ack_ms_median']} ms, "
            f"p99 {r['ack_ms_p99']} ms; {r['batches_per_group']} batches/group)",
            flush=True,
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_server")
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    run(args.batches, args.clients)
    return 0


if __name__ == "__main__":
    sys.exit(main())
