"""Slurm collector: sacct parsing, incremental polls, usage summaries, job mapping files.

The fixtures under tests/data/slurm are sacct --parsable2 outputs written by hand in the real
format (see the README there). Two overlapping polls of one cluster on 2024-03-01:

    poll 1 (now 10:06)                          poll 2 (now 10:30)
    1001     COMPLETED 08:05-10:05 4x a100      repeated (must not be emitted again)
    1002_1   RUNNING                            COMPLETED 10:20
    1010+1   RUNNING                            COMPLETED 10:10
    1026     REQUEUED run 0, PENDING run 1      run 1 RUNNING from 10:15
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.records import JOB_EVENTS, GpuSample, JobEvent, TenantRule, samples_frame
from collector.slurm.collector import (
    SACCT_FIELDS,
    GpuSlot,
    SlurmCollector,
    SlurmError,
    enrich_job_ids,
    expand_hostlist,
    gpus_by_job,
    parse_size_bytes,
    parse_state,
    parse_time,
    parse_tres,
    read_job_mapping,
    tres_gpus,
)
from collector.tenancy import UNMAPPED, TenantMapper

DATA = Path(__file__).resolve().parent / "data" / "slurm"
UTC = dt.UTC
POLL1_AT = dt.datetime(2024, 3, 1, 10, 6, tzinfo=UTC)
POLL2_AT = dt.datetime(2024, 3, 1, 10, 30, tzinfo=UTC)
MAPPER = TenantMapper(
    [
        TenantRule("slurm_account", "physics", "sci/physics"),
        TenantRule("slurm_account", "bio*", "sci/bio"),
    ]
)


class Recorded:
    """A sacct stand-in: answers each call with the next recorded output, keeps the args."""

    def __init__(self, *files: str):
        self.outputs = [(DATA / f).read_text() for f in files]
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str]) -> str:
        self.calls.append(list(args))
        return self.outputs[min(len(self.calls), len(self.outputs)) - 1]


def collector(sacct: Recorded, **kw: object) -> SlurmCollector:
    return SlurmCollector("hpc", MAPPER, sacct, since=POLL1_AT - dt.timedelta(hours=4), **kw)


def events_of(events: Sequence[JobEvent], job_id: str, attempt: int = 0) -> dict[str, JobEvent]:
    return {e.event: e for e in events if e.job_id == job_id and e.attempt == attempt}


@pytest.fixture(scope="module")
def poll1():
    c = collector(Recorded("sacct_poll1.txt"))
    return c, c.poll(POLL1_AT)


def test_field_list_is_what_the_fixture_has() -> None:
    assert SACCT_FIELDS[:3] == ("JobID", "JobIDRaw", "JobName")
    for line in (DATA / "sacct_poll2.txt").read_text().splitlines():
        assert len(line.split("|")) == len(SACCT_FIELDS)


def test_completed_job(poll1) -> None:
    _c, p = poll1
    ev = events_of(p.batch.job_events, "1001")
    assert list(ev) == ["submitted", "started", "finished"]
    assert ev["submitted"].ts == dt.datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
    fin = ev["finished"]
    assert fin.ts == dt.datetime(2024, 3, 1, 10, 5, tzinfo=UTC)
    assert fin.started_at == dt.datetime(2024, 3, 1, 8, 5, tzinfo=UTC)
    assert (fin.tenant, fin.org, fin.project, fin.user) == (
        "sci/physics",
        "sci",
        "physics",
        "alice",
    )
    assert (fin.pool, fin.queue, fin.priority_class, fin.priority) == ("gpu", "gpu", "normal", 4294)
    assert (fin.gpus_requested, fin.gpu_model, fin.node) == (4.0, "a100", "gpu01")
    assert fin.name == "train-resnet" and fin.source == "slurm"
    # step rows are usage, never jobs of their own
    assert not any("." in e.job_id for e in p.batch.job_events)


@pytest.mark.parametrize(
    ("job_id", "event", "reason"),
    [
        ("1020", "cancelled", "cancelled by uid 5001"),
        ("1028", "cancelled", "cancelled by uid 0"),
        ("1021", "failed", "FAILED (exit code 1:0)"),
        ("1022", "failed", "TIMEOUT"),
        ("1023", "failed", "OUT_OF_MEMORY"),
        ("1024", "failed", "NODE_FAIL"),
        ("1025", "preempted", "PREEMPTED"),
        ("1026", "preempted", "REQUEUED"),
    ],
)
def test_terminal_states(poll1, job_id: str, event: str, reason: str) -> None:
    _c, p = poll1
    ev = events_of(p.batch.job_events, job_id)
    assert ev[event].reason == reason
    assert [e for e in ev if e not in ("submitted", "started")] == [event]


def test_never_started_jobs_have_no_started_event(poll1) -> None:
    _c, p = poll1
    cancelled = events_of(p.batch.job_events, "1020")
    assert list(cancelled) == ["submitted", "cancelled"]  # Start=None, "None assigned"
    assert cancelled["cancelled"].started_at is None
    # pending: submitted only, GPUs from ReqTRES, the wait reason kept
    pend = events_of(p.batch.job_events, "1027")
    assert list(pend) == ["submitted"]
    assert (pend["submitted"].gpus_requested, pend["submitted"].gpu_model) == (2.0, "h100")
    assert pend["submitted"].reason == "Priority"
    assert pend["submitted"].tenant == UNMAPPED


def test_array_and_heterogeneous_ids(poll1) -> None:
    c, p = poll1
    ids = {e.job_id for e in p.batch.job_events}
    assert {"1002_1", "1002_2", "1002_[3-4]", "1010+0", "1010+1"} <= ids
    assert list(events_of(p.batch.job_events, "1002_1")) == ["submitted", "started"]
    het = events_of(p.batch.job_events, "1010+1")["started"]
    assert (het.node, het.pool, het.gpus_requested) == ("cpu1", "cpu", 0.0)
    assert events_of(p.batch.job_events, "1010+0")["started"].node == "gpu-h1"
    # raw ids ($SLURM_JOB_ID, what mapping files hold) lead back to the JobID
    assert c.job_ids["1003"] == "1002_1" and c.job_ids["1011"] == "1010+1"
    assert c.job_ids["1002"] == "1002_2"  # not the pending "1002_[3-4]" that shares it


def test_requeued_job_is_two_attempts(poll1) -> None:
    _c, p = poll1
    assert list(events_of(p.batch.job_events, "1026", 0)) == ["submitted", "started", "preempted"]
    assert list(events_of(p.batch.job_events, "1026", 1)) == ["submitted"]


def test_malformed_lines_become_rejects(poll1) -> None:
    _c, p = poll1
    fields = {r.payload.split("|")[0]: r.field for r in p.batch.rejects}
    assert fields == {
        "1030": "line",
        "1031": "State",
        "1032": "Submit",
        "1033": "NodeList",
        "1034": "AllocTRES",
    }
    assert all(r.source == "slurm" and r.kind == "job_event" for r in p.batch.rejects)
    assert all(r.payload in (DATA / "sacct_poll1.txt").read_text() for r in p.batch.rejects)
    assert all(e.event in JOB_EVENTS for e in p.batch.job_events)


def test_usage_aggregates_steps(poll1) -> None:
    _c, p = poll1
    usage = {u.job_id: u for u in p.usage}
    u = usage["1001"]
    # .0 (90%, 1 h) and .1 (30%, 1 h); the idle batch launcher and extern are left out
    assert u.gpu_util_ratio == pytest.approx(0.60)
    assert u.gpu_mem_bytes == 30 * 2**30
    assert (u.steps, u.final, u.attempt, u.cluster) == (2, True, 0, "hpc")
    assert usage["1028"].gpu_util_ratio == pytest.approx(0.03)
    assert usage["1028"].gpu_mem_bytes == 2048 * 2**20


def test_second_overlapping_poll_emits_only_what_is_new() -> None:
    sacct = Recorded("sacct_poll1.txt", "sacct_poll2.txt")
    c = collector(sacct)
    first = c.poll(POLL1_AT)
    second = c.poll(POLL2_AT)
    got = [(e.job_id, e.attempt, e.event) for e in second.batch.job_events]
    assert sorted(got) == [
        ("1002_1", 0, "finished"),
        ("1010+1", 0, "finished"),
        ("1026", 1, "started"),
    ]
    # across both polls every (job, attempt, event, ts) appears exactly once
    both = [*first.batch.job_events, *second.batch.job_events]
    keys = Counter((e.job_id, e.attempt, e.event, e.ts) for e in both)
    assert max(keys.values()) == 1
    # the frozen summary of 1001 is not repeated; running 1002_2 is reported, not final
    usage = {u.job_id: u for u in second.usage}
    assert "1001" not in usage
    assert usage["1002_1"].final and usage["1002_1"].gpu_util_ratio == pytest.approx(0.64)
    assert not usage["1002_2"].final
    # polling the same output again yields nothing new
    assert c.poll(POLL2_AT + dt.timedelta(minutes=1)).batch.job_events == []
    # runs that ended long before the window are forgotten (memory stays bounded)
    assert c.job_ids.get("1021") == "1021"
    sacct.outputs.append("")
    c.poll(POLL2_AT + dt.timedelta(days=3))
    c.poll(POLL2_AT + dt.timedelta(days=3, minutes=1))  # window now starts 3 days later
    assert "1021" not in c.job_ids and c.job_ids["1002"] == "1002_2"  # still running


def test_window_follows_the_high_water_mark() -> None:
    sacct = Recorded("sacct_poll1.txt", "sacct_poll2.txt")
    c = collector(sacct, overlap=dt.timedelta(minutes=10))
    c.poll(POLL1_AT)
    p = c.poll(POLL2_AT)
    assert p.window_start == POLL1_AT - dt.timedelta(minutes=10)
    args = sacct.calls[1]
    assert "--starttime=2024-03-01T09:56:00" in args and "--endtime=2024-03-01T10:30:00" in args
    assert {"--parsable2", "--noheader", "--allusers", "--duplicates", "--array"} <= set(args)
    assert f"--format={','.join(SACCT_FIELDS)}" in args
    assert c.high_water_mark == POLL2_AT


def test_times_in_the_controllers_zone() -> None:
    cet = dt.timezone(dt.timedelta(hours=1))
    sacct = Recorded("sacct_poll1.txt")
    c = collector(sacct, timezone=cet)
    ev = events_of(c.collect(POLL1_AT).job_events, "1001")
    assert ev["finished"].ts == dt.datetime(2024, 3, 1, 9, 5, tzinfo=UTC)
    assert "--endtime=2024-03-01T11:06:00" in sacct.calls[0]


def test_failed_sacct_raises_and_keeps_the_window(tmp_path: Path) -> None:
    script = tmp_path / "sacct"
    script.write_text(
        "#!/bin/sh\necho 'sacct: error: Problem talking to the database' >&2\nexit 1\n"
    )
    script.chmod(0o755)
    c = SlurmCollector("hpc", MAPPER, [str(script)], since=POLL1_AT)
    with pytest.raises(SlurmError, match="Problem talking to the database"):
        c.poll(POLL2_AT)
    assert c.high_water_mark == POLL1_AT
    with pytest.raises(SlurmError, match="not found"):
        SlurmCollector("hpc", MAPPER, [str(tmp_path / "nope")]).poll(POLL2_AT)


def test_argv_runner_passes_the_arguments(tmp_path: Path) -> None:
    script = tmp_path / "sacct"
    script.write_text(
        f'#!/bin/sh\necho "$@" > {tmp_path / "args"}\ncat {DATA / "sacct_poll2.txt"}\n'
    )
    script.chmod(0o755)
    c = SlurmCollector("hpc", MAPPER, [str(script)], since=POLL1_AT, extra_args=["--clusters=hpc"])
    batch = c.collect(POLL2_AT)
    assert {e.job_id for e in batch.job_events} >= {"1001", "1026"}
    assert (tmp_path / "args").read_text().split()[-1] == "--clusters=hpc"


def test_gpu_uuids_resolver_opens_allocations() -> None:
    def uuids(job_id: str, node: str) -> list[str]:
        return [f"GPU-{node}-{i}" for i in range(2)] if job_id == "1001" else []

    c = collector(Recorded("sacct_poll1.txt"), gpu_uuids_for=uuids)
    ev = events_of(c.collect(POLL1_AT).job_events, "1001")
    assert ev["started"].gpu_uuids == ev["finished"].gpu_uuids == ("GPU-gpu01-0", "GPU-gpu01-1")
    assert ev["submitted"].gpu_uuids == ()


# -- field parsers ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("gpu01", ["gpu01"]),
        ("a[1-2],b3", ["a1", "a2", "b3"]),
        ("r[1-2]n[09-10]", ["r1n09", "r1n10", "r2n09", "r2n10"]),
        ("gpu-h[1]", ["gpu-h1"]),
        ("None assigned", []),
        ("", []),
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["gpu[01-", "gpu]1", "gpu[a-b]", "gpu[3-1]", "a,,b", "g[[1]]"])
def test_expand_hostlist_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(bad)


@given(st.lists(st.integers(0, 300), min_size=1, max_size=20, unique=True))
def test_hostlist_ranges_round_trip(numbers: list[int]) -> None:
    text = "n[" + ",".join(f"{n:03d}" for n in numbers) + "]"
    assert expand_hostlist(text) == [f"n{n:03d}" for n in numbers]


def test_tres() -> None:
    tres = parse_tres("billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1")
    assert tres_gpus(tres) == (2.0, "a100")
    assert tres_gpus(parse_tres("gres/gpu:a100=2,gres/gpu:v100=3")) == (5.0, "")
    assert tres_gpus(parse_tres("cpu=8,gres/gpumem=80G,gres/gpuutil=0,gres/gpu=1")) == (1.0, "")
    assert tres_gpus(parse_tres("cpu=4,mem=1G")) == (0.0, "")
    assert tres_gpus(parse_tres("gres/gpu:1g.10gb=2")) == (2.0, "1g.10gb")
    assert parse_tres("") == {}
    with pytest.raises(ValueError):
        tres_gpus(parse_tres("gres/gpu=2.5"))
    with pytest.raises(ValueError):
        parse_tres("cpu")


def test_sizes_states_times() -> None:
    assert parse_size_bytes("21794M") == 21794 * 2**20
    assert parse_size_bytes("1.5G") == 3 * 2**29
    assert parse_size_bytes("0") == 0
    with pytest.raises(ValueError):
        parse_size_bytes("12Q")
    assert parse_state("CANCELLED by 1234") == ("CANCELLED", "by 1234")
    assert parse_state("CANCELLED+") == ("CANCELLED", "")
    assert parse_state("OUT_OF_MEMORY") == ("OUT_OF_MEMORY", "")
    with pytest.raises(ValueError):
        parse_state("EXPLODED")
    assert parse_time("Unknown") is None and parse_time("None") is None
    assert parse_time("1709287200") == dt.datetime(2024, 3, 1, 10, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_time("yesterday")


# -- dcgm-exporter job mapping files -----------------------------------------------------------
def test_read_job_mapping() -> None:
    mapping = read_job_mapping(DATA / "gpujobmap")
    assert mapping == {
        GpuSlot(0): ("1003",),
        GpuSlot(1): ("1003",),
        GpuSlot(2): ("1010", "1011"),
        GpuSlot(3, "0"): ("1025",),
    }
    assert gpus_by_job(mapping)["1003"] == (GpuSlot(0), GpuSlot(1))
    assert read_job_mapping(DATA / "no-such-dir") == {}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_mapping_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("5\n")
    (tmp_path / "1").write_text("6\n")
    (tmp_path / "1").chmod(0)
    assert read_job_mapping(tmp_path) == {GpuSlot(0): ("5",)}


def _sample(index: int, mig: str = "", job: str = "", node: str = "gpu03") -> GpuSample:
    return GpuSample(
        ts=POLL1_AT,
        cluster="hpc",
        node=node,
        gpu_uuid=f"GPU-{index}{mig}",
        gpu_index=index,
        gpu_model="A100",
        mig_instance=mig,
        job_id=job,
    )


def test_enrich_job_ids_records_and_frames() -> None:
    mapping = read_job_mapping(DATA / "gpujobmap")
    raw = {"1003": "1002_1", "1010": "1010+0", "1011": "1010+1"}
    samples = [
        _sample(0),
        _sample(2),
        _sample(3, "0"),
        _sample(3, "1"),
        _sample(4),
        _sample(1, job="kept"),
        _sample(0, node="other"),
    ]
    want = ["1002_1", "1010+0", "1025", "", "", "kept", ""]
    got = enrich_job_ids(samples, mapping, node="gpu03", job_id_for_raw=raw)
    assert [s.job_id for s in got] == want
    frame = enrich_job_ids(samples_frame(samples), mapping, node="gpu03", job_id_for_raw=raw)
    assert isinstance(frame, pl.DataFrame)
    assert frame["job_id"].to_list() == want
    assert frame.columns == samples_frame(samples).columns
    # a MIG instance without its own file takes its GPU's
    assert enrich_job_ids([_sample(2, "5")], mapping)[0].job_id == "1010"
