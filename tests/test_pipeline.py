"""Agent delivery: spool, replay, and no sample lost or doubled across a sink outage."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import recent
from werkzeug.serving import make_server

from collector.pipeline import HttpSink, Pipeline, SinkUnavailable, retry_after
from collector.records import (
    SAMPLE_SCHEMA,
    Batch,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    GpuSample,
    JobEvent,
    Reject,
)
from collector.spool import Spool, dump_batch, load_batch
from gpuledger.server import register
from warehouse.client import Warehouse
from warehouse.ingest.coalesce import Coalescer

T0 = recent(dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC))


def samples_at(now: dt.datetime, gpus: int = 4) -> pl.DataFrame:
    rows = [
        GpuSample(now, "c1", "n1", f"GPU-{g}", g, "H100", gpu_util_ratio=g / 10, source="test")
        for g in range(gpus)
    ]
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


def inventory_at(now: dt.datetime, gpus: int = 4) -> list[GpuInventory]:
    return [GpuInventory(now, "c1", "", "n1", f"GPU-{g}", g, "H100") for g in range(gpus)]


class CountingSource:
    """A source that reports 4 GPUs every step: what a node agent's NVML poll returns (the
    first step with their inventory)."""

    name = "test"

    def __init__(self) -> None:
        self.steps = 0

    def collect(self, now: dt.datetime) -> Batch:
        self.steps += 1
        return Batch(samples=samples_at(now), gpus=inventory_at(now) if self.steps == 1 else ())


def test_batches_survive_the_disk_round_trip(tmp_path: Path) -> None:
    batch = Batch(
        samples=samples_at(T0),
        gpus=[GpuInventory(T0, "c1", "p", "n1", "GPU-0", 0, "H100", memory_total_bytes=None)],
        job_events=[JobEvent(T0, "c1", "j1", "started", gpu_uuids=("GPU-0",), started_at=T0)],
        rejects=[Reject("dcgm", "gpu_sample", "line", "x{", "broken", "x{ 1")],
        processes=[
            GpuProcess(T0, "GPU-0", "", 2101, 2**34, 0.7, "uid-1", "0a3b", "", "c1", "n1"),
            GpuProcess(T0, "GPU-0", "13", 2202, None, None, slurm_job_id="456", cluster="c1"),
        ],
        health=[
            GpuHealth(T0, "GPU-0", 0x4, 0, 2, 0, False, True, cluster="c1", node="n1"),
            GpuHealth(T0, "GPU-1", gpu_lost=True, cluster="c1", node="n1"),
        ],
    )
    back = load_batch(dump_batch(batch))
    assert back.samples.equals(batch.samples)
    assert list(back.gpus) == list(batch.gpus)
    assert list(back.job_events) == list(batch.job_events)
    assert list(back.rejects) == list(batch.rejects)
    assert list(back.processes) == list(batch.processes)
    assert list(back.health) == list(batch.health)
    assert back.health[0].remapped_rows_failure is True and back.health[1].ecc_dbe_volatile is None
    assert len(back) == len(batch) == 4 + 1 + 1 + 1 + 2 + 2
    with pytest.raises(ValueError, match="not a gpuledger batch"):
        load_batch(b"garbage")


def test_spool_is_oldest_first_bounded_and_survives_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    one = len(dump_batch(Batch(samples=samples_at(T0))))
    spool = Spool(tmp_path / "s", max_bytes=3 * one + 10)
    for i in range(3):
        assert spool.put(Batch(samples=samples_at(T0 + dt.timedelta(seconds=i))), f"b{i}")
    assert not spool.put(Batch(samples=samples_at(T0 + dt.timedelta(seconds=9))), "b9")
    assert spool.dropped_batches == 1 and "is full" in caplog.text
    (tmp_path / "s" / "000000000099-partial.tmp").write_bytes(b"half a batch")
    reopened = Spool(tmp_path / "s", max_bytes=3 * one + 10)  # after a crash
    items = list(reopened.pending())
    assert [i.batch_id for i in items] == ["b0", "b1", "b2"]
    assert not list((tmp_path / "s").glob("*.tmp"))
    reopened.ack(items[0])
    assert reopened.depth == 2
    assert reopened.put(Batch(samples=samples_at(T0)), "b3")
    assert [i.batch_id for i in reopened.pending()] == ["b1", "b2", "b3"]


def test_spooled_batch_ids_read_back_as_given(tmp_path: Path) -> None:
    """A re-sent batch must carry its original id (the deduplication token), whatever the
    node name holds: dashes, slashes, percent signs."""
    spool = Spool(tmp_path / "s")
    ids = ["gpu-node-1:nvml:20261120T100000:ab12", "a/b%2F c", "plain_id.1:x"]
    for batch_id in ids:
        assert spool.put(Batch(samples=samples_at(T0)), batch_id)
    assert [i.batch_id for i in Spool(tmp_path / "s").pending()] == ids
    assert spool.depth == 3 and spool.size_bytes == sum(
        p.stat().st_size for p in (tmp_path / "s").glob("*.batch")
    )
    (tmp_path / "s" / "000000000009-old_style_id.batch").write_bytes(b"x")  # before encoding
    assert list(Spool(tmp_path / "s").pending())[-1].batch_id == "old_style_id"


class FlakyWsgi:
    """Wraps the server: while ``down`` every request fails; ``lose_reply`` writes the batch
    and then breaks the reply, as when the connection dies after the warehouse took it."""

    def __init__(self, app: object):
        self.app = app
        self.down = False
        self.lose_reply = 0

    def __call__(self, environ: dict, start_response: object) -> Iterator[bytes]:
        if self.down:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return iter([b"down"])
        if self.lose_reply and environ["PATH_INFO"] == "/api/v1/ingest":
            self.lose_reply -= 1
            body = b"".join(self.app(environ, lambda *a, **k: None))  # type: ignore[operator]
            del body
            start_response("502 Bad Gateway", [("Content-Type", "text/plain")])
            return iter([b"reply lost"])
        return self.app(environ, start_response)  # type: ignore[operator]


@pytest.fixture
def server(wh: Warehouse, tmp_path: Path) -> Iterator[tuple[str, FlakyWsgi, Coalescer]]:
    import flask

    app = flask.Flask("test-server")
    coalescer = Coalescer(
        wh, 35, tmp_path / "server-spool", max_ms=50, now=lambda: T0 + dt.timedelta(hours=1)
    )
    register(app, wh, coalescer, tokens=None)
    coalescer.start()
    flaky = FlakyWsgi(app.wsgi_app)
    srv = make_server("127.0.0.1", 0, flaky, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}", flaky, coalescer
    srv.shutdown()
    thread.join()
    srv.server_close()
    coalescer.stop()


def test_an_outage_loses_no_sample_and_doubles_none(
    server: tuple[str, FlakyWsgi, Coalescer], wh: Warehouse, tmp_path: Path
) -> None:
    url, flaky, coalescer = server
    sink = HttpSink(url, timeout_s=10)
    clock = [0.0]  # the pipeline's backoff runs on the steps' time: 10 s apart
    pipe = Pipeline(
        [CountingSource()], sink, Spool(tmp_path / "spool"), node="n1", clock=lambda: clock[0]
    )
    steps = [T0 + dt.timedelta(seconds=10 * i) for i in range(30)]
    for i, now in enumerate(steps):
        clock[0] = 10.0 * i
        if i == 5:
            flaky.down = True  # the warehouse side goes away for 10 steps
        if i == 15:
            flaky.down = False
            flaky.lose_reply = 2  # it comes back, but the first two replies are lost
        pipe.step(now)
        if 5 <= i < 15:
            assert pipe.spool.depth == i - 4  # everything since the outage waits, in order
    assert pipe.flush() and pipe.spool.depth == 0
    sink.close()
    assert coalescer.drain()
    rows = wh.rows(f"SELECT count(), uniqExact(gpu_uuid, ts) FROM {wh.database}.gpu_samples")
    assert rows == [(30 * 4, 30 * 4)]
    hourly = wh.rows(f"SELECT sum(samples) FROM {wh.database}.gpu_samples_1h")
    assert hourly == [(30 * 4,)]


def test_server_health_metrics_and_refusals(server: tuple[str, FlakyWsgi, Coalescer]) -> None:
    import requests

    url, _, coalescer = server
    with requests.Session() as s:
        health = s.get(f"{url}/healthz").json()
        assert health["status"] == "ok" and health["spool_batches"] == 0
        sink = HttpSink(url, session=s)
        sink.send(Batch(samples=samples_at(T0), gpus=inventory_at(T0)), "b-1")
        assert coalescer.drain()
        text = s.get(f"{url}/metrics").text
        assert 'gpuledger_rows_written_total{table="gpu_samples"} 4.0' in text
        bad = s.post(f"{url}/api/v1/ingest", data=b"nonsense", headers={"X-Batch-Id": "x"})
        assert bad.status_code == 400 and "not a gpuledger batch" in bad.json()["error"]
        unnamed = s.post(f"{url}/api/v1/ingest", data=dump_batch(Batch()))
        assert unnamed.status_code == 400 and "X-Batch-Id" in unnamed.json()["error"]


class RefusingSink:
    """A sink that is down for its first ``refusals`` sends, asking ``retry_after_s`` (None:
    not saying), then takes everything."""

    def __init__(self, refusals: int, retry_after_s: float | None) -> None:
        self.refusals, self.retry_after_s = refusals, retry_after_s
        self.tries: list[float] = []
        self.taken: list[str] = []
        self.clock = 0.0

    def send(self, batch: Batch, batch_id: str) -> None:
        self.tries.append(self.clock)
        if len(self.tries) <= self.refusals:
            raise SinkUnavailable("down", self.retry_after_s)
        self.taken.append(batch_id)


def _stepped(sink: RefusingSink, tmp_path: Path, seconds: int) -> Pipeline:
    pipe = Pipeline(
        [CountingSource()],
        sink,
        Spool(tmp_path / "spool"),
        node="n1",
        max_backoff_s=8,
        clock=lambda: sink.clock,
        rng=random.Random(7),
    )
    for t in range(seconds):  # a step a second
        sink.clock = float(t)
        pipe.step(T0 + dt.timedelta(seconds=t))
    return pipe


def test_the_agent_waits_as_long_as_the_server_asks(tmp_path: Path) -> None:
    """503 with Retry-After: 30 -> nothing is tried for 30 s (up to 45 s with the jitter),
    while batches queue in the spool; then everything goes, in order."""
    sink = RefusingSink(1, 30.0)
    pipe = _stepped(sink, tmp_path, 60)
    first, second = sink.tries[:2]
    assert first == 0 and 30 <= second <= 45
    assert pipe.spool.depth == 0 and len(sink.taken) == 60  # the refused one too, first
    assert sink.taken == sorted(sink.taken, key=lambda b: b.split(":")[2])


def test_without_retry_after_the_agent_backs_off_doubling_with_jitter(tmp_path: Path) -> None:
    sink = RefusingSink(5, None)
    _stepped(sink, tmp_path, 60)
    gaps = [b - a for a, b in itertools.pairwise(sink.tries[:6])]
    # 1, 2, 4, 8, 8 s (capped), each stretched by up to half, seen at whole-second steps
    for gap, base in zip(gaps, (1, 2, 4, 8, 8), strict=True):
        assert base <= gap <= base * 1.5 + 1, gaps


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("30", 30.0), ("", None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)],
)
def test_retry_after_header(header: str, seconds: float | None) -> None:
    assert retry_after(header) == seconds
