"""Ingest that cannot be poisoned: the ingest route over real HTTP, the real engine behind it.

A well-framed batch with a wrong-typed field (``gpu_index`` -1 or "abc", ``cluster`` 123, a
string ``memory_total_bytes``, ``attempt`` "x") is accepted with the row named in the reply;
the row is quarantined with field, value and reason, and the other batches of its group, and
those sent after it, are written. A malformed request gets a 4xx JSON answer with the reason
(never an HTML page, never a 500), a body over the limit 413 before it is read. A batch that
still fails when written is set aside in ``rejected/`` (listed by ``gpuledger quarantine
rejected``) and the rest of its group is written; a failure of the warehouse's is retried, not
set aside. A member gone from a group's manifest is never counted as written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.client
import json
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import flask
import polars as pl
import pytest
import requests
from conftest import recent
from werkzeug.serving import make_server

from collector.frame import MAGIC, dump_batch
from collector.records import (
    SAMPLE_SCHEMA,
    Batch,
    GpuInventory,
    GpuSample,
    JobEvent,
    NodeInventory,
    Reject,
)
from gpuledger.cli import main
from gpuledger.server import register
from warehouse.client import Warehouse
from warehouse.ingest.coalesce import Coalescer

pytestmark = pytest.mark.integration

NOW = recent(dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC))
T = NOW - dt.timedelta(minutes=30)
LIMIT = 1 << 20  # the test server's server.max_body_bytes


@dataclasses.dataclass
class Served:
    """A running ingest route on loopback; its coalescer starts at the first flush(), so the
    batches posted before it form one group."""

    url: str
    coalescer: Coalescer
    wh: Warehouse
    data_dir: Path

    def post(self, batch_id: str, body: bytes, **headers: str) -> requests.Response:
        return requests.post(
            f"{self.url}/api/v1/ingest",
            data=body,
            headers={"X-Batch-Id": batch_id, **headers},
            timeout=60,
        )

    def flush(self) -> None:
        if self.coalescer._thread is None:
            self.coalescer.start()
        assert self.coalescer.drain(timeout_s=60), self.coalescer.last_error

    def count(self, table: str, where: str = "1") -> int:
        db = self.wh.database
        return int(self.wh.rows(f"SELECT count() FROM {db}.{table} WHERE {where}")[0][0])

    def health(self) -> dict[str, object]:
        reply = requests.get(f"{self.url}/healthz", timeout=30)
        body = reply.json()
        assert isinstance(body, dict)
        return body


def serve(wh: Warehouse, data_dir: Path) -> Iterator[Served]:
    coalescer = Coalescer(wh, 35, data_dir / "ingest-spool", max_ms=0, now=lambda: NOW)
    app = flask.Flask("poison")
    register(app, wh, coalescer, None, max_body_bytes=LIMIT)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(f"http://127.0.0.1:{server.server_port}", coalescer, wh, data_dir)
    finally:
        server.shutdown()
        thread.join(10)
        coalescer.stop(timeout_s=5)


@pytest.fixture
def served(wh: Warehouse, tmp_path: Path) -> Iterator[Served]:
    yield from serve(wh, tmp_path / "data")


@pytest.fixture
def bare(engine: Warehouse, tmp_path: Path) -> Iterator[Served]:
    """The route over a warehouse that is never written to (for requests refused unread)."""
    yield from serve(Warehouse(engine.client, "never_written", engine.dsn), tmp_path / "data")


def gpus_of(node: str, n: int = 2) -> list[GpuInventory]:
    since = NOW - dt.timedelta(hours=3)
    return [
        GpuInventory(since, "c1", "p", node, f"GPU-{node}-{g}", g, "H100", memory_total_bytes=80)
        for g in range(n)
    ]


def poll(node: str, i: int, n: int = 2, **kinds: object) -> Batch:
    """A node agent's ``i``-th poll: ``n`` GPUs, one sample each, and any other records."""
    rows = [
        GpuSample(
            T + dt.timedelta(seconds=i),
            "c1",
            node,
            f"GPU-{node}-{g}",
            g,
            "H100",
            "nvidia",
            gpu_util_ratio=0.5,
        )
        for g in range(n)
    ]
    return Batch(samples=pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), **kinds)  # type: ignore[arg-type]


# -- one test per poison input ----------------------------------------------------------------
START = JobEvent(T, "c1", "j1", "started", gpu_uuids=("GPU-n2-0",), started_at=T, node="n2")
POISON = {
    "gpu_index -1": ("gpus", "gpu_index", -1),
    'gpu_index "abc"': ("gpus", "gpu_index", "abc"),
    "cluster 123": ("gpus", "cluster", 123),
    "string memory_total_bytes": ("gpus", "memory_total_bytes", "80GB"),
    'attempt "x"': ("job_events", "attempt", "x"),
}
#: header kind → (quarantine kind, batch-id suffix)
QUARANTINED_AS = {"gpus": ("gpu_inventory", "gpus"), "job_events": ("job_event", "events")}


