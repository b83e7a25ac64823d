"""The dashboard's callbacks over HTTP against a real `gpuledger serve`: latency per page and
per callback, every page in ``dash.page_registry`` (pages added later are measured as they
are registered).

The warehouse is the demo's own (``gpuledger demo --no-serve``: the simulated cluster through
validation and ingest, rollups filled by the engine), ``full``: 30 days of the demo's 1,024-GPU
configuration; ``medium``: 256 GPUs x 30 days (about a quarter of the work); ``small``: 64 GPUs
x 3 days, for a quick check. Its finished days are sealed
(``gpuledger seal``), as the server's sealer would have done, and that sealer is off while
measuring. Then, logged in as a manager through the login form, each page is loaded
``--rounds`` times with the shared filters on the last 30 days, as Dash's renderer loads it
(``benchmarks/dash_replay.py``: the shell's callbacks, the page's layout, then every server
callback of ``/_dash-dependencies`` that fires, predecessors first, fed with what they
returned), and in each round each button of the page is clicked once and each grid's first
row selected. One warm-up round is not counted.

Each page is measured twice (``--modes``): ``computed``, the server keeping no answer
(``server.dashboard_cache_s = 0``: every load computes), and ``kept``, with the server's default
answer cache (:mod:`dashboards.cache`), whose warm-up round is the cold one. Both keep the
server's live tail of today (:mod:`warehouse.ledger.tail`); ``untailed``, asked for alone, is
``computed`` without it (``server.live_tail_s = 0``: every answer computes today's last hours).

Printed and written to ``benchmarks/out/dashboard.json``: per mode, p50/p95 per page (its callbacks'
answers pooled, and the whole load: every request of it one after the other) and per
callback, flagging every callback over 300 ms at p95; the callbacks no load fired; any that
failed.

Run alone with ``python -m benchmarks.bench_dashboard --scale small|medium|full [--rounds N]
[--keep DIR]`` (``--keep``: build the warehouse in DIR, or reuse the one built there before
at the same scale: building the full one takes most of an hour).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import requests

from benchmarks.dash_replay import Call, Replay, form_login, registered_pages
from gpuledger.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_name("out")
#: The speed target: every callback under this at the 95th percentile.
TARGET_MS = 300.0
USER, PASSWORD = "bench", "bench password, not secret"


@dataclasses.dataclass(frozen=True)
class Scale:
    gpus: int
    days: int
    rounds: int


SCALES = {"full": Scale(1024, 30, 20), "medium": Scale(256, 30, 10), "small": Scale(64, 3, 10)}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["PYTHONPATH"] = str(ROOT)
    env["GPULEDGER_LEDGER__SEAL_INTERVAL_S"] = "0"  # sealed before; nothing seals meanwhile
    return env


def _cli(data: Path, *args: str, stdin: str = "") -> str:
    got = subprocess.run(
        [sys.executable, "-m", "gpuledger.cli", *args, "--data-dir", str(data)],
        env=_env(),
        input=stdin,
        capture_output=True,
        text=True,
    )
    if got.returncode:
        raise RuntimeError(f"gpuledger {' '.join(args)} failed: {got.stderr[-2000:]}")
    return got.stdout


def build(data: Path, sc: Scale) -> dict[str, Any]:
    """The demo's cluster at scale ``sc`` in ``data``, its finished days sealed, a manager
    to log in; or what an earlier run built there at the same scale."""
    marker = data / "bench-dashboard.json"
    if marker.exists():
        made = json.loads(marker.read_text())
        if (made["gpus"], made["days"]) == (sc.gpus, sc.days):
            print(f"dashboard bench: reusing the warehouse built {made['built']} in {data}")
            # what the server's sealer would have done since: the hours passed since the
            # build (and anything a newer gpuledger keeps sealed) are sealed before measuring
            started = time.perf_counter()
            again = json.loads(_cli(data, "seal", "--format", "json"))
            print(
                f"dashboard bench: sealed {len(again['sealed'])} day(s) and the stranded hours "
                f"of {len(again['stranded_hours']['sealed'])} day(s) in "
                f"{time.perf_counter() - started:.0f} s; {_hours(again)}"
            )
            return dict(made)
        raise RuntimeError(f"{data} holds a bench warehouse of another scale: {made}")
    print(f"dashboard bench: building {sc.days} days of {sc.gpus} simulated GPUs in {data} …")
    started = time.perf_counter()
    _cli(data, "demo", "--no-serve", "--days", str(sc.days), "--gpus", str(sc.gpus))
    demo_s = time.perf_counter() - started
    started = time.perf_counter()
    sealed = json.loads(_cli(data, "seal", "--format", "json"))
    seal_s = time.perf_counter() - started
    _cli(data, "user", "add", USER, "--role", "manager", "--password-stdin", stdin=PASSWORD)
    uuid = _cli(
        data,
        "sql",
        "SELECT gpu_uuid FROM gpuledger.allocations ORDER BY start_ts DESC LIMIT 1",
        "--format",
        "csv",
    ).splitlines()[1]
    made = {
        "gpus": sc.gpus,
        "days": sc.days,
        "built": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "demo_s": round(demo_s, 1),
        "seal_s": round(seal_s, 1),
        "days_sealed": len(sealed["sealed"]),
        "template_values": {"uuid": uuid},
    }
    marker.write_text(json.dumps(made, indent=2))
    print(
        f"dashboard bench: built in {demo_s:.0f} s, sealed {len(sealed['sealed'])} days in "
        f"{seal_s:.0f} s; {_hours(sealed)}",
        flush=True,
    )
    return made


def _hours(sealed: dict[str, Any]) -> str:
    """Where today's sealed hours end, from `gpuledger seal --format json`: the live part of
    every computed answer starts there."""
    until = sealed.get("hours_sealed_until")
    return f"today sealed up to {until}" if until else "today's sealed hours unchanged"


def serve(data: Path, port: int, cache_s: float, tail_s: float) -> subprocess.Popen[bytes]:
    """`gpuledger serve` over ``data`` keeping the pages' answers ``cache_s`` seconds (0: none)
    and today's live tail every ``tail_s`` (0: none), once its /healthz answers."""
    command = [sys.executable, "-m", "gpuledger.cli", "serve", "--port", str(port)]
    env = {
        **_env(),
        "GPULEDGER_SERVER__DASHBOARD_CACHE_S": str(cache_s),
        "GPULEDGER_SERVER__LIVE_TAIL_S": str(tail_s),
    }
    with (data / "bench-serve.log").open("wb") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            [*command, "--data-dir", str(data)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return proc
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server did not start: see {data / 'bench-serve.log'}")


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- measuring ------------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0-100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 50), 1),
        "p95_ms": round(percentile(values, 95), 1),
        "max_ms": round(max(values), 1),
    }


