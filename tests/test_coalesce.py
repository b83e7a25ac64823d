"""Server-side coalescing: one insert per table for many agent batches, exactly once.

The group write gives what writing each batch alone gives (quarantine reasons and batch ids,
allocations re-derived); a crash at each point between spooling and forgetting is replayed
into exactly-once; duplicates are answered "duplicate"; a full spool answers 503 with
Retry-After; a warehouse that cannot take the writes leaves batches in the spool until it can.
All against the real embedded engine.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import flask
import flask.testing
import polars as pl
import pytest
from conftest import give_inventory, recent
from werkzeug.test import TestResponse

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
from collector.spool import dump_batch
from gpuledger.server import register
from gpuledger.settings import SettingsError, load_settings
from warehouse.client import Warehouse, WarehouseError
from warehouse.ingest.coalesce import AcceptedIds, CoalesceError, Coalescer, group_token
from warehouse.ingest.writer import Ingestor
from warehouse.migrate import RenderOptions, migrate

NOW = recent(dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC))
_dbs = itertools.count()


def samples(start: dt.datetime, gpus: int = 8, node: str = "n1", **kw: object) -> pl.DataFrame:
    """One poll of ``gpus`` GPUs: what a node agent sends every interval."""
    rows = [
        GpuSample(
            start,
            "c1",
            node,
            f"GPU-{node}-{g}",
            g,
            "H100",
            gpu_util_ratio=kw.get("util", 0.5),  # type: ignore[arg-type]
            memory_used_bytes=10,
            memory_total_bytes=100,
            source="test",
        )
        for g in range(gpus)
    ]
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


def polls(n: int, node: str = "n1", inventory: bool = False) -> list[tuple[str, Batch]]:
    """``n`` polls of a node; with ``inventory`` the first carries its GPUs' inventory, as an
    agent's first batch does."""
    start = NOW - dt.timedelta(minutes=30)
    out = [
        (f"{node}:nvml:{i}", Batch(samples=samples(start + dt.timedelta(seconds=i), node=node)))
        for i in range(n)
    ]
    if inventory and out:
        out[0] = (out[0][0], dataclasses.replace(out[0][1], gpus=gpus_of(node)))
    return out


def gpus_of(node: str, gpus: int = 8) -> list[GpuInventory]:
    start = NOW - dt.timedelta(hours=3)
    return [
        GpuInventory(start, "c1", "p", node, f"GPU-{node}-{g}", g, "H100", memory_total_bytes=100)
        for g in range(gpus)
    ]


def known(wh: Warehouse, *nodes: str) -> None:
    """The GPUs of ``nodes`` in the warehouse's inventory (their samples are not quarantined)."""
    for node in nodes:
        Ingestor(wh, 35, now=lambda: NOW).write_gpus(gpus_of(node))


def count(wh: Warehouse, table: str, where: str = "1") -> int:
    return int(wh.rows(f"SELECT count() FROM {wh.database}.{table} WHERE {where}")[0][0])


def sample_counts(wh: Warehouse) -> tuple[int, int, int]:
    """(rows, distinct (gpu, ts), samples in the hourly rollup) of gpu_samples."""
    n, unique = wh.rows(f"SELECT count(), uniqExact(gpu_uuid, ts) FROM {wh.database}.gpu_samples")[
        0
    ]
    hourly = wh.rows(f"SELECT sum(samples) FROM {wh.database}.gpu_samples_1h")[0][0]
    return int(n), int(unique), int(hourly or 0)


@pytest.fixture
def other_wh(engine: Warehouse) -> Iterator[Warehouse]:
    """A second fresh database in the session's engine."""
    database = f"c{os.getpid()}_{next(_dbs)}"
    fresh = Warehouse(engine.client, database, engine.dsn)
    migrate(fresh, RenderOptions(database=database))
    yield fresh
    engine.command(f"DROP DATABASE IF EXISTS {database} SYNC")


def coalescer(wh: Warehouse, directory: Path, **kw: object) -> Coalescer:
    return Coalescer(wh, 35, directory, now=lambda: NOW, **kw)  # type: ignore[arg-type]


def accept_all(c: Coalescer, batches: list[tuple[str, Batch]]) -> None:
    for batch_id, batch in batches:
        assert c.accept(batch_id, dump_batch(batch), batch) == "accepted"