@pytest.mark.parametrize(("kind", "field", "value"), POISON.values(), ids=list(POISON))
def test_a_wrong_typed_field_is_quarantined_and_ingest_keeps_flowing(
    served: Served, kind: str, field: str, value: object
) -> None:
    good = {"gpus": gpus_of("n2"), "job_events": [START]}
    bad = good[kind][0]._replace(**{field: value})  # type: ignore[attr-defined]
    poisoned = poll("n2", 0, **{**good, kind: [*good[kind], bad]})
    group = [
        ("n1:0", poll("n1", 0, gpus=gpus_of("n1"))),
        ("n2:0", poisoned),
        ("n1:1", poll("n1", 1)),
    ]
    replies = [served.post(batch_id, dump_batch(batch)) for batch_id, batch in group]
    assert [r.status_code for r in replies] == [202, 202, 202]
    assert "quarantined" not in replies[0].json()
    answer = replies[1].json()
    assert answer["quarantined"] == 1 and answer["rows"] == len(poisoned)
    (problem,) = answer["problems"]
    shown = value if isinstance(value, str) else repr(value)
    assert problem == {
        "kind": kind,
        "index": len(good[kind]),
        "field": field,
        "value": shown,
        "reason": problem["reason"],
    }
    assert problem["reason"].startswith(f"{field} must be ")

    served.flush()  # the three batches as one group
    assert served.coalescer.groups_written == 1
    qkind, suffix = QUARANTINED_AS[kind]
    assert served.wh.rows(
        f"SELECT kind, batch_id, field, value, reason FROM {served.wh.database}.quarantine"
    ) == [(qkind, f"n2:0:{suffix}", field, shown, problem["reason"])]
    assert served.count("gpu_samples") == 3 * 2  # the poisoned batch's samples too
    assert served.count("gpu_inventory_log") == 4 and served.count("job_events") == 1
    health = served.health()
    assert health["status"] == "ok" and health["rejected_batches"] == 0
    assert health["spool_batches"] == 0

    assert served.post("n1:2", dump_batch(poll("n1", 2))).status_code == 202
    served.flush()  # and what comes after is written
    assert served.count("gpu_samples") == 4 * 2


def test_a_sample_value_that_does_not_fit_its_column_is_quarantined(served: Served) -> None:
    """An Arrow column of a wider type converts, and a value outside the column's range
    quarantines its row (gpu_index -1 in an Int64 column)."""
    frame = pl.DataFrame(poll("n1", 0).samples).with_columns(  # type: ignore[arg-type]
        pl.col("gpu_index").cast(pl.Int64) - 1
    )
    reply = served.post("n1:0", dump_batch(Batch(samples=frame, gpus=gpus_of("n1"))))
    assert reply.status_code == 202
    (problem,) = reply.json()["problems"]
    assert (problem["kind"], problem["index"], problem["field"], problem["value"]) == (
        "samples",
        0,
        "gpu_index",
        "-1",
    )
    served.flush()
    assert served.count("gpu_samples") == 1
    assert served.count("quarantine", "kind = 'gpu_sample' AND field = 'gpu_index'") == 1


# -- framing ----------------------------------------------------------------------------------
def header_frame(header: bytes, rest: bytes = b"") -> bytes:
    return MAGIC + struct.pack(">Q", len(header)) + header + rest


FRAMES = {
    "magic and 3 bytes": (MAGIC + b"abc", "must start with b'GLB1'"),
    "a JSON list as header": (header_frame(b'[["gpus"]]'), "not a JSON list"),
    "100,000-deep nesting": (
        header_frame(b"[" * 100_000 + b"]" * 100_000),
        "nests too deeply",
    ),
    "garbage Arrow": (header_frame(b"{}", b"ARROW1\0\0" + b"\x17" * 200 + b"ARROW1"), "Arrow"),
    "not Arrow at all": (header_frame(b"{}", b"\x00" * 64), "not an Arrow IPC file"),
}


@pytest.mark.parametrize(("body", "reason"), FRAMES.values(), ids=list(FRAMES))
def test_a_malformed_frame_gets_400_json_with_the_reason(
    bare: Served, body: bytes, reason: str
) -> None:
    reply = bare.post("a:1", body)
    assert reply.status_code == 400
    assert reply.headers["Content-Type"] == "application/json"
    assert reason in reply.json()["error"]
    assert bare.coalescer.spool.depth == 0  # nothing kept


