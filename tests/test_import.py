"""Public traces through the real ingest path: the published counts survive the warehouse."""

from __future__ import annotations

import datetime as dt
import json
import subprocess

import pytest
from conftest import DATA

from collector.traces import alibaba as traces
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import Window, compute_ledger

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
V2023 = DATA / "alibaba-gpu-v2023"
V2025 = DATA / "alibaba-gpu-v2025" / "disaggregated_DLRM_trace.csv"


def test_v2025_gpu_hours_per_app_agree_with_the_trace(wh: Warehouse) -> None:
    ing = Ingestor(wh, 35)
    events = []
    for batch in traces.alibaba_v2025(V2025, START):
        ing.write(batch)
        events.extend(batch.job_events)
    counts = wh.rows(
        f"SELECT uniqExact(job_id), uniqExact(tenant), uniqExactIf(job_id, pool = 'HN') "
        f"FROM {wh.database}.job_events"
    )
    assert counts == [(23_871, 156, 7_386)]
    a, b = traces.alibaba_v2025_window(V2025, START)
    expected = traces.gpu_hours_by_tenant(events, a, b)
    got = dict(
        wh.rows(
            "SELECT tenant, sum(fraction * dateDiff('millisecond', "
            "greatest(start_ts, {a:DateTime64(3)}), "
            "least(coalesce(end_ts, {b:DateTime64(3)}), {b:DateTime64(3)}))) / 3600000 "
            f"FROM {wh.database}.allocations FINAL GROUP BY tenant",
            {"a": a, "b": b},
        )
    )
    assert set(got) <= set(expected)
    for tenant, hours in expected.items():
        assert abs(got.get(tenant, 0.0) - hours) < 1e-6 * max(1.0, hours), tenant

    # instances the trace leaves open are cut at its end, and the ledger says so; a month
    # after the trace nothing is held (they used to accrue for ever)
    open_at_end = {e.job_id for e in events if e.event == "censored" and e.gpus_requested > 0}
    trace = compute_ledger(wh, Window(a, b), now=b + dt.timedelta(days=400), stranded=False)
    assert trace.totals.allocated_gpu_hours == pytest.approx(sum(expected.values()), rel=1e-9)
    (cut,) = trace.censored
    assert (cut.cluster, cut.observation_end, cut.allocations) == (
        "alibaba-v2025",
        b,
        len(open_at_end),
    )
    assert 0 < cut.gpu_hours < trace.totals.allocated_gpu_hours
    assert f"were still open when its observation ended at {b:%Y-%m-%d %H:%M:%S} UTC" in cut.note()
    later = b.date() + dt.timedelta(days=30)
    after = compute_ledger(
        wh,
        Window.days(later, later + dt.timedelta(days=29)),
        now=b + dt.timedelta(days=400),
        stranded=False,
    )
    assert after.totals.allocated_gpu_hours == 0 and after.censored == ()


def test_import_v2023_from_the_command_line(tmp_path, gpuledger_cmd, cli_env) -> None:
    d = str(tmp_path / "d")
    proc = subprocess.run(
        [
            *gpuledger_cmd,
            "import",
            "alibaba-v2023",
            "--nodes",
            str(V2023 / "openb_node_list_all_node.csv"),
            "--pods",
            str(V2023 / "openb_pod_list_default.csv"),
            "--start",
            "2026-01-01T00:00:00+00:00",
            "--data-dir",
            d,
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run(
        [
            *gpuledger_cmd,
            "sql",
            "SELECT (SELECT uniqExact(node) FROM gpuledger.node_inventory_log) AS nodes, "
            "(SELECT count() FROM gpuledger.gpus FINAL) AS gpus, "
            "(SELECT uniqExact(job_id) FROM gpuledger.job_events) AS pods",
            "--format",
            "csv",
            "--data-dir",
            d,
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.splitlines()[1] == "1523,6212,8152"
    bad = subprocess.run(
        [
            *gpuledger_cmd,
            "import",
            "alibaba-v2025",
            str(V2025),
            "--start",
            "2026-01-01",
            "--data-dir",
            d,
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "has no UTC offset" in bad.stderr
    # the trace's one cluster is the default: no samples, but inventory and jobs name it
    frag = subprocess.run(
        [*gpuledger_cmd, "fragmentation", "--format", "json", "--data-dir", d],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert frag.returncode == 0, frag.stderr
    assert json.loads(frag.stdout)["cluster"] == "alibaba-v2023"
    nosuch = subprocess.run(
        [*gpuledger_cmd, "fragmentation", "--cluster", "nosuch", "--data-dir", d],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert nosuch.returncode == 2
    assert nosuch.stderr.strip() == (
        "gpuledger: --cluster 'nosuch' is not in the warehouse (its clusters: alibaba-v2023)"
    )