def _name(key: str) -> str:
    """A callback's outputs, short: the first and how many more."""
    outputs = key[2:-2].split("...") if key.startswith("..") else [key]
    first = outputs[0].split("@")[0]  # an allow_duplicate output's hash
    return first + (f" +{len(outputs) - 1}" if len(outputs) > 1 else "")


def replay(
    base: str, rounds: int, template_values: dict[str, str], today: dt.date
) -> dict[str, Any]:
    """Load every registered page ``rounds`` times (after one warm-up) and time each call."""
    session = form_login(base, USER, PASSWORD)
    player = Replay(session)
    query = f"?from={(today - dt.timedelta(days=29)).isoformat()}&to={today.isoformat()}"
    pages = [(p.name, p.url_path(template_values)) for p in registered_pages()]
    calls: dict[str, list[Call]] = defaultdict(list)
    loads: dict[str, list[float]] = defaultdict(list)
    for n in range(rounds + 1):
        for name, path in pages:
            load = player.load(path, query, actions=True, part=name)
            if n:  # the first round warms the server's caches and the engine's
                calls[name] += load.calls
                loads[name].append(sum(c.ms for c in load.calls if not c.action))
    return _report(player, calls, loads)


def _report(
    player: Replay, calls: dict[str, list[Call]], loads: dict[str, list[float]]
) -> dict[str, Any]:
    per_callback: dict[tuple[str, str, bool], list[float]] = defaultdict(list)
    failed: list[dict[str, Any]] = []
    for page, made in calls.items():
        for c in made:
            part = page if c.part not in ("shell", "layout") else f"({c.part})"
            per_callback[(part, c.callback, c.action)].append(c.ms)
            if c.failed:
                failed.append({"page": page, "callback": c.callback, "status": c.status})
    pages = {
        page: {
            "callbacks": _stats(
                [c.ms for c in made if c.part not in ("shell", "layout") and not c.action] or [0.0]
            ),
            "load": _stats(loads[page]),
        }
        for page, made in calls.items()
    }
    callbacks = [
        {"page": part, "callback": key, "click": action, **_stats(ms)}
        for (part, key, action), ms in sorted(per_callback.items())
    ]
    fired = {key for _, key, _ in per_callback}
    return {
        "pages": pages,
        "callbacks": callbacks,
        "over_target": [c for c in callbacks if c["p95_ms"] > TARGET_MS],
        "not_replayed": sorted(c.key for c in player.callbacks if c.key not in fired),
        "failed": failed,
    }