def test_a_body_over_the_limit_is_refused_before_it_is_read(bare: Served) -> None:
    """A Content-Length of 200 MB is answered 413 at once: the 200 MB are never sent."""
    host, port = bare.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/api/v1/ingest")
    conn.putheader("X-Batch-Id", "big:1")
    conn.putheader("Content-Length", str(200 << 20))
    conn.endheaders()
    conn.send(MAGIC)
    reply = conn.getresponse()
    assert reply.status == 413 and reply.getheader("Content-Type") == "application/json"
    assert (
        "209,715,200 bytes, more than server.max_body_bytes (1,048,576)"
        in json.loads(reply.read())["error"]
    )
    conn.close()


def test_a_chunked_body_over_the_limit_is_cut_off(bare: Served) -> None:
    """Without a Content-Length (chunked), the read stops at the limit."""

    def chunks() -> Iterator[bytes]:
        yield MAGIC + struct.pack(">Q", 2)
        for _ in range(4):
            yield b"x" * (LIMIT // 2)

    reply = bare.post("big:2", chunks())  # type: ignore[arg-type]
    assert reply.status_code == 413 and reply.headers["Content-Type"] == "application/json"
    assert "longer than server.max_body_bytes" in reply.json()["error"]
    assert bare.coalescer.spool.depth == 0


def test_other_refusals_are_json_too(bare: Served) -> None:
    body = dump_batch(poll("n1", 0))
    gzip = bare.post("z:1", body, **{"Content-Encoding": "gzip"})
    assert gzip.status_code == 415 and "Content-Encoding 'gzip'" in gzip.json()["error"]
    no_id = requests.post(f"{bare.url}/api/v1/ingest", data=body, timeout=30)
    assert no_id.status_code == 400 and "X-Batch-Id" in no_id.json()["error"]
    wrong_method = requests.get(f"{bare.url}/api/v1/ingest", timeout=30)
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]
    nowhere = requests.post(f"{bare.url}/api/v1/nothing", timeout=30)
    assert nowhere.status_code == 404 and nowhere.json()["error"]
    metrics = requests.get(f"{bare.url}/metrics", timeout=30).text
    assert 'gpuledger_ingest_batches_total{outcome="refused"} 2.0' in metrics