# -- the group write --------------------------------------------------------------------------
def mixed_members() -> list[tuple[str, Batch]]:
    """Three agent batches with every kind, bad rows among them, and one job across two."""
    t = NOW - dt.timedelta(hours=2)
    old = NOW - dt.timedelta(days=40)
    bad_samples = pl.concat([samples(t, 2, "n2"), samples(old, 1, "n2"), samples(t, 1, "n3")])
    bad_samples = bad_samples.with_columns(
        pl.when(pl.col("node") == "n3")
        .then(pl.lit(1.5, pl.Float32))
        .otherwise(pl.col("gpu_util_ratio"))
        .alias("gpu_util_ratio")
    )
    gpu = GpuInventory(t, "c1", "p", "n1", "GPU-n1-0", 0, "H100", memory_total_bytes=100)
    return [
        (
            "n1:nvml:a",
            Batch(
                samples=samples(t),
                gpus=[gpu, gpu._replace(gpu_uuid="")],
                job_events=[
                    JobEvent(t, "c1", "j1", "started", gpu_uuids=("GPU-n1-0",), started_at=t)
                ],
                processes=[GpuProcess(t, "GPU-n1-0", "", 7, 2**20, 0.5, "uid", "", "", "c1", "n1")],
            ),
        ),
        (
            "n2:nvml:b",
            Batch(
                samples=bad_samples,
                health=[
                    GpuHealth(t, "GPU-n2-0", 0, 0, 0, 0, False, False, cluster="c1", node="n2")
                ],
                processes=[GpuProcess(old, "GPU-n2-0", "", 8, 1, 0.1, "", "", "", "c1", "n2")],
                rejects=[Reject("dcgm", "gpu_sample", "line", "x{", "cannot parse", "x{ 1")],
            ),
        ),
        (
            "n1:nvml:c",
            Batch(
                samples=samples(t + dt.timedelta(seconds=10)),
                job_events=[JobEvent(t + dt.timedelta(hours=1), "c1", "j1", "finished")],
            ),
        ),
        (  # records, not a frame, one with a value of the wrong type: coerced per batch
            "n4:dcgm:d",
            Batch(
                samples=[
                    GpuSample(t, "c1", "n4", "GPU-n4-0", 0, "H100", gpu_util_ratio=0.2),
                    GpuSample(t, "c1", "n4", "GPU-n4-1", "one", "H100"),  # type: ignore[arg-type]
                ]
            ),
        ),
    ]


def state(wh: Warehouse) -> dict[str, object]:
    db = wh.database
    return {
        "samples": wh.rows(
            f"SELECT gpu_uuid, ts, gpu_util_ratio FROM {db}.gpu_samples ORDER BY gpu_uuid, ts"
        ),
        "hourly": sample_counts(wh)[2],
        "quarantine": wh.rows(
            f"SELECT source, kind, batch_id, field, reason FROM {db}.quarantine "
            "ORDER BY batch_id, kind, field, reason"
        ),
        "allocations": wh.rows(
            f"SELECT job_id, gpu_uuid, start_ts, end_ts, end_event FROM {db}.allocations FINAL"
        ),
        "tables": [
            count(wh, t) for t in ("gpu_inventory_log", "gpu_processes", "gpu_health", "job_events")
        ],
    }


def test_a_group_writes_what_each_batch_alone_writes(wh: Warehouse, other_wh: Warehouse) -> None:
    members = mixed_members()
    for db in (wh, other_wh):
        for _batch_id, batch in members:
            give_inventory(db, batch.samples)
    alone = Ingestor(other_wh, 35, now=lambda: NOW)
    for batch_id, batch in members:
        alone.write(batch, batch_id=batch_id)
    grouped = Ingestor(wh, 35, now=lambda: NOW)
    result = grouped.write_group(members, group_token(b for b, _ in members))
    expected = state(other_wh)
    assert state(wh) == expected
    assert result.written["gpu_samples"] == 8 + 2 + 8 + 1
    assert result.quarantined_total == len(expected["quarantine"]) == 6  # type: ignore[arg-type]
    assert expected["allocations"] == [  # the job opened in one batch and closed in another
        ("j1", "GPU-n1-0", NOW - dt.timedelta(hours=2), NOW - dt.timedelta(hours=1), "finished")
    ]
    batch_ids = {row[2] for row in expected["quarantine"]}
    assert batch_ids == {
        "n1:nvml:a:gpus",
        "n2:nvml:b:samples",
        "n2:nvml:b:processes",
        "n2:nvml:b:rejects:dcgm",
        "n4:dcgm:d:samples",
    }
    # the same group again (a replay after a crash): nothing twice, rollups and quarantine too
    grouped.write_group(members, group_token(b for b, _ in members))
    assert state(wh) == expected


