"""Ingest: typed inserts, idempotent retries, quarantine — against the real embedded engine."""

import datetime as dt
import json

import polars as pl
from conftest import give_inventory, recent

from collector.records import (
    SAMPLE_SCHEMA,
    Batch,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    GpuSample,
    JobEvent,
    Price,
    Tenant,
)
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

NOW = recent(dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC))


def ingestor(wh: Warehouse, retention_days: int = 35) -> Ingestor:
    return Ingestor(wh, retention_days, now=lambda: NOW)


def sample(ts: dt.datetime, gpu: str = "GPU-a", **kw: object) -> GpuSample:
    base = {
        "cluster": "c1",
        "node": "n1",
        "gpu_uuid": gpu,
        "gpu_index": 0,
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_util_ratio": 0.5,
        "memory_used_bytes": 10,
        "memory_total_bytes": 100,
        "power_watts": 300.0,
        "source": "test",
    }
    base.update(kw)
    return GpuSample(ts=ts, **base)  # type: ignore[arg-type]


def frame(n_gpus: int, start: dt.datetime, minutes: int, step_s: int = 10) -> pl.DataFrame:
    rows = [
        sample(
            start + dt.timedelta(seconds=s),
            f"GPU-{g}",
            gpu_index=g,
            gpu_util_ratio=((g * 7 + s) % 100) / 100,
        )
        for g in range(n_gpus)
        for s in range(0, minutes * 60, step_s)
    ]
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")


def count(wh: Warehouse, table: str, where: str = "1") -> int:
    return wh.rows(f"SELECT count() FROM {wh.database}.{table} WHERE {where}")[0][0]


def rollup_totals(wh: Warehouse, table: str) -> tuple[int, float]:
    n, u = wh.rows(f"SELECT sum(samples), sum(util_ratio_sum) FROM {wh.database}.{table}")[0]
    return int(n), round(float(u), 3)


def test_resending_a_batch_writes_nothing_twice(wh: Warehouse) -> None:
    ing = ingestor(wh)
    # spans midnight: two partitions, so the insert is split into several blocks
    batch = frame(4, dt.datetime(2026, 11, 18, 23, 50, tzinfo=dt.UTC), 20)
    give_inventory(wh, batch)
    first = ing.write_samples(batch)
    assert first.written["gpu_samples"] == batch.height == 4 * 120
    for _ in range(2):  # a retry after a timeout, twice
        ing.write_samples(batch)
    assert count(wh, "gpu_samples") == batch.height
    assert rollup_totals(wh, "gpu_samples_1m") == (
        batch.height,
        round(float(batch["gpu_util_ratio"].sum()), 3),
    )
    assert rollup_totals(wh, "gpu_samples_1h")[0] == batch.height
    # a different batch is written
    ing.write_samples(frame(4, dt.datetime(2026, 11, 19, 0, 10, tzinfo=dt.UTC), 1))
    assert count(wh, "gpu_samples") == batch.height + 4 * 6


def test_explicit_batch_id_dedups_across_ingestors(wh: Warehouse) -> None:
    batch = frame(2, dt.datetime(2026, 11, 19, tzinfo=dt.UTC), 2)
    give_inventory(wh, batch)
    ingestor(wh).write_samples(batch, batch_id="spool-0001")
    ingestor(wh).write_samples(batch, batch_id="spool-0001")
    assert count(wh, "gpu_samples") == batch.height


