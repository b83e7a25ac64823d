"""collect → enrich → batch → sink, with the spool in between when the sink is down.

A :class:`Pipeline` runs its sources each step, passes the batch through the enrichers chosen
from settings (dcgm-exporter's transformations: pod mapper, Slurm job mapper), gives it an id
once, and hands it to a :class:`Sink`. A sink that fails puts the batch in the :class:`Spool`;
while anything is spooled, new batches queue behind it so the warehouse receives them in order.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

import requests

from collector.records import Batch
from collector.spool import Spool, dump_batch

log = logging.getLogger(__name__)


class SinkUnavailable(Exception):
    """The sink could not take the batch now; it will be retried from the spool, not before
    ``retry_after_s`` when the sink said how long to wait.

    Control flow between a sink and the pipeline, never shown to a user, so not a
    :class:`gpuledger_errors.GpuledgerError`.
    """

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SinkRejected(Exception):
    """The sink refused the batch itself; retrying would fail forever, so it is set aside.

    Control flow between a sink and the pipeline, like :class:`SinkUnavailable`.
    """


class Sink(Protocol):
    def send(self, batch: Batch, batch_id: str) -> None:
        """Deliver ``batch`` (idempotently by ``batch_id``) or raise :class:`SinkUnavailable`."""


class Source(Protocol):
    name: str

    def collect(self, now: dt.datetime) -> Batch: ...


Enricher = Callable[[Batch], Batch]


class HttpSink:
    """Posts batches to a ``gpuledger serve`` process's ``/api/v1/ingest`` endpoint."""

    def __init__(
        self,
        url: str,
        session: requests.Session | None = None,
        timeout_s: float = 30.0,
        token: str = "",
        verify: str | bool = True,
    ):
        self.url = url.rstrip("/") + "/api/v1/ingest"
        self.session = session or requests.Session()
        self.timeout_s = timeout_s
        self.token = token
        # per request, since a session's own verify loses to REQUESTS_CA_BUNDLE
        self.verify = verify

    def send(self, batch: Batch, batch_id: str) -> None:
        headers = {"Content-Type": "application/vnd.gpuledger.batch", "X-Batch-Id": batch_id}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            reply = self.session.post(
                self.url,
                data=dump_batch(batch),
                headers=headers,
                timeout=self.timeout_s,
                verify=self.verify,
            )
        except requests.RequestException as exc:
            raise SinkUnavailable(f"{self.url}: {exc}") from exc
        if reply.status_code >= 500 or reply.status_code in (408, 429):
            raise SinkUnavailable(
                f"{self.url}: HTTP {reply.status_code}",
                retry_after(reply.headers.get("Retry-After", "")),
            )
        if reply.status_code >= 400:
            raise SinkRejected(
                f"{self.url} rejected batch {batch_id}: HTTP {reply.status_code} {reply.text[:300]}"
            )

    def close(self) -> None:
        self.session.close()


def retry_after(value: str) -> float | None:
    """A ``Retry-After`` header as seconds from now: delta-seconds or an HTTP date; None when
    absent or unreadable (the caller backs off on its own)."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


@dataclasses.dataclass
class PipelineStats:
    batches_sent: int = 0
    rows_sent: int = 0
    samples_collected: int = 0
    batches_spooled: int = 0
    send_failures: int = 0
    last_success: dt.datetime | None = None
    source_errors: dict[str, int] = dataclasses.field(default_factory=dict)


class Pipeline:
    """Runs ``sources`` → ``enrichers`` → ``sink``, spooling while the sink is down."""

    def __init__(
        self,
        sources: Sequence[Source],
        sink: Sink,
        spool: Spool,
        enrichers: Sequence[Enricher] = (),
        node: str = "",
        *,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ):
        self.sources = list(sources)
        self.sink = sink
        self.spool = spool
        self.enrichers = list(enrichers)
        self.node = node
        self.stats = PipelineStats()
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        self._rng = rng or random.Random()
        self._failures = 0  # in a row
        self._not_before = 0.0  # no delivery is tried before this clock reading
        self._lock = threading.Lock()

    def collect(self, now: dt.datetime) -> list[tuple[Batch, str]]:
        """One batch per source, enriched and named. A failing source is logged and counted."""
        out = []
        for source in self.sources:
            try:
                batch = source.collect(now)
            except Exception as exc:  # a source bug must not stop the other sources
                self.stats.source_errors[source.name] = (
                    self.stats.source_errors.get(source.name, 0) + 1
                )
                log.error("source %s failed: %s", source.name, exc)
                continue
            for enrich in self.enrichers:
                batch = enrich(batch)
            self.stats.samples_collected += len(batch.samples)
            if len(batch):
                out.append(
                    (
                        batch,
                        f"{self.node}:{source.name}:{now:%Y%m%dT%H%M%S}:{uuid.uuid4().hex[:12]}",
                    )
                )
        return out

    def step(self, now: dt.datetime) -> None:
        """Collect once and deliver (or spool) what was collected."""
        for batch, batch_id in self.collect(now):
            self.deliver(batch, batch_id)

    @property
    def backing_off_s(self) -> float:
        """How long until the next delivery is tried (0: now)."""
        return max(0.0, self._not_before - self._clock())

    def deliver(self, batch: Batch, batch_id: str) -> None:
        """Send ``batch``, or keep it in the spool while the sink is down or the pipeline is
        backing off (then the spool is sent first, oldest first)."""
        with self._lock:
            waiting = self.backing_off_s > 0
            if self.spool.depth == 0 and not waiting:
                try:
                    self._send(batch, batch_id)
                    return
                except SinkUnavailable as exc:
                    self._back_off(exc)
                    log.warning("sink unavailable, spooling batch %s: %s", batch_id, exc)
                except SinkRejected as exc:
                    self.spool.set_aside(batch, batch_id, str(exc))
                    return
            if self.spool.put(batch, batch_id):
                self.stats.batches_spooled += 1
            if self.backing_off_s == 0:
                self._drain()

    def flush(self) -> bool:
        """Send what is spooled now, backing off or not (at stop); True when the spool is
        empty afterwards."""
        with self._lock:
            return self._drain()

    def _drain(self) -> bool:
        for item in self.spool.pending():
            try:
                self._send(item.load(), item.batch_id)
            except SinkUnavailable as exc:
                self._back_off(exc)
                return False
            except SinkRejected as exc:
                self.spool.set_aside(item.load(), item.batch_id, str(exc))
            self.spool.ack(item)
        return True

    def _back_off(self, exc: SinkUnavailable) -> None:
        """Wait before the next try: as long as the sink asked (Retry-After), else 1 s doubled
        at each failure in a row up to ``max_backoff_s``; stretched by up to half at random,
        so that many agents refused at once do not all come back at once."""
        self.stats.send_failures += 1
        self._failures += 1
        delay = exc.retry_after_s
        if delay is None:
            delay = min(self.max_backoff_s, 2.0 ** (self._failures - 1))
        self._not_before = self._clock() + delay * (1 + self._rng.random() / 2)

    def _send(self, batch: Batch, batch_id: str) -> None:
        self.sink.send(batch, batch_id)
        self._failures = 0
        self.stats.batches_sent += 1
        self.stats.rows_sent += len(batch)
        self.stats.last_success = dt.datetime.now(dt.UTC)