def test_a_group_quarantines_unknown_gpus_as_each_batch_alone(
    wh: Warehouse, other_wh: Warehouse
) -> None:
    """Samples of a GPU with no inventory are quarantined under the id of the batch they came
    in; a batch that brings its GPUs' inventory has its samples written."""
    t = NOW - dt.timedelta(hours=1)
    members = [
        ("n1:nvml:0", Batch(samples=pl.concat([samples(t, 2, "n1"), samples(t, 2, "nx")]))),
        ("n2:dcgm:0", Batch(samples=samples(t, 3, "n2"), gpus=gpus_of("n2", 3))),
    ]
    for db in (wh, other_wh):
        known(db, "n1")
    alone = Ingestor(other_wh, 35, now=lambda: NOW)
    for batch_id, batch in members:
        alone.write(batch, batch_id=batch_id)
    result = Ingestor(wh, 35, now=lambda: NOW).write_group(members, group_token(["a", "b"]))
    assert state(wh) == state(other_wh)
    assert result.written["gpu_samples"] == 2 + 3 and result.quarantined_total == 2
    assert wh.rows(
        f"SELECT batch_id, field, value FROM {wh.database}.quarantine ORDER BY value"
    ) == [("n1:nvml:0:samples", "gpu_uuid", f"GPU-nx-{g}") for g in range(2)]


