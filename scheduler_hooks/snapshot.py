"""What the admission webhook knows, kept in memory: each tenant's idle GPUs and priority
class, and the rules that map a namespace or label to a tenant. A background thread builds a
new snapshot every few seconds from the warehouse; the webhook only ever reads the latest, so
no request waits on a query."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping

from collector.tenancy import UNMAPPED, TenantMapper
from warehouse.analytics.fleet import tenant_mapper
from warehouse.client import Warehouse
from warehouse.ledger import IdleRule, PriceBook, idle_now

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class IdleGpu:
    gpu_uuid: str
    node: str
    job_id: str
    idle_minutes: float


@dataclasses.dataclass(frozen=True)
class TenantState:
    idle: tuple[IdleGpu, ...] = ()
    priority_class: str | None = None  # from the priority feedback; None: none assigned


@dataclasses.dataclass(frozen=True)
class Snapshot:
    built_at_s: float  # epoch seconds
    tenants: Mapping[str, TenantState]
    mapper: TenantMapper

    def tenant_of(self, namespace: str, labels: Mapping[str, str]) -> str:
        """The tenant a workload belongs to by the warehouse's tenant rules; "" for none."""
        found = self.mapper.resolve(namespace=namespace, labels=labels)
        return "" if found == UNMAPPED else found


#: The priority class of each tenant ("org/project"), from the priority feedback.
Priorities = Callable[[Warehouse, dt.datetime], Mapping[str, str]]


def build_snapshot(
    wh: Warehouse,
    now: dt.datetime,
    *,
    idle: IdleRule,
    prices: PriceBook,
    cluster: str = "",
    priorities: Priorities | None = None,
) -> Snapshot:
    """The snapshot at ``now``: who holds idle GPUs (the ledger's definition of idle)."""
    held: dict[str, list[IdleGpu]] = {}
    for gpu in idle_now(wh, now, idle=idle, prices=prices, cluster=cluster):
        minutes = (gpu.until - gpu.since).total_seconds() / 60
        held.setdefault(gpu.tenant, []).append(IdleGpu(gpu.gpu_uuid, gpu.node, gpu.job_id, minutes))
    classes = dict(priorities(wh, now)) if priorities is not None else {}
    tenants = {
        t: TenantState(tuple(held.get(t, ())), classes.get(t)) for t in set(held) | set(classes)
    }
    return Snapshot(now.timestamp(), tenants, tenant_mapper(wh))


class SnapshotKeeper:
    """Builds a snapshot every ``refresh_s`` in a thread of its own; :meth:`current` is the
    latest (None before the first). A failed build is logged and the previous snapshot kept:
    it grows old, and the webhook then fails open and says so."""

    def __init__(self, build: Callable[[], Snapshot], refresh_s: float) -> None:
        self._build = build
        self._refresh_s = refresh_s
        self._current: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def current(self) -> Snapshot | None:
        return self._current  # one reference read: no lock needed

    def refresh(self) -> None:
        started = time.monotonic()
        try:
            self._current = self._build()
            self.last_error = None
        except Exception as exc:  # any failure only ages the snapshot
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("the admission snapshot could not be rebuilt: %s", self.last_error)
        log.debug("admission snapshot built in %.3f s", time.monotonic() - started)

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.refresh()
                self._stop.wait(self._refresh_s)

        self._thread = threading.Thread(target=loop, name="admission-snapshot", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
