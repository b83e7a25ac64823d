"""Hand-made clusters for the alert tests, written through the real ingest path.

Times are offsets from ``T`` (a recent morning, so the warehouse's retention keeps them);
samples are one a minute; H100 costs ``PRICE`` per GPU-hour (A100 has no price). Each test
file draws its own cluster with these pieces and writes down the truth it expects.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal

import polars as pl
from conftest import recent

from collector.records import (
    SAMPLE_SCHEMA,
    GpuHealth,
    GpuInventory,
    JobEvent,
    Price,
    Quota,
)
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

T = recent(dt.datetime(2026, 11, 20, 6, 0, tzinfo=dt.UTC))
PRICE = Decimal("2.00")
MINUTE = dt.timedelta(minutes=1)
#: When the inventory says the GPUs appeared: a day before T.
BEFORE = T - dt.timedelta(days=1)


def at(hours: float = 0.0, minutes: float = 0.0) -> dt.datetime:
    """T + ``hours`` + ``minutes``."""
    return T + dt.timedelta(hours=hours, minutes=minutes)


class Cluster:
    """A cluster ``c1`` being written into ``wh``: GPUs, samples, jobs, health, config."""

    def __init__(
        self, wh: Warehouse, cluster: str = "c1", now: dt.datetime = T + dt.timedelta(days=1)
    ) -> None:
        self.wh, self.cluster = wh, cluster
        self.ing = Ingestor(wh, 35, now=lambda: now)
        self._index = 0
        self.models: dict[str, str] = {}
        self.nodes: dict[str, str] = {}
        self.pools: dict[str, str] = {}

    def gpus(
        self,
        *uuids: str,
        node: str = "n1",
        model: str = "H100",
        pool: str = "p1",
        health: str = "healthy",
        reason: str = "",
        ts: dt.datetime = BEFORE,
    ) -> None:
        rows = []
        for uuid in uuids:
            self.models[uuid], self.nodes[uuid], self.pools[uuid] = model, node, pool
            rows.append(
                GpuInventory(
                    ts, self.cluster, pool, node, uuid, self._index, model,
                    health=health, health_reason=reason, source="test",
                )
            )  # fmt: skip
            self._index += 1
        assert self.ing.write_gpus(rows).quarantined_total == 0

    def samples(
        self,
        uuid: str,
        start: dt.datetime,
        end: dt.datetime,
        util: float,
        *,
        xid: int | None = None,
    ) -> None:
        """One sample a minute in [start, end) at ``util`` (and ``xid`` on each, when given)."""
        rows = []
        t = start
        while t < end:
            rows.append(
                (
                    t, self.cluster, self.nodes[uuid], uuid, 0, self.models[uuid], "nvidia",
                    "", "", util, None, None, None, None, 100.0, None, 40.0, 1500, None, xid,
                    "", "", "", "", "test",
                )
            )  # fmt: skip
            t += MINUTE
        frame = pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")
        assert self.ing.write_samples(frame).quarantined_total == 0

    def _event(self, job: str, tenant: str, event: str, ts: dt.datetime, **kw: object) -> JobEvent:
        org, _, project = tenant.partition("/")
        return JobEvent(
            ts, self.cluster, job, event, tenant=tenant, org=org, project=project,
            **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    def job(
        self,
        job: str,
        tenant: str,
        gpus: Sequence[str],
        start: dt.datetime,
        end: dt.datetime | None = None,
        *,
        submitted: dt.datetime | None = None,
    ) -> None:
        """A job that runs on ``gpus`` from ``start`` (to ``end``, when given)."""
        model, node, pool = self.models[gpus[0]], self.nodes[gpus[0]], self.pools[gpus[0]]
        kw = {
            "pool": pool,
            "gpu_model": model,
            "gpus_requested": float(len(gpus)),
            "node": node,
            "gpu_uuids": tuple(gpus),
        }
        events = [
            self._event(job, tenant, "submitted", submitted or start - 5 * MINUTE, **kw),
            self._event(job, tenant, "started", start, **kw),
        ]
        if end is not None:
            events.append(self._event(job, tenant, "finished", end, started_at=start, **kw))
        assert self.ing.write_job_events(events).quarantined_total == 0

    def end(
        self, job: str, tenant: str, gpus: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> None:
        """``job`` (started at ``start`` on ``gpus``) finishes at ``end``."""
        kw = {
            "pool": self.pools[gpus[0]],
            "gpu_model": self.models[gpus[0]],
            "gpu_uuids": tuple(gpus),
        }
        event = self._event(job, tenant, "finished", end, started_at=start, **kw)
        assert self.ing.write_job_events([event]).quarantined_total == 0

    def waiting(
        self,
        job: str,
        tenant: str,
        submitted: dt.datetime,
        *,
        model: str,
        pool: str = "p1",
        gpus: float = 1.0,
    ) -> None:
        """A job submitted at ``submitted`` that has not started."""
        event = self._event(
            job, tenant, "submitted", submitted, pool=pool, gpu_model=model, gpus_requested=gpus
        )
        assert self.ing.write_job_events([event]).quarantined_total == 0

    def health(self, uuid: str, times: Sequence[dt.datetime], **counters: object) -> None:
        rows = [
            GpuHealth(t, uuid, cluster=self.cluster, node=self.nodes[uuid], **counters)  # type: ignore[arg-type]
            for t in times
        ]
        assert self.ing.write_health(rows).quarantined_total == 0

    def config(self, quotas: Sequence[Quota] = ()) -> None:
        """The price book (H100 at PRICE) and ``quotas``."""
        self.ing.write_config(prices=[Price(BEFORE, "H100", str(PRICE))], quotas=list(quotas))
