"""NVML poll cost: microseconds per GPU per ``NvmlCollector.collect``, through the real pynvml
bindings against the stand-in ``libnvidia-ml.so.1`` (``tests/nvml_stub``), so no GPU is
needed. What it measures is our side of a poll — pynvml's ctypes calls, the error policy,
record building and the cgroup reads that map processes to owners — not the driver's own
latency, which a real GPU adds on top (tens of µs per call).

The poll runs in a child process so that the stand-in is loaded there and never in the
caller's process (pynvml keeps the first library it loads for the life of a process).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "tests" / "nvml_stub" / "__init__.py"

_CHILD = """
import datetime as dt, json, sys, time
from collector.nvml import NvmlCollector, PynvmlBackend
library, proc, polls = sys.argv[1], sys.argv[2], int(sys.argv[3])
col = NvmlCollector(PynvmlBackend.open(library_path=library), cluster="bench", node="n",
                    proc_root=proc)
now = dt.datetime.now(dt.UTC)
t = time.perf_counter(); inv = col.inventory(now); inventory_s = time.perf_counter() - t
for _ in range(5):
    col.collect(now)
t = time.perf_counter()
for _ in range(polls):
    poll = col.collect(now)
took = time.perf_counter() - t
col.close()
print(json.dumps({"gpus": len(inv), "polls": polls, "seconds": took,
                  "inventory_ms": inventory_s * 1e3, "samples": len(poll.samples),
                  "processes": len(poll.processes), "rejects": len(poll.rejects)}))
"""


def _stub_helpers() -> ModuleType:
    """``tests/nvml_stub`` (build + config), loaded by path: ``tests`` is not a package."""
    name = "_gpuledger_bench_nvml_stub"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, STUB)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _node(stub: ModuleType, gpus: int, proc: Path) -> Any:
    """``gpus`` busy H100s, two processes each (one pod, one Slurm job), with cgroup files."""
    uid = "8dbc5577-d0e2-4706-8787-57d52c03ddf2"
    devices = []
    for i in range(gpus):
        pod_pid, job_pid = 10_000 + 2 * i, 10_001 + 2 * i
        for pid, path in (
            (pod_pid, f"/kubepods/burstable/pod{uid}/{'a' * 64}"),
            (job_pid, f"/system.slice/slurmstepd.scope/job_{i}/step_0"),
        ):
            (proc / str(pid)).mkdir(parents=True)
            (proc / str(pid) / "cgroup").write_text(f"0::{path}\n")
        devices.append(
            stub.StubDevice(
                name=stub.H100,
                uuid=f"GPU-{i:08x}-0000-4000-8000-000000000000",
                pci=f"00000000:{0x18 + i:02X}:00.0",
                serial=f"16549220{i:05d}",
                cc=(9, 0),
                mem_total=80 * stub.GIB,
                mem_used=40 * stub.GIB,
                util=(90, 40),
                power_mw=650_000,
                energy_mj=10**9,
                temp=65,
                sm_clock=1980,
                procs=[(pod_pid, 20 * stub.GIB), (job_pid, 20 * stub.GIB)],
                procutil=[(pod_pid, 50, 20), (job_pid, 40, 20)],
            )
        )
    return stub.StubConfig(devices=devices)


def run(polls: int = 500, gpus: int = 8) -> dict[str, Any]:
    """Poll ``gpus`` stand-in GPUs ``polls`` times; print one line, return the figures."""
    stub = _stub_helpers()
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-nvml-") as tmp:
        library = stub.build(Path(tmp))
        if library is None:
            print("nvml poll: skipped (no C compiler to build the NVML stand-in)", flush=True)
            return {"skipped": "no C compiler"}
        proc = Path(tmp) / "proc"
        config = _node(stub, gpus, proc).write(Path(tmp) / "nvml_stub.conf")
        env = {**os.environ, "NVML_STUB_CONFIG": str(config), "PYTHONPATH": str(ROOT)}
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(library), str(proc), str(polls)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    if child.returncode != 0:
        raise RuntimeError(f"the NVML poll benchmark failed:\n{child.stderr}")
    r = json.loads(child.stdout)
    per_poll_us = r["seconds"] / r["polls"] * 1e6
    result = {
        "gpus": r["gpus"],
        "polls": r["polls"],
        "us_per_poll": round(per_poll_us, 1),
        "us_per_gpu_poll": round(per_poll_us / r["gpus"], 1),
        "inventory_ms": round(r["inventory_ms"], 2),
        "processes_per_poll": r["processes"],
        "rejects": r["rejects"],
    }
    print(
        f"nvml poll (stand-in library): {result['us_per_gpu_poll']:,} µs per GPU per poll "
        f"({r['gpus']} GPUs, {r['processes']} processes, {r['polls']} polls, "
        f"{result['us_per_poll']:,} µs per poll; inventory {result['inventory_ms']} ms)",
        flush=True,
    )
    return result


if __name__ == "__main__":
    run()