def show(result: dict[str, Any]) -> Iterator[str]:
    """The report's lines."""
    yield f"{'page':<28} {'callbacks p50':>14} {'p95':>8} {'whole load p50':>15} {'p95':>8}"
    for page, s in result["pages"].items():
        c, load = s["callbacks"], s["load"]
        yield (
            f"{page:<28} {c['p50_ms']:>11.1f} ms {c['p95_ms']:>5.1f} ms "
            f"{load['p50_ms']:>12.1f} ms {load['p95_ms']:>5.1f} ms"
        )
    yield f"{'page: callback (its first output)':<72} {'n':>4} {'p50':>9} {'p95':>9}"
    for c in result["callbacks"]:
        flag = f"  over {TARGET_MS:.0f} ms" if c["p95_ms"] > TARGET_MS else ""
        what = f"{c['page']}: {_name(c['callback'])}{' (click)' if c['click'] else ''}"
        yield f"{what[:72]:<72} {c['n']:>4} {c['p50_ms']:>6.1f} ms {c['p95_ms']:>6.1f} ms{flag}"
    over = result["over_target"]
    yield (
        f"{len(over)} callback(s) over {TARGET_MS:.0f} ms at p95"
        if over
        else f"every callback under {TARGET_MS:.0f} ms at p95"
    )
    for key in result["not_replayed"]:
        yield f"not replayed (no load fired it): {_name(key)}"
    for f in result["failed"]:
        yield f"FAILED {f['status']}: {_name(f['callback'])} ({f['page']})"


#: The ways a page is measured, (answer cache s, live tail s): computed at every load
#: (``server.dashboard_cache_s`` 0), with the server's default answer cache (its first round is
#: the cold one, not counted), and computed without the live tail (asked for by name alone).
MODES = {
    "computed": (0.0, ServerSettings().live_tail_s),
    "kept": (ServerSettings().dashboard_cache_s, ServerSettings().live_tail_s),
    "untailed": (0.0, 0.0),
}
DEFAULT_MODES = ("computed", "kept")


def measure(
    data: Path, made: dict[str, Any], rounds: int, mode: tuple[float, float]
) -> dict[str, Any]:
    """One `gpuledger serve` over ``data`` with the answer cache and live tail of ``mode``,
    replayed."""
    port = _port()
    server = serve(data, port, *mode)
    try:
        return replay(
            f"http://127.0.0.1:{port}",
            rounds,
            made["template_values"],
            dt.datetime.now(dt.UTC).date(),
        )
    finally:
        server.terminate()
        server.wait(timeout=120)


def run(
    scale: str = "full",
    rounds: int | None = None,
    keep: Path | None = None,
    modes: Sequence[str] = DEFAULT_MODES,
) -> dict[str, Any]:
    sc = SCALES[scale]
    data = keep or Path(tempfile.mkdtemp(prefix="gpuledger-bench-dashboard-", dir="/var/tmp"))
    data.mkdir(parents=True, exist_ok=True)
    try:
        made = build(data, sc)
        measured = {mode: measure(data, made, rounds or sc.rounds, MODES[mode]) for mode in modes}
    finally:
        if keep is None:
            shutil.rmtree(data, ignore_errors=True)
    result: dict[str, Any] = {
        "scale": scale,
        "gpus": sc.gpus,
        "days": sc.days,
        "warehouse": made,
        **measured,
    }
    for mode in modes:
        cache_s, tail_s = MODES[mode]
        print(f"-- {mode}: answer cache {cache_s:g} s, live tail {tail_s:g} s", flush=True)
        for line in show(result[mode]):
            print(line, flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "dashboard.json").write_text(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_dashboard")
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--rounds", type=int, help="page loads measured per page")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the warehouse here")
    parser.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help="computed (every load computes), kept (the default answer cache), untailed "
        "(computed, today's last hours too); comma-separated",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes {','.join(unknown)}: pick from {', '.join(MODES)}")
    result = run(args.scale, args.rounds, args.keep, modes)
    return 1 if any(result[m]["failed"] for m in modes) else 0


if __name__ == "__main__":
    sys.exit(main())