def test_bad_rows_are_quarantined_with_field_and_reason(wh: Warehouse) -> None:
    t = dt.datetime(2026, 11, 20, 11, 0, tzinfo=dt.UTC)
    good = [sample(t), sample(t + dt.timedelta(seconds=10), tensor_active_ratio=0.25)]
    bad = {
        "gpu_util_ratio": sample(t, gpu_util_ratio=float("nan")),
        "gr_engine_active_ratio": sample(t, gr_engine_active_ratio=45.0),
        "tensor_active_ratio": sample(t, tensor_active_ratio=1.5),
        "power_watts": sample(t, power_watts=-3.0),
        "gpu_uuid": sample(t, gpu=""),
        "pod": sample(t, pod="p" * 5000),
        "memory_used_bytes": sample(t, memory_used_bytes=200),
        "temperature_celsius": sample(t, temperature_celsius=float("inf")),
    }
    give_inventory(wh, good)
    result = ingestor(wh).write_samples([*good, *bad.values()])
    assert result.written["gpu_samples"] == 2
    assert result.quarantined_total == len(bad)
    rows = wh.rows(
        f"SELECT field, reason, payload FROM {wh.database}.quarantine "
        "WHERE kind = 'gpu_sample' ORDER BY field"
    )
    assert {r[0] for r in rows} == set(bad)
    by_field = {r[0]: r for r in rows}
    assert "within 0-1" in by_field["gr_engine_active_ratio"][1]
    assert "NaN" in by_field["gpu_util_ratio"][1] or "0-1" in by_field["gpu_util_ratio"][1]
    assert "tensor_active_ratio must be a ratio within 0-1" in by_field["tensor_active_ratio"][1]
    assert json.loads(by_field["tensor_active_ratio"][2])["tensor_active_ratio"] == 1.5
    assert json.loads(by_field["power_watts"][2])["power_watts"] == -3.0
    assert count(wh, "gpu_samples") == 2
    stored = f"SELECT tensor_active_ratio FROM {wh.database}.gpu_samples ORDER BY ts"
    assert wh.rows(stored) == [(None,), (0.25,)]


def test_values_of_the_wrong_type_are_quarantined(wh: Warehouse) -> None:
    t = dt.datetime(2026, 11, 20, 11, 0, tzinfo=dt.UTC)
    give_inventory(wh, [sample(t)])
    result = ingestor(wh).write_samples(
        [sample(t), sample(t, power_watts="lots"), sample(dt.datetime(2026, 11, 20, 11, 0))]
    )
    assert result.written["gpu_samples"] == 1
    fields = sorted(r[0] for r in wh.rows(f"SELECT field FROM {wh.database}.quarantine"))
    assert fields == ["power_watts", "ts"]


def test_samples_outside_retention_or_in_the_future_keep_rollups_equal(wh: Warehouse) -> None:
    ing = ingestor(wh, retention_days=2)
    old = frame(2, NOW - dt.timedelta(days=3), 5)
    recent = frame(2, NOW - dt.timedelta(hours=1), 5)
    future = frame(1, NOW + dt.timedelta(hours=2), 1)
    give_inventory(wh, old)
    result = ing.write_samples(pl.concat([old, recent, future]))
    assert result.written["gpu_samples"] == recent.height
    assert result.quarantined_total == old.height + future.height
    reasons = set(result.quarantined)
    assert any("older than the raw retention (2 days)" in r for r in reasons)
    assert any("future" in r for r in reasons)
    raw = count(wh, "gpu_samples")
    assert raw == recent.height
    assert rollup_totals(wh, "gpu_samples_1m")[0] == raw
    assert rollup_totals(wh, "gpu_samples_1h")[0] == raw


def test_rollups_agree_with_raw(wh: Warehouse) -> None:
    batch = frame(3, dt.datetime(2026, 11, 19, 10, 0, tzinfo=dt.UTC), 130)
    give_inventory(wh, batch)
    ingestor(wh).write_samples(batch)
    per_hour = wh.frame(
        f"SELECT gpu_uuid, toStartOfHour(ts) AS h, count() AS n, sum(util_ratio) AS u, "
        f"max(util_ratio) AS mx FROM {wh.database}.gpu_samples GROUP BY gpu_uuid, h"
    )
    rolled = wh.frame(
        f"SELECT gpu_uuid, ts AS h, sum(samples) AS n, sum(util_ratio_sum) AS u, "
        f"max(util_ratio_max) AS mx FROM {wh.database}.gpu_samples_1h GROUP BY gpu_uuid, h"
    )
    joined = per_hour.join(rolled, on=["gpu_uuid", "h"], suffix="_r")
    assert joined.height == per_hour.height == rolled.height == 3 * 3
    assert (joined["n"] == joined["n_r"]).all()
    assert ((joined["u"] - joined["u_r"]).abs() < 1e-3).all()
    assert (joined["mx"] == joined["mx_r"]).all()


