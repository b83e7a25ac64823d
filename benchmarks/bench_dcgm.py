"""dcgm-exporter parsing and scraping speed: our focused parser against prometheus_client's.

``run()`` prints and returns:

- ``dcgm_parse_<case>_lines_per_s`` / ``prom_client_parse_<case>_lines_per_s`` and their ratio
  ``dcgm_parse_<case>_speedup``, for the real dcgm-exporter bodies in ``tests/data/dcgm``
  (``real``), a synthetic 400-line 8-GPU body (``400``), a 30k-line 100-GPU body (``large``),
  and the 400-line body with every label set made unique (``400_unique_labels``, the worst case
  for our per-body label cache). Both parsers read every sample line (ours without the metric
  filter), so the ratio compares like with like; ``dcgm_map_<case>_lines_per_s`` is the whole
  body -> GpuSample path.
- ``dcgm_scrape_400_ms_median``: one scrape of the 400-line body through ``requests`` against
  a local HTTP server (connection reused), fetch + parse, median of 50.

Run alone with ``python -m benchmarks.bench_dcgm``.
"""

from __future__ import annotations

import datetime as dt
import http.server
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from collector.dcgm.collector import DcgmCollector, parse_detailed
from collector.dcgm.promtext import parse_text

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "dcgm"
NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

_MAPPED = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_XID_ERRORS",
]


def synthetic_body(gpus: int = 8, metrics: int = 50) -> str:
    """A dcgm-exporter-shaped body: ``metrics`` families (HELP/TYPE + one line per GPU).

    Labels as the current exporter writes them on an EKS H100 node, pod labels on GPU 0.
    """
    names = _MAPPED + [f"DCGM_FI_PROF_EXTRA_{i}" for i in range(max(0, metrics - 11))]
    lines = []
    for name in names[:metrics]:
        kind = "counter" if name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" else "gauge"
        lines += [f"# HELP {name} Synthetic help text for {name}.", f"# TYPE {name} {kind}"]
        for g in range(gpus):
            pod = (
                ',container="main",namespace="team-a",pod="trainer-0",pod_uid=""' if g == 0 else ""
            )
            lines.append(
                f'{name}{{gpu="{g}",UUID="GPU-{g:08x}-69c4-b61d-e0bc-7b2460096005",'
                f'pci_bus_id="00000000:{g + 0x53:02X}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="ip-10-0-171-111.ec2.internal",'
                f'DCGM_FI_DRIVER_VERSION="580.105.08"{pod}}} {(g * 7 + len(name)) % 100}'
            )
    return "\n".join(lines) + "\n"


def unique_labels(text: str) -> str:
    """``text`` with a distinct ``seq`` label on every sample line: no label set repeats, so
    the parser's per-body label cache cannot help (the worst case for our parser)."""
    counter = iter(range(1 << 62))
    return re.sub(r"\} ", lambda _m: f',seq="{next(counter)}"}} ', text)


def _rate(fn: Callable[[], object], lines: int, min_s: float = 0.3) -> float:
    """Sample lines per second of ``fn`` (best of 3 runs of at least ``min_s`` each)."""
    best = 0.0
    for _ in range(3):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < min_s or n == 0:
            fn()
            n += 1
        best = max(best, n * lines / elapsed)
    return best


def _prom_client(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def _sample_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() and not line.startswith("#"))


def compare(texts: list[str]) -> dict[str, float]:
    """Lines/s of both parsers (and of the full dcgm mapping) over ``texts``."""
    lines = sum(_sample_lines(t) for t in texts)
    ours = _rate(lambda: [parse_text(t) for t in texts], lines)
    theirs = _rate(lambda: [_prom_client(t) for t in texts], lines)
    mapped = _rate(lambda: [parse_detailed(t, NOW, "bench") for t in texts], lines)
    return {
        "lines": lines,
        "ours": ours,
        "prom_client": theirs,
        "mapped": mapped,
        "ratio": ours / theirs,
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def scrape_latency(text: str, scrapes: int = 50) -> float:
    """Median seconds of one fetch + parse of ``text`` from a local HTTP server."""
    handler = type("Handler", (_Handler,), {"body": text.encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        with DcgmCollector([url], "bench", retries=0) as collector:
            collector.scrape(url, NOW)  # warm the connection
            times = []
            for _ in range(scrapes):
                start = time.perf_counter()
                samples, _ = collector.scrape(url, NOW)
                times.append(time.perf_counter() - start)
                assert samples, collector.last_error
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    return statistics.median(times)


def run() -> dict[str, float]:
    """Measure and print; returns the figures for ``python -m benchmarks``."""
    real = [p.read_text() for p in sorted(DATA.glob("*.prom"))]
    body400 = synthetic_body(8, 50)
    large = synthetic_body(100, 300)
    out: dict[str, float] = {}
    cases = (
        ("real", real),
        ("400", [body400]),
        ("large", [large]),
        ("400_unique_labels", [unique_labels(body400)]),
    )
    for label, texts in cases:
        got = compare(texts)
        print(
            f"dcgm parse ({label}, {got['lines']:.0f} sample lines): ours "
            f"{got['ours']:,.0f} lines/s, prometheus_client {got['prom_client']:,.0f} lines/s "
            f"({got['ratio']:.1f}x); body -> GpuSample {got['mapped']:,.0f} lines/s"
        )
        out[f"dcgm_parse_{label}_lines_per_s"] = round(got["ours"])
        out[f"prom_client_parse_{label}_lines_per_s"] = round(got["prom_client"])
        out[f"dcgm_parse_{label}_speedup"] = round(got["ratio"], 2)
        out[f"dcgm_map_{label}_lines_per_s"] = round(got["mapped"])
    latency = scrape_latency(body400)
    print(f"dcgm scrape (400 lines via requests, local server): median {latency * 1e3:.2f} ms")
    out["dcgm_scrape_400_ms_median"] = round(latency * 1e3, 3)
    return out


if __name__ == "__main__":
    run()
