"""A small cluster for the scheduler advice's tests, written through the real ingest.

Cluster c1, pool train, 8 H100s on two nodes, at T = 12:00 UTC on a recent day (the TTLs run on
the wall clock). Every GPU is held at T, so nothing waiting can start:

    GPU          job        tenant     since  utilisation              workload
    n1-g1,g2     nlp-busy   ml/nlp     -5h    0.40                     training
    n1-g3,g4     nlp-idle1  ml/nlp     -4h    0.01 (idle 4 h)          training
    n2-g1        nlp-idle2  ml/nlp     -6h    0.90, 0.01 from -3h      training
    n2-g2        nlp-new    ml/nlp     -20m   0.01 (idle 20 min only)  training
    n2-g3        vis-run    ml/vision  -2h    0.90                     training
    n2-g4        chat-nb    ds/chat    -10h   0.50                     notebook

Waiting at T: ml/vision's vis-wait (2 GPUs, since -2h), vis-wait2 (1, since -90m) and vis-late
(1, since -10m).

Quotas (pool train, H100):   guaranteed  borrow limit  lend limit  holds  borrowed  unused
    ml/nlp                   2           none          none        6      4         0
    ml/vision                4           2             none        1      0         3
    ds/chat                  2           0             0           1      0         1

Price: 2.50 USD per H100 GPU-hour.

Hand-computed, with the advice's defaults (idle: under 5% for 30 min; hold 30 min):
- idle borrowed GPUs of ml/nlp held long enough: nlp-idle1 (2, since -4h), nlp-idle2 (1, since
  -3h); nlp-new's 20 minutes are not idle yet.
- ml/vision waits for 3 GPUs within its guarantee (vis-wait and vis-wait2; vis-late has waited
  10 minutes only), and has 3 unused: reclaim 3 from ml/nlp, preempting nlp-idle1 then
  nlp-idle2 (oldest idle first); ml/nlp keeps 3 >= its guarantee 2. Recovered over 24 h: 72
  GPU-hours, 180.00 USD.
- ml/nlp's borrow limit: it borrows 4, 3 of them idle: lower it from none to 1.
- ds/chat's 1 unused GPU cannot be lent (lend limit 0) while ml/vision waits: lend limit 1.
- Efficiency over 7 days (used ÷ allocated GPU-hours):
    ml/nlp    (2*5*0.4 + 2*4*0.01 + 3*0.9 + 3*0.01 + 1/3*0.01) / (10 + 8 + 6 + 1/3) = 0.280
              -> low (weight 0.5)
    ml/vision 0.9 -> high (weight 2)
    ds/chat   0.5 -> normal (weight 1, the default: no advice)
- Idle limit ml/nlp=5%/1h: nlp-idle1 and nlp-idle2 over it now; over the last 30 days it would
  have saved (4-1)*2 + (3-1)*1 = 8 GPU-hours (20.00 USD).
- Interactive limit ds=8h: chat-nb has run 10 h; it would have saved 2 GPU-hours (5.00 USD).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from conftest import recent

from collector.records import GpuInventory, GpuSample, JobEvent, NodeInventory, Price, Quota
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

T = recent(dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC))
H, D, MIN = dt.timedelta(hours=1), dt.timedelta(days=1), dt.timedelta(minutes=1)
A, B, C = "ml/nlp", "ml/vision", "ds/chat"

#: job -> (tenant, GPUs, started (offset), workload type, utilisation pieces (from, util))
RUNNING = {
    "nlp-busy": (A, ("n1-g1", "n1-g2"), -5 * H, "training", ((-5 * H, 0.4),)),
    "nlp-idle1": (A, ("n1-g3", "n1-g4"), -4 * H, "training", ((-4 * H, 0.01),)),
    "nlp-idle2": (A, ("n2-g1",), -6 * H, "training", ((-6 * H, 0.9), (-3 * H, 0.01))),
    "nlp-new": (A, ("n2-g2",), -20 * MIN, "training", ((-20 * MIN, 0.01),)),
    "vis-run": (B, ("n2-g3",), -2 * H, "training", ((-2 * H, 0.9),)),
    "chat-nb": (C, ("n2-g4",), -10 * H, "notebook", ((-10 * H, 0.5),)),
}
WAITING = {
    "vis-wait": (B, 2, -2 * H),
    "vis-wait2": (B, 1, -90 * MIN),
    "vis-late": (B, 1, -10 * MIN),
}
PRICE = "2.50"


def quotas(nlp_guarantee: float = 2.0) -> list[Quota]:
    since = T - 30 * D
    return [
        Quota(since, A, "train", "H100", nlp_guarantee, None, None),
        Quota(since, B, "train", "H100", 4.0, 2.0, None),
        Quota(since, C, "train", "H100", 2.0, 0.0, 0.0),
    ]


def _common(job_id: str, tenant: str, workload: str = "training") -> dict[str, Any]:
    org, project = tenant.split("/")
    return dict(
        cluster="c1", job_id=job_id, name=f"{job_id}-pod", namespace=project, tenant=tenant,
        org=org, project=project, pool="train", queue=f"{project}-q", gpu_model="H100",
        workload_type=workload,
    )  # fmt: skip


def events() -> list[JobEvent]:
    out = []
    for job_id, (tenant, gpus, started, workload, _u) in RUNNING.items():
        common = _common(job_id, tenant, workload)
        node = gpus[0].split("-")[0]
        out += [
            JobEvent(T + started, event="submitted", gpus_requested=len(gpus), **common),
            JobEvent(T + started, event="started", gpus_requested=len(gpus), node=node,
                     gpu_uuids=gpus, **common),
        ]  # fmt: skip
    for job_id, (tenant, n, since) in WAITING.items():
        out.append(
            JobEvent(T + since, event="submitted", gpus_requested=n, **_common(job_id, tenant))
        )
    return out


def samples() -> list[GpuSample]:
    out = []
    for _tenant, gpus, started, _w, pieces in RUNNING.values():
        for gpu in gpus:
            node = gpu.split("-")[0]
            minutes = int(-started / MIN)
            for m in range(minutes):
                at = started + m * MIN
                util = next(u for since, u in reversed(pieces) if at >= since)
                out.append(GpuSample(T + at, "c1", node, gpu, 0, "H100", gpu_util_ratio=util))
    return out


def fill(wh: Warehouse, *, nlp_guarantee: float = 2.0) -> Warehouse:
    """Write the cluster into ``wh`` (a fresh database)."""
    ing = Ingestor(wh, 35, now=lambda: T + 10 * MIN)
    ing.write_nodes([NodeInventory(T - 30 * D, "c1", "train", n, "H100", 4) for n in ("n1", "n2")])
    ing.write_gpus(
        [
            GpuInventory(T - 30 * D, "c1", "train", n, f"{n}-g{i}", i, "H100")
            for n in ("n1", "n2")
            for i in (1, 2, 3, 4)
        ]
    )
    ing.write_job_events(events())
    ing.write_samples(samples())
    ing.write_config(quotas=quotas(nlp_guarantee), prices=[Price(T - 60 * D, "H100", PRICE, "USD")])
    return wh