def test_engine_activity_is_preferred_over_gpu_util(wh: Warehouse) -> None:
    t = dt.datetime(2026, 11, 20, 11, 0, tzinfo=dt.UTC)
    samples = [
        sample(t, gpu_util_ratio=0.9, gr_engine_active_ratio=0.3),
        sample(t, "GPU-b", gpu_util_ratio=0.8),
    ]
    give_inventory(wh, samples)
    ingestor(wh).write_samples(samples)
    got = dict(
        wh.rows(f"SELECT gpu_uuid, round(toFloat64(util_ratio), 2) FROM {wh.database}.gpu_samples")
    )
    assert got == {"GPU-a": 0.3, "GPU-b": 0.8}


def event(ts_min: int, kind: str, **kw: object) -> JobEvent:
    base = {
        "cluster": "c1",
        "job_id": "j1",
        "tenant": "ml/vision",
        "org": "ml",
        "project": "vision",
        "user": "ana",
        "pool": "p1",
        "gpu_model": "H100",
        "gpus_requested": 2.0,
        "node": "n1",
        "workload_type": "training",
    }
    base.update(kw)
    return JobEvent(ts=NOW + dt.timedelta(minutes=ts_min), event=kind, **base)  # type: ignore[arg-type]


def allocations(wh: Warehouse) -> list[tuple]:
    return wh.rows(
        f"SELECT job_id, attempt, gpu_uuid, fraction, start_ts, end_ts, end_event "
        f"FROM {wh.database}.allocations FINAL ORDER BY job_id, attempt, gpu_uuid"
    )


def test_job_events_open_and_close_allocations_in_any_order(wh: Warehouse) -> None:
    gpus = ("GPU-a", "GPU-b")
    submitted = event(0, "submitted")
    started = event(5, "started", gpu_uuids=gpus)
    preempted = event(
        65, "preempted", gpu_uuids=gpus, started_at=started.ts, reason="preempted by j9"
    )
    restarted = event(70, "started", attempt=1, gpu_uuids=("GPU-c",), gpu_fraction=0.5)
    ing = ingestor(wh)
    # terminal first, then the start, then the rest: the same intervals result
    ing.write_job_events([preempted])
    ing.write_job_events([started, submitted])
    ing.write_job_events([restarted])
    rows = allocations(wh)
    assert [(r[0], r[1], r[2], r[3], r[6]) for r in rows] == [
        ("j1", 0, "GPU-a", 1.0, "preempted"),
        ("j1", 0, "GPU-b", 1.0, "preempted"),
        ("j1", 1, "GPU-c", 0.5, ""),
    ]
    assert rows[0][4] == started.ts and rows[0][5] == preempted.ts
    assert rows[2][5] is None  # still running
    # a terminal event that does not say when its attempt started is closed from the warehouse
    ing.write_job_events([event(90, "finished", attempt=1, gpu_uuids=("GPU-c",))])
    closed = allocations(wh)[2]
    assert closed[4] == restarted.ts and closed[5] == NOW + dt.timedelta(minutes=90)
    state = wh.rows(
        f"SELECT argMaxMerge(state), min(submitted_at), max(attempts) "
        f"FROM {wh.database}.jobs GROUP BY cluster, job_id"
    )
    assert state == [("finished", submitted.ts, 1)]
    # re-sending events changes nothing
    ing.write_job_events([started, submitted])
    assert count(wh, "job_events") == 5


def test_bad_events_and_inventory_are_quarantined(wh: Warehouse) -> None:
    ing = ingestor(wh)
    result = ing.write_job_events(
        [event(0, "exploded"), event(1, "started", gpu_fraction=1.5), event(2, "submitted")]
    )
    assert result.written["job_events"] == 1
    assert result.quarantined_total == 2
    inv = ing.write_gpus([GpuInventory(NOW, "c1", "p1", "n1", "GPU-a", 0, "H100", health="sad")])
    assert inv.quarantined_total == 1 and not inv.written["gpu_inventory_log"]
    fields = {r[0] for r in wh.rows(f"SELECT field FROM {wh.database}.quarantine")}
    assert fields == {"event", "gpu_fraction", "health"}


def test_inventory_latest_state_wins(wh: Warehouse) -> None:
    ing = ingestor(wh)
    rows = [
        GpuInventory(
            NOW + dt.timedelta(hours=h),
            "c1",
            "p1",
            "n1",
            "GPU-a",
            0,
            "H100",
            health=state,
            health_reason=reason,
        )
        for h, state, reason in ((0, "healthy", ""), (2, "unhealthy", "Xid 79"), (1, "healthy", ""))
    ]
    ing.write_gpus(rows)
    assert count(wh, "gpu_inventory_log") == 3
    assert wh.rows(f"SELECT health, health_reason FROM {wh.database}.gpus FINAL") == [
        ("unhealthy", "Xid 79")
    ]


