"""The admission webhook under load: AdmissionReviews over HTTPS into a `gpuledger serve`
process, sent by a second process, at a fixed rate (the API server's pace) and as fast as
the clients go.

The served warehouse is a simulated cluster (`gpuledger demo --no-serve`); each review is a
GPU Job in one of its tenants' namespaces, so every one is decided (allowed, warned, denied
or patched) from the snapshot. Reported: requests/s achieved, latency p50/p99 in ms, and the
decisions seen. Target: p99 under 10 ms at 200 requests/s.

Run alone with ``python -m benchmarks.bench_admission [--rate 200] [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
_CLI = [sys.executable, "-m", "gpuledger.cli"]


def review(namespace: str, n: int) -> dict[str, Any]:
    """An AdmissionReview of a one-GPU Job in ``namespace``, as the API server sends it."""
    pod = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"bench-{n}",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"job-{n}", "namespace": namespace},
                "spec": {"template": {"spec": pod}},
            },
        },
    }


def drive(url: str, ca: str, namespaces: list[str], rate: float, seconds: float,
          threads: int) -> dict[str, Any]:  # fmt: skip
    """Send reviews to ``url``: at ``rate`` per second (0: as fast as ``threads`` go)."""
    local = threading.local()
    bodies = [json.dumps(review(ns, i)).encode() for i, ns in enumerate(namespaces * 50)]
    target = urllib.parse.urlsplit(url)
    tls = ssl.create_default_context(cafile=ca or None)
    headers = {"Content-Type": "application/json"}

    def one(i: int) -> tuple[float, str]:
        # http.client on a kept-alive connection per thread, as the API server keeps one:
        # requests costs several ms of this process's CPU a call, which on a small machine
        # is taken from the server being measured.
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPSConnection(
                target.hostname or "localhost", target.port, context=tls, timeout=10
            )
        started = time.perf_counter()
        try:
            conn.request("POST", target.path, bodies[i % len(bodies)], headers)
            got = conn.getresponse()
            body = got.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            local.conn = None
            return time.perf_counter() - started, f"failed: {type(exc).__name__}"
        took = time.perf_counter() - started
        if got.status != 200:
            return took, f"http {got.status}"
        answer = json.loads(body)["response"]
        kind = "denied" if answer.get("allowed") is False else (
            "patched" if "patch" in answer else "warned" if "warnings" in answer else "allowed"
        )  # fmt: skip
        return took, kind

    results: list[tuple[float, str]] = []
    if rate:  # open loop: each request leaves on time, whatever the earlier ones took
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            # one second at the rate before the clock starts: the first TLS handshakes are
            # not counted, and connections (one per client thread the load puts to work: the
            # pool starts threads as needed) are opened and then kept alive, as the API
            # server's client keeps a few
            for warming in (True, False):
                start = time.perf_counter()
                futures = []
                for i in range(int(rate * (1.0 if warming else seconds))):
                    wait = start + i / rate - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    futures.append(pool.submit(one, i))
                concurrent.futures.wait(futures)
            results = [f.result() for f in futures]
    else:  # closed loop: every thread sends its next request as soon as it has an answer
        start = time.perf_counter()

        def worker(k: int) -> list[tuple[float, str]]:
            mine, i = [], k
            while time.perf_counter() - start < seconds:
                mine.append(one(i))
                i += threads
            return mine

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            results = [r for rs in pool.map(worker, range(threads)) for r in rs]
    took = time.perf_counter() - start
    lat = sorted(r[0] * 1000 for r in results)
    return {
        "requests": len(results),
        "requests_per_s": round(len(results) / took, 1),
        "p50_ms": round(statistics.median(lat), 2),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
        "max_ms": round(lat[-1], 2),
        "decisions": dict(Counter(r[1] for r in results)),
    }


def run(rate: float = 200, seconds: float = 20, gpus: int = 64) -> dict[str, Any]:
    """Fill a warehouse, serve it over HTTPS, and drive the webhook from a second process."""
    import trustme

    tmp = Path(tempfile.mkdtemp(prefix="gpuledger-bench-admission-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["PYTHONPATH"] = str(ROOT)
    data = str(tmp / "data")
    subprocess.run([*_CLI, "demo", "--days", "1", "--gpus", str(gpus), "--no-serve",
                    "--data-dir", data], env=env, check=True, capture_output=True)  # fmt: skip
    pairs = subprocess.run(
        [*_CLI, "sql", "SELECT pattern, tenant FROM gpuledger.tenant_rules "
         "WHERE kind = 'namespace' ORDER BY pattern", "--format", "csv", "--data-dir", data],
        env=env, check=True, capture_output=True, text=True,
    ).stdout.splitlines()[1:]  # fmt: skip
    rules = [line.split(",")[0] for line in pairs]
    denied = pairs[0].split(",")[1] if pairs else ""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    (tmp / "chain.pem").write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    port = _free_port()
    env |= {
        "GPULEDGER_SERVER__TLS_CERT_FILE": str(tmp / "chain.pem"),
        "GPULEDGER_SERVER__TLS_KEY_FILE": str(tmp / "key.pem"),
        "GPULEDGER_ADMISSION__POLICY": "deprioritise",
        "GPULEDGER_ADMISSION__TENANT_POLICIES": f"{denied}=deny" if denied else "",
    }
    server = subprocess.Popen(
        [*_CLI, "serve", "--port", str(port), "--data-dir", data],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"https://127.0.0.1:{port}"
    out: dict[str, Any] = {"gpus": gpus, "namespaces": len(rules)}
    try:
        _wait(url, str(tmp / "ca.pem"), server)
        out["settled_s"] = _settle(server.pid)
        for name, r, threads in (("paced", rate, 16), ("flat_out", 0.0, 8)):
            driver = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_admission", "--drive", url + "/admission",
                 "--ca", str(tmp / "ca.pem"), "--rate", str(r), "--seconds", str(seconds),
                 "--threads", str(threads), "--namespaces", ",".join(rules)],
                env=env, check=True, capture_output=True, text=True, cwd=ROOT,
            )  # fmt: skip
            out[name] = json.loads(driver.stdout)
            print(f"admission webhook, {name} ({r or 'max'} req/s asked): {out[name]}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settle(pid: int, quiet: float = 0.1, limit_s: float = 120.0) -> float:
    """Wait until the server's start-up work (the first snapshot, the first alert pass over a
    demo that has just ended) is done: two seconds in a row in which the process used under
    ``quiet`` of a core. The seconds it took; the measurement is of the steady state, with the
    periodic jobs still running as they do."""
    stat = Path(f"/proc/{pid}/stat")
    began = time.monotonic()

    def cpu_s() -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    calm, last = 0, cpu_s()
    while calm < 2 and time.monotonic() - began < limit_s:
        time.sleep(1.0)
        now = cpu_s()
        calm, last = (calm + 1 if now - last < quiet else 0), now
    return round(time.monotonic() - began, 1)


def _wait(url: str, ca: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if requests.get(f"{url}/healthz", verify=ca, timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            time.sleep(0.3)
    raise RuntimeError("gpuledger serve did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_admission")
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--drive", help="(the load process) the webhook's URL")
    parser.add_argument("--ca", default="")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--namespaces", default="")
    args = parser.parse_args(argv)
    if args.drive:
        names = [n for n in args.namespaces.split(",") if n] or ["default"]
        print(json.dumps(drive(args.drive, args.ca, names, args.rate, args.seconds, args.threads)))
        return 0
    run(args.rate, args.seconds, args.gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