# -- a batch that fails when written; the warehouse's failures --------------------------------
def rejected(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    """What `gpuledger quarantine rejected --format json` lists."""
    capsys.readouterr()
    assert main(["quarantine", "rejected", "--data-dir", str(data_dir), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert isinstance(listed, list)
    return listed


#: Ways to make the engine refuse one batch's inventory, standing in for any value the checks
#: let through and the engine refuses: (the change, its undo, what the error says, passes).
REFUSALS = {
    # a data error (VIOLATED_CONSTRAINT): set aside at once
    "constraint": (
        "ADD CONSTRAINT no_bad_node CHECK node != 'bad'",
        "DROP CONSTRAINT no_bad_node",
        "no_bad_node",
        1,
    ),
    # another error (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO): set aside once it failed alone,
    # while the others were written, three passes in a row
    "throwIf": (
        "ADD COLUMN boom UInt8 DEFAULT throwIf(node = 'bad', 'no bad node')",
        "DROP COLUMN boom",
        "no bad node",
        3,
    ),
}


@pytest.mark.parametrize(
    ("change", "undo", "error", "passes"), REFUSALS.values(), ids=list(REFUSALS)
)
def test_a_batch_that_fails_when_written_is_set_aside_and_its_group_written(
    served: Served,
    capsys: pytest.CaptureFixture[str],
    change: str,
    undo: str,
    error: str,
    passes: int,
) -> None:
    """The engine refuses one batch's inventory: that batch goes to rejected/ with the error,
    the others of its group are written once — the steps written for the group before the
    failure too — and its id is not remembered, so it can be sent again."""
    db = served.wh.database
    served.wh.command(f"ALTER TABLE {db}.gpu_inventory_log {change}")
    node = NodeInventory(T, "c1", "p", "n1", "H100", 2)
    group = [
        ("n1:0", poll("n1", 0, gpus=gpus_of("n1"), nodes=[node])),
        ("bad:0", poll("bad", 0, gpus=gpus_of("bad"))),
        ("n1:1", poll("n1", 1)),
    ]
    assert {served.post(b, dump_batch(x)).status_code for b, x in group} == {202}
    served.flush()
    assert served.count("node_inventory_log") == 1  # written by the group, before the failure
    assert served.count("gpu_inventory_log") == 2
    assert served.count("gpu_samples") == 2 * 2
    failures = served.coalescer.metrics.registry.get_sample_value(
        "gpuledger_ingest_flush_failures_total"
    )
    assert failures == passes  # the group's failure, then each pass retried before the set-aside
    health = served.health()
    assert health["status"] == "ok" and health["rejected_batches"] == 1
    assert health["spool_batches"] == 0
    (kept,) = rejected(served.data_dir, capsys)
    assert kept["spool"] == "server" and kept["batch_id"] == "bad:0"
    assert "writing it failed" in str(kept["reason"]) and error in str(kept["reason"])
    served.wh.command(f"ALTER TABLE {db}.gpu_inventory_log {undo}")
    again = served.post("bad:0", Path(str(kept["file"])).read_bytes())
    assert again.status_code == 202  # not "duplicate": it was never written
    served.flush()
    assert served.count("gpu_samples") == 3 * 2 and served.count("gpu_inventory_log") == 4


def test_a_failure_of_the_warehouse_is_retried_not_set_aside(served: Served) -> None:
    """Every batch of the group fails alike (a table is missing): the warehouse's fault, so
    the group waits and is written once the table is back; nothing is set aside."""
    db = served.wh.database
    served.wh.command(f"RENAME TABLE {db}.quarantine TO {db}.quarantine_away")
    bad_util = pl.col("gpu_util_ratio") * 3  # a row to quarantine: the insert that fails
    for i in range(2):
        batch = poll("n1", i, gpus=gpus_of("n1"))
        batch = dataclasses.replace(batch, samples=batch.samples.with_columns(bad_util))  # type: ignore[union-attr]
        assert served.post(f"n1:{i}", dump_batch(batch)).status_code == 202
    served.coalescer.start()
    deadline = time.monotonic() + 60
    registry = served.coalescer.metrics.registry
    while (registry.get_sample_value("gpuledger_ingest_flush_failures_total") or 0) < 3:
        assert time.monotonic() < deadline, served.coalescer.last_error  # split, then retried
        time.sleep(0.05)
    assert served.health()["rejected_batches"] == 0
    assert served.coalescer.spool.depth == 2
    served.wh.command(f"RENAME TABLE {db}.quarantine_away TO {db}.quarantine")
    served.flush()
    assert served.count("quarantine") == 2 * 2 and served.count("gpu_samples") == 0
    assert served.health()["rejected_batches"] == 0


# -- a group's manifest with members gone -----------------------------------------------------
def test_a_missing_or_unreadable_member_is_never_counted_as_written(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """A group's manifest is on disk when the server stops; meanwhile one member's file is
    removed by hand and another's garbled. On restart the others are written; the garbled one
    is set aside with its reason; neither id is remembered as written."""
    spool = served.data_dir / "ingest-spool"
    first = served.coalescer
    batches = [(f"n1:{i}", poll("n1", i, gpus=gpus_of("n1") if i == 0 else [])) for i in range(4)]
    for batch_id, batch in batches:
        assert served.post(batch_id, dump_batch(batch)).status_code == 202
    group = first.form_group()
    assert group is not None and len(group.members) == 4
    first.stop(timeout_s=0)  # (as a crash would leave it: the manifest on disk)
    group.members[2].path.unlink()
    group.members[3].path.write_bytes(MAGIC + b"garbled")
    second = Coalescer(served.wh, 35, spool, now=lambda: NOW)
    second.start()
    assert second.drain(timeout_s=60) and second.stop()
    assert served.count("gpu_samples") == 2 * 2
    assert not list((spool / "groups").glob("*.json")) and not list(spool.glob("*.batch"))
    (kept,) = rejected(served.data_dir, capsys)
    assert kept["batch_id"] == "n1:3" and "cannot be read" in str(kept["reason"])
    third = Coalescer(served.wh, 35, spool, now=lambda: NOW)
    outcomes = [third.accept(b, dump_batch(x), x) for b, x in batches]
    assert outcomes == ["duplicate", "duplicate", "accepted", "accepted"]
    third.start()
    assert third.drain(timeout_s=60) and third.stop()
    assert served.count("gpu_samples") == 4 * 2


def test_replies_to_a_batch_name_at_most_100_problems(served: Served) -> None:
    bad = [g._replace(gpu_index=-1) for g in gpus_of("n1", 150)]
    reply = served.post("n1:0", dump_batch(Batch(gpus=bad))).json()
    assert reply["quarantined"] == 150 and len(reply["problems"]) == 100


def test_a_source_s_reject_of_any_shape_is_quarantined_as_text(served: Served) -> None:
    """A source's rejects are quarantine rows already: fields that are not text (or text with
    an unpaired surrogate, which JSON lets through) are kept as text instead of failing."""
    odd = Reject(123, {"k": 1}, "line", None, "bad \ud800 text", ["raw"])  # type: ignore[arg-type]
    reply = served.post("n1:0", dump_batch(poll("n1", 0, gpus=gpus_of("n1"), rejects=[odd])))
    assert reply.status_code == 202
    served.flush()
    assert served.wh.rows(
        f"SELECT source, kind, field, value, reason, payload FROM {served.wh.database}.quarantine"
    ) == [("123", "{'k': 1}", "line", "None", "bad \\ud800 text", "('raw',)")]
    assert served.count("gpu_samples") == 2 and served.health()["status"] == "ok"