def test_config_records_and_decimal_prices(wh: Warehouse) -> None:
    ing = ingestor(wh)
    ing.write_config(
        tenants=[Tenant("ml/vision", "ml", "vision")],
        prices=[Price(NOW, "H100", "2.990000"), Price(NOW, "A100", "abc")],
    )
    assert wh.rows(f"SELECT gpu_model, toString(price) FROM {wh.database}.price_book") == [
        ("H100", "2.99")
    ]
    assert count(wh, "quarantine", "kind = 'price'") == 1
    assert count(wh, "tenants") == 1


def test_source_rejects_are_quarantined_once(wh: Warehouse) -> None:
    from collector.records import Reject

    rejects = [
        Reject(
            "dcgm:http://n1:9400/metrics",
            "gpu_sample",
            "line",
            "DCGM_FI_DEV_X{",
            "unterminated label set",
            "DCGM_FI_DEV_X{ 1",
        )
    ]
    batch = Batch(samples=[sample(NOW - dt.timedelta(minutes=1))], rejects=rejects)
    give_inventory(wh, batch.samples)
    first = ingestor(wh).write(batch, batch_id="scrape-1")
    ingestor(wh).write(batch, batch_id="scrape-1")
    assert first.quarantined == {"unterminated label set": 1}
    assert wh.rows(f"SELECT source, kind, field, reason FROM {wh.database}.quarantine") == [
        ("dcgm:http://n1:9400/metrics", "gpu_sample", "line", "unterminated label set")
    ]


def test_jobs_without_placement_hold_their_requested_gpus(wh: Warehouse) -> None:
    ing = ingestor(wh)
    ing.write_job_events(
        [
            event(0, "submitted", gpus_requested=3.0),
            event(10, "started", gpus_requested=3.0, node=""),
            event(70, "finished", gpus_requested=3.0, node=""),
        ]
    )
    ing.write_job_events(
        [
            event(0, "submitted", job_id="q", gpus_requested=1.0),
            event(5, "cancelled", job_id="q", gpus_requested=1.0),
        ]
    )
    rows = wh.rows(
        f"SELECT job_id, gpu_uuid, fraction, dateDiff('minute', start_ts, end_ts) "
        f"FROM {wh.database}.allocations FINAL"
    )
    assert rows == [("j1", "", 3.0, 60)]  # the job that never started holds nothing


# -- GPU processes and health -------------------------------------------------------------------
GIB = 2**30


def process(pid: int, **kw: object) -> GpuProcess:
    base: dict[str, object] = {
        "ts": NOW - dt.timedelta(minutes=1),
        "gpu_uuid": "GPU-a",
        "mig_instance": "",
        "pid": pid,
        "used_memory_bytes": 20 * GIB,
        "sm_util_ratio": 0.7,
        "pod_uid": "6f1c-pod",
        "cluster": "c1",
        "node": "n1",
    }
    base.update(kw)
    return GpuProcess(**base)  # type: ignore[arg-type]


def health(gpu: str = "GPU-a", **kw: object) -> GpuHealth:
    base: dict[str, object] = {"ts": NOW - dt.timedelta(minutes=1), "cluster": "c1", "node": "n1"}
    base.update(kw)
    return GpuHealth(gpu_uuid=gpu, **base)  # type: ignore[arg-type]