# -- crashes between the steps ----------------------------------------------------------------
def test_a_crash_before_the_insert_is_replayed_once(wh: Warehouse, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    known(wh, "n1", "n9")
    first = coalescer(wh, spool)
    accept_all(first, polls(5))
    group = first.form_group()  # the manifest is fsync'd; then the process dies
    assert group is not None and len(group.members) == 5
    first.stop(timeout_s=0)  # (releases the lock, as the dead process's would be)
    accept_all_later = polls(3, node="n9")
    second = coalescer(wh, spool, max_ms=0)
    assert second.accept("n1:nvml:2", b"", Batch()) == "duplicate"  # still in the spool
    accept_all(second, accept_all_later)
    second.start()
    assert second.drain()
    assert sample_counts(wh) == (8 * 8, 8 * 8, 8 * 8)
    assert second.stop()
    assert not list((spool / "groups").iterdir())


def test_a_crash_after_the_insert_writes_nothing_twice(wh: Warehouse, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    known(wh, "n1")
    first = coalescer(wh, spool)
    accept_all(first, polls(6))
    group = first.form_group()
    assert group is not None
    shutil.copytree(spool, tmp_path / "on-disk")  # what the disk held before the insert
    first.write(group)  # inserted ... and the process dies before forgetting the group:
    first.stop(timeout_s=0)
    shutil.rmtree(spool)
    shutil.copytree(tmp_path / "on-disk", spool)
    second = coalescer(wh, spool)
    second.start()
    assert second.drain()
    assert second.stop()
    assert sample_counts(wh) == (6 * 8, 6 * 8, 6 * 8)  # the replay was deduplicated
    assert second.groups_written == 1 and not list(spool.glob("*.batch"))


def test_a_crash_while_forgetting_finishes_forgetting(wh: Warehouse, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    known(wh, "n1")
    first = coalescer(wh, spool)
    batches = polls(4)
    accept_all(first, batches)
    group = first.form_group()
    assert group is not None
    shutil.copytree(spool, tmp_path / "on-disk")
    first.write(group)
    first.stop(timeout_s=0)
    shutil.rmtree(spool / "groups")  # the manifest and one member outlived the crash
    shutil.copytree(tmp_path / "on-disk" / "groups", spool / "groups")
    shutil.copy(tmp_path / "on-disk" / group.members[2].path.name, spool)
    second = coalescer(wh, spool)
    second.start()
    assert second.drain() and second.stop()
    assert second.groups_written == 0 and not list(spool.glob("*.batch"))
    assert sample_counts(wh) == (4 * 8, 4 * 8, 4 * 8)
    third = coalescer(wh, spool)  # the written ids are remembered across restarts
    assert [third.accept(b, dump_batch(x), x) for b, x in batches] == ["duplicate"] * 4
    third.stop(timeout_s=0)


def test_a_group_written_again_is_checked_against_the_same_unknown_gpus(
    wh: Warehouse, tmp_path: Path
) -> None:
    """A group with samples of known and of unknown GPUs is cut short after its samples
    insert; the inventory of the unknown ones comes before it is written again. The manifest
    kept which GPUs were unknown, so their samples are quarantined as the first time, not
    dropped with the group's duplicate samples insert (which holds the first attempt's rows)."""
    spool = tmp_path / "spool"
    known(wh, "n1")
    first = coalescer(wh, spool)
    accept_all(first, polls(2, node="n1") + polls(2, node="nx"))
    group = first.form_group()
    assert group is not None and len(group.members) == 4
    db = wh.database
    wh.command(f"RENAME TABLE {db}.quarantine TO {db}.quarantine_away")  # its insert will fail
    with pytest.raises(WarehouseError, match="quarantine does not exist"):
        first.write(group)
    first.stop(timeout_s=0)
    assert count(wh, "gpu_samples") == 2 * 8  # n1's: the samples insert went through
    manifest = json.loads(group.manifest.read_text(encoding="utf-8"))
    assert manifest["unknown_gpus"] == [["c1", f"GPU-nx-{g}"] for g in range(8)]
    known(wh, "nx")  # the inventory arrives while the server is down
    wh.command(f"RENAME TABLE {db}.quarantine_away TO {db}.quarantine")
    second = coalescer(wh, spool)
    second.start()
    assert second.drain() and second.stop()
    assert sample_counts(wh) == (2 * 8, 2 * 8, 2 * 8)
    assert count(wh, "quarantine", "startsWith(reason, 'unknown_gpu: ')") == 2 * 8
    assert not list((spool / "groups").iterdir())


# -- duplicates, a full spool, a warehouse that is not there ----------------------------------
def test_duplicates_are_written_once(wh: Warehouse, tmp_path: Path) -> None:
    known(wh, "n1")
    c = coalescer(wh, tmp_path / "spool", max_ms=20)
    batch_id, batch = polls(1)[0]
    data = dump_batch(batch)
    outcomes: list[str] = []
    twins = [
        threading.Thread(target=lambda: outcomes.append(c.accept(batch_id, data, batch)))
        for _ in range(8)
    ]
    for t in twins:
        t.start()
    for t in twins:
        t.join()
    assert sorted(outcomes) == ["accepted"] + ["duplicate"] * 7
    c.start()
    assert c.drain()
    assert c.accept(batch_id, data, batch) == "duplicate"  # written, and still remembered
    assert c.stop()
    assert sample_counts(wh) == (8, 8, 8)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


def http(c: Coalescer, wh: Warehouse) -> flask.testing.FlaskClient:
    app = flask.Flask("test-coalesce")
    register(app, wh, c, tokens=None)
    return app.test_client()


def post(client: flask.testing.FlaskClient, batch_id: str, batch: Batch) -> TestResponse:
    return client.post("/api/v1/ingest", data=dump_batch(batch), headers={"X-Batch-Id": batch_id})


def test_a_full_spool_answers_503_with_retry_after(wh: Warehouse, tmp_path: Path) -> None:
    known(wh, "n1")
    batches = polls(3)
    size = len(dump_batch(batches[0][1]))
    c = coalescer(wh, tmp_path / "spool", max_bytes=int(2.5 * size))  # not started: no flushing
    client = http(c, wh)
    assert [post(client, b, x).status_code for b, x in batches[:2]] == [202, 202]
    full = post(client, *batches[2])
    assert full.status_code == 503 and full.headers["Retry-After"] == "30"
    assert "spool is full" in full.get_json()["error"]
    assert post(client, *batches[0]).get_json() == {"duplicate": True, "batch_id": batches[0][0]}
    text = client.get("/metrics").get_data(as_text=True)
    assert 'gpuledger_ingest_batches_total{outcome="full"} 1.0' in text
    assert "gpuledger_ingest_spool_batches 2.0" in text
    c.start()
    assert c.drain()
    assert post(client, *batches[2]).status_code == 202  # room again once written
    assert c.drain() and c.stop()
    assert sample_counts(wh) == (3 * 8, 3 * 8, 3 * 8)


def test_batches_wait_in_the_spool_until_the_warehouse_takes_them(
    engine: Warehouse, tmp_path: Path
) -> None:
    database = f"late{os.getpid()}_{next(_dbs)}"
    wh = Warehouse(engine.client, database, engine.dsn)  # not created yet: every write fails
    c = coalescer(wh, tmp_path / "spool", max_ms=0)
    client = http(c, wh)
    c.start()
    try:
        batches = polls(5, inventory=True)
        assert {post(client, b, x).status_code for b, x in batches} == {202}
        deadline = time.monotonic() + 30
        while c.last_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.get_json()["spool_batches"] == 5 and health.get_json()["last_error"]
        text = client.get("/metrics").get_data(as_text=True)
        assert metric(text, "gpuledger_ingest_flush_failures_total") >= 1
        assert metric(text, "gpuledger_ingest_spool_batches") == 5
        migrate(wh, RenderOptions(database=database))  # the warehouse comes back
        assert c.drain(timeout_s=60)
        assert client.get("/healthz").get_json()["status"] == "ok"
        assert c.stop()
        assert sample_counts(wh) == (5 * 8, 5 * 8, 5 * 8)
    finally:
        c.stop(timeout_s=0)
        engine.command(f"DROP DATABASE IF EXISTS {database} SYNC")


def test_groups_hold_up_to_max_rows(wh: Warehouse, tmp_path: Path) -> None:
    known(wh, "n1")
    c = coalescer(wh, tmp_path / "spool", max_rows=20)
    accept_all(c, polls(5))  # 8 rows each: groups of 2, 2, 1
    sizes = []
    while (group := c.form_group()) is not None:
        sizes.append(len(group.members))
        c.write(group)
    assert sizes == [2, 2, 1]
    c.stop(timeout_s=0)
    assert sample_counts(wh) == (40, 40, 40)


def test_one_process_owns_a_spool(wh: Warehouse, tmp_path: Path) -> None:
    c = coalescer(wh, tmp_path / "spool")
    with pytest.raises(CoalesceError, match="in use by another gpuledger server"):
        coalescer(wh, tmp_path / "spool")
    c.stop(timeout_s=0)


# -- the accepted ids -------------------------------------------------------------------------
def test_accepted_ids_last_the_window_and_survive_restarts(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    ids = AcceptedIds(tmp_path / "ids", window_s=3600, clock=lambda: clock[0])
    ids.add([f"a{i}" for i in range(1000)])
    clock[0] += 3600
    ids.add(["b"])
    assert "a7" in ids and "b" in ids and "c" not in ids
    with (tmp_path / "ids" / sorted(os.listdir(tmp_path / "ids"))[-1]).open("ab") as fh:
        fh.write(b"torn")  # a crash mid-append leaves part of a record
    again = AcceptedIds(tmp_path / "ids", window_s=3600, clock=lambda: clock[0])
    assert "a999" in again and "b" in again and len(again) == 1001
    clock[0] += 3600
    again.add(["c"])  # the first hour is now out of the window
    assert "a7" not in again and "b" in again and "c" in again
    assert len(os.listdir(tmp_path / "ids")) == 2


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("COALESCE_MAX_ROWS", "0", "server.coalesce_max_rows 0 must be at least 1"),
        ("COALESCE_MAX_MS", "-5", "server.coalesce_max_ms -5 must be within 0-60000"),
        ("SPOOL_MAX_BYTES", "1000", "server.spool_max_bytes must be at least 1 MiB"),
        ("DEDUP_WINDOW_S", "10", "server.dedup_window_s 10 must be at least 60"),
        ("MAX_BODY_BYTES", "1000", "server.max_body_bytes 1000 must be at least 1 MiB"),
        ("MAX_BODY_BYTES", str(2 << 30), "at most server.spool_max_bytes (1073741824)"),
        ("MAX_CONCURRENT_BODIES", "0", "server.max_concurrent_bodies 0 must be 1 to 256"),
    ],
)
def test_server_settings_are_validated(key: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        load_settings(env={f"GPULEDGER_SERVER__{key}": value})
    defaults = load_settings(env={}).server
    assert (defaults.spool_dir, defaults.coalesce_max_rows, defaults.coalesce_max_ms) == (
        "",
        50_000,
        1000,
    )
