"""Kubernetes watch events per second, through the real client and ``KubernetesCollector``.

A fake API server (``tests/k8s_fake.py``, on 127.0.0.1) holds ``pods`` GPU pods' histories:
created, scheduled, running, succeeded — four watch events each, 20,000 by default. The
collector runs as in production (``run``: list, then ``kubernetes.watch.Watch`` over a chunked
HTTP stream, one JSON event per chunk) and turns each event into exactly one job event. The
figure is watch events per second from the moment the server holds them all until the sink has
received every job event. The server shares the process (and the GIL) with the client, so
writing the stream counts against the figure; encoding the events does not (a real API server
does that in its own process), and is reported apart.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from kubernetes import client as k8s

from collector.kubernetes.collector import KubernetesCollector
from collector.records import Batch, TenantRule
from collector.tenancy import TenantMapper

TESTS = Path(__file__).resolve().parents[1] / "tests"


def _fake_module() -> ModuleType:
    """``tests/k8s_fake.py``, loaded by path (``tests`` is not a package)."""
    spec = importlib.util.spec_from_file_location("k8s_fake", TESTS / "k8s_fake.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _histories(pods: int) -> list[dict[str, Any]]:
    """Four states per pod, pod by pod, from a realistic PyTorchJob worker (about 2 KB)."""
    template = json.loads((TESTS / "data" / "k8s" / "pod_pytorchjob_worker.json").read_text())
    states: list[dict[str, Any]] = []
    for i in range(pods):
        p = copy.deepcopy(template)
        p["metadata"].update(name=f"bench-{i}", uid=f"bench-uid-{i:06d}")
        states.append(copy.deepcopy(p))
        p["spec"]["nodeName"] = f"gpu-node-{i % 64:02d}"
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-03-03T10:01:00Z"}
        ]
        states.append(copy.deepcopy(p))
        p["status"].update(
            phase="Running",
            containerStatuses=[
                {
                    "name": "pytorch",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2025-03-03T10:02:00Z"}},
                }
            ],
        )
        states.append(copy.deepcopy(p))
        p["status"].update(
            phase="Succeeded",
            containerStatuses=[
                {
                    "name": "pytorch",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": "2025-03-03T10:02:00Z",
                            "finishedAt": "2025-03-03T11:02:00Z",
                        }
                    },
                }
            ],
        )
        states.append(p)
    return states


def run(pods: int = 5000) -> dict[str, float]:
    """Stream ``4 * pods`` watch events through the collector; print and return the figures."""
    fake_api = _fake_module().FakeKubeApi
    states = _histories(pods)
    expected = len(states)
    received = 0
    done = threading.Condition()

    def sink(batch: Batch) -> None:
        nonlocal received
        with done:
            received += len(batch.job_events)
            done.notify_all()

    with fake_api(kueue=False) as fake:
        api = k8s.ApiClient(k8s.Configuration(host=fake.url))
        collector = KubernetesCollector(
            api, "bench", TenantMapper([TenantRule("namespace", "ml-vision", "ml/vision")])
        )
        stop = threading.Event()
        runner = threading.Thread(target=collector.run, args=(stop, sink), name="bench-k8s")
        runner.start()
        try:
            fake.wait_for_watchers("pods")
            began = time.perf_counter()
            fake.put_many("pods", states)  # the stream waits while the server encodes
            encoded = time.perf_counter()
            with done:
                if not done.wait_for(lambda: received >= expected, timeout=600):
                    raise RuntimeError(f"only {received} of {expected} job events arrived")
            took = time.perf_counter() - encoded
        finally:
            stop.set()
            runner.join()
            api.close()
    assert collector.stats.events == expected and received == expected
    result = {
        "events": expected,
        "seconds": round(took, 3),
        "events_per_s": round(expected / took),
        "encode_seconds": round(encoded - began, 3),
    }
    print(
        f"kubernetes watch: {result['events_per_s']:>10,} events/s ({expected:,} pod events "
        f"through the real client and collector in {result['seconds']} s)",
        flush=True,
    )
    return result


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