def test_processes_and_health_are_written_once(wh: Warehouse) -> None:
    batch = Batch(
        processes=[
            process(2101),
            process(
                2202,
                gpu_uuid="GPU-b",
                mig_instance="13",
                used_memory_bytes=None,
                sm_util_ratio=None,
                pod_uid="",
                slurm_job_id="456",
            ),
        ],
        health=[
            health(
                clock_event_reasons=0x4,
                ecc_dbe_volatile=0,
                remapped_rows_correctable=2,
                remapped_rows_uncorrectable=0,
                remapped_rows_pending=False,
                remapped_rows_failure=False,
            ),
            health("GPU-b", gpu_lost=True),  # a lost GPU: nothing else could be read
        ],
    )
    give_inventory(wh, batch.processes)
    first = ingestor(wh).write(batch, batch_id="poll-1")
    assert first.written == {"gpu_processes": 2, "gpu_health": 2}
    assert not first.quarantined
    ingestor(wh).write(batch, batch_id="poll-1")  # a retry after a lost reply
    ingestor(wh).write_processes(batch.processes)  # no batch id: the content names it
    ingestor(wh).write_processes(batch.processes)
    assert count(wh, "gpu_processes") == 2 + 2  # poll-1 once, the content-named batch once
    assert count(wh, "gpu_health") == 2
    assert wh.rows(
        "SELECT cluster, node, gpu_uuid, mig_instance, pid, used_memory_bytes, "
        "round(toFloat64(sm_util_ratio), 2), pod_uid, slurm_job_id "
        f"FROM {wh.database}.gpu_processes ORDER BY pid LIMIT 1 BY pid"
    ) == [
        ("c1", "n1", "GPU-a", "", 2101, 20 * GIB, 0.7, "6f1c-pod", ""),
        ("c1", "n1", "GPU-b", "13", 2202, None, None, "", "456"),
    ]
    assert wh.rows(
        f"SELECT gpu_uuid, clock_event_reasons, ecc_dbe_volatile, remapped_rows_correctable, "
        f"remapped_rows_pending, gpu_lost FROM {wh.database}.gpu_health ORDER BY gpu_uuid"
    ) == [("GPU-a", 4, 0, 2, False, False), ("GPU-b", None, None, None, None, True)]


def test_bad_processes_and_health_are_quarantined_with_field(wh: Warehouse) -> None:
    ing = ingestor(wh, retention_days=2)
    give_inventory(wh, [process(1)])
    bad_processes = {
        "ts": process(1, ts=dt.datetime(2026, 11, 20, 11, 0)),  # naive
        "cluster": process(2, cluster=""),
        "node": process(3, node=""),
        "gpu_uuid": process(4, gpu_uuid=""),
        "pid": process(-5),
        "used_memory_bytes": process(6, used_memory_bytes=-1),
        "sm_util_ratio": process(7, sm_util_ratio=45.0),  # a percent
        "pod_uid": process(8, pod_uid="u" * 5000),
    }
    result = ing.write_processes([process(2101), *bad_processes.values()])
    assert result.written["gpu_processes"] == 1
    assert result.quarantined_total == len(bad_processes)
    bad_health = {
        "ts": health(ts=NOW + dt.timedelta(hours=1)),
        "gpu_uuid": health(""),
        "clock_event_reasons": health(clock_event_reasons=-1),
        "ecc_dbe_volatile": health(ecc_dbe_volatile=1.5),
        "remapped_rows_pending": health(remapped_rows_pending="yes"),
    }
    result = ing.write_health([health(), *bad_health.values()])
    assert result.written["gpu_health"] == 1
    assert result.quarantined_total == len(bad_health)
    rows = wh.rows(f"SELECT kind, field, reason, payload FROM {wh.database}.quarantine")
    fields = {kind: {r[1] for r in rows if r[0] == kind} for kind in ("gpu_process", "gpu_health")}
    assert fields == {"gpu_process": set(bad_processes), "gpu_health": set(bad_health)}
    by_field = {(r[0], r[1]): r for r in rows}
    assert "within 0-1" in by_field[("gpu_process", "sm_util_ratio")][2]
    assert "future" in by_field[("gpu_health", "ts")][2]
    assert json.loads(by_field[("gpu_process", "pid")][3])["pid"] == -5
    assert count(wh, "gpu_processes") == count(wh, "gpu_health") == 1


def test_processes_and_health_outside_retention_are_quarantined(wh: Warehouse) -> None:
    ing = ingestor(wh, retention_days=2)
    give_inventory(wh, [process(1)])
    old = NOW - dt.timedelta(days=3)
    result = ing.write(
        Batch(processes=[process(1, ts=old), process(2)], health=[health(ts=old), health()])
    )
    assert result.written == {"gpu_processes": 1, "gpu_health": 1}
    reasons = set(result.quarantined)
    assert len(reasons) == 2 and all(
        r.startswith("ts is older than the raw retention (2 days): ") for r in reasons
    )
    assert any("gpu_processes" in r for r in reasons) and any("gpu_health" in r for r in reasons)
    assert count(wh, "quarantine", "field = 'ts'") == 2
