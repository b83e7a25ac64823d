"""The alert pass: the rules evaluated once (``gpuledger alerts check``, and `serve`'s job every
``alerts.interval_s``) on a simulated cluster, in all and rule by rule, and the read of the
waiting queue at the instant: in full for the jobs with an attempt open alone (``waiting_at``,
what the rules use) against for every job of the history (``queues.attempts``, which they
read before).

The warehouse is the demo's simulated cluster (``DemoRun``, the same jobs as ``gpuledger demo``)
at 60 s samples (the rules read the 1-minute rollup, which is as large either way), in a fresh
embedded engine under ``/var/tmp`` (deleted afterwards, or kept and reused with ``--keep DIR``).
Each figure is the median of 3 warm runs, evaluated at the end of the simulated time. Figures go
to ``benchmarks/out/alerts.json``.

Run alone with ``python -m benchmarks.bench_alerts [--gpus 256] [--days 7] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuledger.demo import DemoRun
from gpuledger.settings import AlertSettings, load_settings
from reports.alerts.evaluate import evaluate
from reports.alerts.rules import RULES, build_rules
from warehouse.analytics import queues
from warehouse.analytics.explain import waiting_at
from warehouse.client import Warehouse, connect
from warehouse.ledger import load_price_book
from warehouse.migrate import RenderOptions, migrate

OUT = Path(__file__).with_name("out")
CLUSTER = "bench"


def build(wh: Warehouse, gpus: int, days: float, now: dt.datetime) -> float:
    """Simulate ``days`` of ``gpus`` GPUs up to ``now`` into ``wh``; the seconds it took."""
    migrate(wh, RenderOptions(database=wh.database))
    settings = load_settings(
        env={},
        overrides={
            "simulator": {
                "days": days, "gpus": gpus, "seed": 0, "cluster": CLUSTER, "interval_s": 60,
            },
            "warehouse": {"database": wh.database, "raw_retention_days": max(35, int(days) + 1)},
        },
    )  # fmt: skip
    started = time.perf_counter()
    DemoRun.start(wh, settings, now=now)
    return time.perf_counter() - started


def _median_s(step: Callable[[int], Any], runs: int = 3) -> float:
    step(0)  # warm: the engine's caches, the price book
    took = []
    for i in range(1, runs + 1):
        started = time.perf_counter()
        step(i)
        took.append(time.perf_counter() - started)
    return round(statistics.median(took), 3)


def measure(wh: Warehouse, at: dt.datetime) -> dict[str, Any]:
    """The figures at ``at`` (each run a millisecond later than the one before)."""
    prices = load_price_book(wh)
    values = dataclasses.asdict(AlertSettings())
    ms = dt.timedelta(milliseconds=1)
    out: dict[str, Any] = {}
    for rule in ("all", *RULES):
        rules = build_rules({**values, "rules": ",".join(RULES) if rule == "all" else rule})
        out[f"evaluate_{rule}_s"] = _median_s(
            lambda i, r=rules: evaluate(wh, r, at + i * ms, prices=prices)
        )
    out["findings"] = len(evaluate(wh, build_rules(values), at, prices=prices).findings)
    out["waiting_bounded_s"] = _median_s(lambda i: waiting_at(wh, CLUSTER, at + i * ms))
    out["waiting_every_job_s"] = _median_s(
        lambda i: queues.attempts(wh, CLUSTER, at + i * ms, at + (i + 1) * ms)
    )
    out["waiting_attempts"] = waiting_at(wh, CLUSTER, at).height
    counts = wh.rows(
        "SELECT (SELECT count() FROM {db:Identifier}.job_events), "
        "(SELECT uniqExact(job_id) FROM {db:Identifier}.job_events)",
        {"db": wh.database},
    )[0]
    out["job_events"], out["jobs"] = counts
    return out


def run(gpus: int = 256, days: float = 7, keep: str = "") -> dict[str, Any]:
    """Build (or, with ``keep``, reuse) the cluster, measure, print, and return the figures."""
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="gpuledger-bench-alerts-"))
    stamp = folder / "now.txt"
    wh = connect(f"chdb://{folder / 'engine'}", "bench_alerts")
    try:
        results: dict[str, Any] = {"gpus": gpus, "days": days}
        if not stamp.exists():
            now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
            results["build_s"] = round(build(wh, gpus, days, now), 1)
            stamp.write_text(now.isoformat())
        now = dt.datetime.fromisoformat(stamp.read_text())
        results.update(measure(wh, now - dt.timedelta(seconds=1)))
    finally:
        wh.close()
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    per_rule = ", ".join(f"{r} {results['evaluate_' + r + '_s']} s" for r in RULES)
    print(
        f"alerts, {gpus} GPUs x {days:g} days ({results['job_events']:,} job events, "
        f"{results['jobs']:,} jobs): the pass {results['evaluate_all_s']} s ({per_rule}), "
        f"{results['findings']} findings; the waiting queue ({results['waiting_attempts']} "
        f"attempts) {results['waiting_bounded_s']} s, from every job "
        f"{results['waiting_every_job_s']} s",
        flush=True,
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "alerts.json").write_text(json.dumps(results, indent=2))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_alerts")
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--keep", default="", help="build into DIR once, reuse it afterwards")
    args = parser.parse_args(argv)
    run(args.gpus, args.days, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
