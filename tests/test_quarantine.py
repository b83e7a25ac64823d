"""Samples of GPUs with no inventory are quarantined, and `gpuledger quarantine` lists them and
replays them once the inventory has come: written once however often replay runs (rollups
too), still-bad rows left quarantined once. Against the real embedded engine: the in-process
runs of the CLI get the test's warehouse from ``open_warehouse``; one test runs it as a user
does, as subprocesses on a data directory.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import recent

from collector.records import Batch, GpuHealth, GpuInventory, GpuProcess, GpuSample, Reject
from gpuledger import app
from gpuledger.cli import main
from warehouse.client import Warehouse, WarehouseError
from warehouse.ingest.checks import unknown_gpu_reason
from warehouse.ingest.quarantine import Filters, rebuild, replay
from warehouse.ingest.writer import Ingestor

NOW = recent(dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC))
START = NOW - dt.timedelta(hours=1)


def samples(gpu: str, n: int = 10, cluster: str = "c1", **kw: object) -> list[GpuSample]:
    """``n`` samples of one GPU, 10 s apart from an hour before NOW."""
    base: dict[str, object] = {"gpu_util_ratio": 0.5, "source": "test", **kw}
    return [
        GpuSample(START + dt.timedelta(seconds=10 * i), cluster, "n1", gpu, 0, "H100", **base)  # type: ignore[arg-type]
        for i in range(n)
    ]


def gpu(uuid: str, cluster: str = "c1", **kw: object) -> GpuInventory:
    return GpuInventory(START - dt.timedelta(days=1), cluster, "p1", "n1", uuid, 0, "H100", **kw)  # type: ignore[arg-type]


def ingestor(wh: Warehouse) -> Ingestor:
    return Ingestor(wh, 35, now=lambda: NOW)


def count(wh: Warehouse, table: str, where: str = "1") -> int:
    return int(wh.rows(f"SELECT count() FROM {wh.database}.{table} WHERE {where}")[0][0])


def rolled_up(wh: Warehouse) -> int:
    """Samples the 1-minute rollup counts."""
    return int(wh.rows(f"SELECT sum(samples) FROM {wh.database}.gpu_samples_1m")[0][0] or 0)


# -- quarantined at ingest --------------------------------------------------------------------
def test_samples_of_unknown_gpus_are_quarantined_with_the_reason(wh: Warehouse) -> None:
    ing = ingestor(wh)
    result = ing.write(
        Batch(
            samples=samples("GPU-known") + samples("GPU-x") + samples("GPU-known", 2, "c2"),
            gpus=[gpu("GPU-known")],  # in the same batch: written first, so its samples count
            processes=[
                GpuProcess(START, "GPU-known", "", 1, None, None, cluster="c1", node="n1"),
                GpuProcess(START, "GPU-x", "", 2, None, None, cluster="c1", node="n1"),
            ],
            health=[GpuHealth(START, "GPU-x", cluster="c1", node="n1")],
        )
    )
    assert +result.written == {"gpu_inventory_log": 1, "gpu_samples": 10, "gpu_processes": 1}
    assert result.quarantined == {unknown_gpu_reason("c1"): 10 + 1 + 1, unknown_gpu_reason("c2"): 2}
    reason = unknown_gpu_reason("c1")
    assert reason.startswith("unknown_gpu: no inventory for this GPU in cluster 'c1'")
    assert "`gpuledger quarantine replay --reason unknown_gpu`" in reason
    rows = wh.rows(
        f"SELECT kind, field, value, count() FROM {wh.database}.quarantine "
        "GROUP BY kind, field, value ORDER BY kind, value"
    )
    assert rows == [
        ("gpu_health", "gpu_uuid", "GPU-x", 1),
        ("gpu_process", "gpu_uuid", "GPU-x", 1),
        ("gpu_sample", "gpu_uuid", "GPU-known", 2),  # the same UUID in another cluster
        ("gpu_sample", "gpu_uuid", "GPU-x", 10),
    ]
    # later batches of the known GPU need no inventory; a sample bad anyway says why
    later = [s._replace(ts=s.ts + dt.timedelta(minutes=30)) for s in samples("GPU-known", 2)]
    result = ing.write_samples(later + samples("GPU-x", 1, gpu_util_ratio=45.0))
    assert result.written == {"gpu_samples": 2}
    assert set(result.quarantined) == {
        "gpu_util_ratio must be a ratio within 0-1 (not a percent, not NaN)"
    }


def test_mig_samples_find_their_gpu_by_the_parent_uuid(wh: Warehouse) -> None:
    """A fully partitioned GPU has inventory rows for its instances only."""
    ing = ingestor(wh)
    ing.write_gpus(
        [
            gpu("GPU-m", mig_instance=gi, mig_profile="3g.40gb", capacity_fraction=0.5)
            for gi in ("1", "2")
        ]
    )
    fresh = ingestor(wh)  # knows nothing yet: asks the warehouse
    whole = samples("GPU-m", 3)
    instance = [s._replace(mig_instance="1", mig_profile="3g.40gb") for s in samples("GPU-m", 3)]
    result = fresh.write_samples(whole + instance)
    assert result.written == {"gpu_samples": 6} and not result.quarantined


def test_known_gpus_are_remembered_unknown_ones_asked_again(wh: Warehouse) -> None:
    """An Ingestor remembers the GPUs whose inventory it wrote or found, and asks again about
    the ones it found unknown (their inventory may come from another source)."""
    ing = ingestor(wh)
    ing.write_gpus([gpu("GPU-a")])
    assert ing.write_samples(samples("GPU-b", 2)).quarantined_total == 2
    ingestor(wh).write_gpus([gpu("GPU-b")])  # from elsewhere
    db = wh.database
    later = [s._replace(ts=s.ts + dt.timedelta(minutes=5)) for s in samples("GPU-b", 2)]
    assert ing.write_samples(later).written == {"gpu_samples": 2}
    wh.command(f"RENAME TABLE {db}.gpus TO {db}.gpus_away")  # no answer to a query now
    try:
        assert ing.write_samples(samples("GPU-a", 3) + samples("GPU-b", 1)).written == {
            "gpu_samples": 4
        }  # both known here: no query
        with pytest.raises(WarehouseError):
            ingestor(wh).write_samples(samples("GPU-a", 1))  # a new Ingestor has to ask
    finally:
        wh.command(f"RENAME TABLE {db}.gpus_away TO {db}.gpus")


# -- replay -----------------------------------------------------------------------------------
@pytest.fixture
def cli(wh: Warehouse, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run ``gpuledger`` in-process on the test's warehouse: (exit status, stdout, stderr)."""
    monkeypatch.setattr(app, "open_warehouse", lambda settings, **kw: wh)

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        out, err = capsys.readouterr()
        return status, out, err

    return run


def quarantine_json(cli, *args: str) -> dict:  # type: ignore[no-untyped-def]
    status, out, err = cli("quarantine", "list", "--format", "json", *args)
    assert status == 0, err
    return json.loads(out)


def test_replay_writes_once_after_the_inventory_arrives(wh: Warehouse, cli) -> None:  # type: ignore[no-untyped-def]
    ing = ingestor(wh)
    fleet = [f"GPU-{i}" for i in range(3)]
    batch = Batch(
        samples=[s for g in fleet for s in samples(g)]
        + samples("GPU-never", 5)  # its inventory never comes
        + samples("GPU-0", 1, gpu_util_ratio=45.0),  # bad anyway: a percent
        rejects=[Reject("dcgm:http://n1:9400/metrics", "gpu_sample", "line", "x{", "bad", "x{ 1")],
    )
    assert ing.write(batch, batch_id="agent-1").quarantined_total == 30 + 5 + 1 + 1
    unknown = unknown_gpu_reason("c1")
    listed = quarantine_json(cli, "--reason", "unknown_gpu")
    assert listed["counts"] == [
        {
            "kind": "gpu_sample",
            "reason": unknown,
            "quarantined": 35,
            "replayed": 0,
            "newest": listed["counts"][0]["newest"],
        }
    ]
    assert {e["field"] for e in listed["examples"]} == {"gpu_uuid"} and len(
        listed["examples"]
    ) == 10

    status, out, _ = cli("quarantine", "replay", "--reason", "unknown_gpu")
    assert status == 0 and "nothing to replay" not in out
    assert "still quarantined" in out and "35 gpu_sample × unknown_gpu: " in out
    assert count(wh, "gpu_samples") == 0 and count(wh, "quarantine_replays") == 0

    ingestor(wh).write_gpus([gpu(g) for g in fleet])  # the source sends the inventory
    status, out, _ = cli("quarantine", "replay", "--reason", "unknown_gpu", "--dry-run")
    assert status == 0 and "would write" in out and "30  into gpu_samples" in out
    assert count(wh, "gpu_samples") == 0 and count(wh, "quarantine_replays") == 0

    for _ in range(2):  # replaying twice writes once
        status, out, _ = cli("quarantine", "replay", "--reason", "unknown_gpu")
        assert status == 0
        assert "5 gpu_sample × unknown_gpu: " in out  # GPU-never's, still without inventory
    assert count(wh, "gpu_samples") == 30 and rolled_up(wh) == 30
    assert count(wh, "gpu_samples", "source = 'test' AND gpu_uuid = 'GPU-never'") == 0
    assert count(wh, "quarantine") == 37  # nothing quarantined a second time
    assert count(wh, "quarantine_replays") == 30
    assert count(wh, "audit_log", "action = 'quarantine.replay'") == 1  # the run that wrote

    everything = quarantine_json(cli)["counts"]
    by_reason = {
        (c["kind"], c["reason"][:12]): (c["quarantined"], c["replayed"]) for c in everything
    }
    assert by_reason == {
        ("gpu_sample", "unknown_gpu:"): (5, 30),
        ("gpu_sample", "gpu_util_rat"): (1, 0),
        ("gpu_sample", "bad"): (1, 0),
    }
    # every kind, no filter: the percent stays, the raw line cannot be rebuilt
    status, out, _ = cli("quarantine", "replay")
    assert "not replayable" in out and "the payload is not a record" in out
    assert "1 gpu_sample × gpu_util_ratio must be a ratio within 0-1" in out
    assert count(wh, "gpu_samples") == 30 and count(wh, "quarantine") == 37


def test_a_replay_cut_short_before_marking_writes_nothing_twice(wh: Warehouse) -> None:
    """The marks are lost (a replay killed between its write and its marks): run again, the
    same rows make the same batch id, whose token drops the second insert; samples are also
    found in place by their key."""
    procs = [
        GpuProcess(START, "GPU-late", "", pid, None, None, cluster="c1", node="n1")
        for pid in range(3)
    ]
    ingestor(wh).write(Batch(samples=samples("GPU-late", 8), processes=procs))
    ingestor(wh).write_gpus([gpu("GPU-late")])
    started = dt.datetime.now(dt.UTC)
    first = replay(wh, Ingestor(wh, 35, now=lambda: started), Filters(reason="unknown_gpu"))
    assert first.written == {"gpu_processes": 3, "gpu_samples": 8} and len(first.batch_ids) == 2
    wh.command(f"TRUNCATE TABLE {wh.database}.quarantine_replays")  # the marks never made it
    again = replay(wh, Ingestor(wh, 35, now=lambda: started), Filters(reason="unknown_gpu"))
    assert again.batch_ids == first.batch_ids[:1]  # the processes: the same id, its token
    assert again.already_written == {"gpu_sample": 8}
    assert count(wh, "gpu_processes") == 3
    assert count(wh, "gpu_samples") == 8 and rolled_up(wh) == 8
    assert count(wh, "quarantine_replays") == 3 + 8


def test_a_failed_batch_keeps_nothing_back_and_its_retry_writes_it_all(wh: Warehouse) -> None:
    """A batch's insert fails: nothing of it is written, quarantine included (quarantine comes
    last, as for any group). By the retry (the same batch id) GPU-y has inventory, so the retry
    writes every sample and replay has nothing to do."""
    ingestor(wh).write_gpus([gpu("GPU-k")])
    batch = Batch(samples=samples("GPU-k", 4) + samples("GPU-y", 6))
    db = wh.database
    wh.command(f"ALTER TABLE {db}.gpu_samples ADD CONSTRAINT closed CHECK gpu_uuid = 'none'")
    with pytest.raises(WarehouseError):
        ingestor(wh).write(batch, batch_id="agent-7")
    wh.command(f"ALTER TABLE {db}.gpu_samples DROP CONSTRAINT closed")
    assert count(wh, "quarantine") == 0 and count(wh, "gpu_samples") == 0
    ingestor(wh).write_gpus([gpu("GPU-y")])
    retried = ingestor(wh).write(batch, batch_id="agent-7")
    assert retried.written == {"gpu_samples": 10} and not retried.quarantined
    report = replay(wh, ingestor(wh), Filters())
    assert not report.already_written and not report.written
    assert count(wh, "gpu_samples") == 10 and rolled_up(wh) == 10


def test_a_quarantined_sample_written_since_is_not_replayed_twice(wh: Warehouse) -> None:
    """GPU-y's samples are kept back (no inventory); after its inventory the agent sends them
    again in another batch, which writes them. Replay finds them written and writes nothing."""
    ingestor(wh).write_gpus([gpu("GPU-k")])
    first = ingestor(wh).write(
        Batch(samples=samples("GPU-k", 4) + samples("GPU-y", 6)), batch_id="agent-7"
    )
    assert first.written == {"gpu_samples": 4} and first.quarantined_total == 6
    ingestor(wh).write_gpus([gpu("GPU-y")])
    again = ingestor(wh).write(Batch(samples=samples("GPU-y", 6)), batch_id="agent-8")
    assert again.written == {"gpu_samples": 6}
    started = dt.datetime.now(dt.UTC)
    report = replay(wh, Ingestor(wh, 35, now=lambda: started), Filters())
    assert report.already_written == {"gpu_sample": 6} and not report.written
    assert count(wh, "gpu_samples") == 10 and rolled_up(wh) == 10
    assert count(wh, "quarantine_replays", "outcome = 'already_written'") == 6


def test_records_are_rebuilt_from_their_payloads(wh: Warehouse) -> None:
    """Every replayable kind comes back from the payload ingest wrote, equal to what was sent."""
    old = NOW - dt.timedelta(days=40)
    sent = {
        "gpu_process": GpuProcess(
            old, "GPU-a", "3", 7, 2**30, 0.25, "uid", cluster="c1", node="n1"
        ),
        "gpu_health": GpuHealth(
            old, "GPU-a", 4, remapped_rows_pending=True, cluster="c1", node="n1"
        ),
    }
    ing = ingestor(wh)
    ing.write_gpus([gpu("GPU-a")])
    ing.write_processes([sent["gpu_process"]])
    ing.write_health([sent["gpu_health"]])
    ing.write_samples(samples("GPU-b", 1, power_watts=301.5))
    payloads = dict(wh.rows(f"SELECT kind, payload FROM {wh.database}.quarantine"))
    assert rebuild("gpu_process", payloads["gpu_process"]) == sent["gpu_process"]
    assert rebuild("gpu_health", payloads["gpu_health"]) == sent["gpu_health"]
    (again,) = [rebuild("gpu_sample", payloads["gpu_sample"])]
    assert again == samples("GPU-b", 1, power_watts=301.5)[0]
    older = json.loads(payloads["gpu_sample"])
    del older["tensor_active_ratio"]  # quarantined before the column was added: null
    assert rebuild("gpu_sample", json.dumps(older)) == again
    del older["xid"]
    with pytest.raises(ValueError, match="not a gpu_sample record"):
        rebuild("gpu_sample", json.dumps(older))
    with pytest.raises(ValueError, match="not a record"):
        rebuild("gpu_sample", "DCGM_FI_DEV_GPU_UTIL{gpu=")


# -- the command line -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("replay", "--kind", "tenant"), "--kind 'tenant' cannot be replayed: use one of"),
        (("replay", "--since", "yesterday"), "--since 'yesterday' is not an ISO time"),
        (("list", "--examples", "-1"), "--examples -1 must be 0 or more"),
    ],
)
def test_bad_flags_are_one_line(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status = main(["quarantine", *args, "--data-dir", str(tmp_path / "unused")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert message in err and not (tmp_path / "unused").exists()  # refused before opening


SCRIPT = """
import datetime as dt, sys
from collector.records import GpuInventory, GpuSample
from warehouse.client import connect
from warehouse.ingest.writer import Ingestor
from warehouse.migrate import RenderOptions, migrate

wh = connect("chdb://" + sys.argv[1], "gpuledger")
migrate(wh, RenderOptions())
start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=2)
ing = Ingestor(wh, 35)
if sys.argv[2] == "samples":
    r = ing.write_samples([
        GpuSample(start + dt.timedelta(seconds=10 * i), "c1", "n1", f"GPU-{g}", g, "H100",
                  gpu_util_ratio=0.5)
        for g in range(2) for i in range(10)
    ])
else:
    r = ing.write_gpus([
        GpuInventory(start, "c1", "p", "n1", f"GPU-{g}", g, "H100") for g in range(2)
    ])
print(dict(r.written), r.quarantined_total)
"""


@pytest.mark.integration
def test_replay_as_a_user_runs_it(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = tmp_path / "data"

    def run(*args: str) -> str:
        proc = subprocess.run(
            [*args], env=cli_env, capture_output=True, text=True, timeout=240, check=False
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    def gpuledger(*args: str) -> str:
        return run(*gpuledger_cmd, *args, "--data-dir", str(data))

    assert run(sys.executable, "-c", SCRIPT, str(data), "samples").strip() == "{} 20"
    listed = gpuledger("quarantine", "list", "--kind", "gpu_sample")
    assert "unknown_gpu: no inventory for this GPU in cluster 'c1'" in listed
    assert "`gpuledger quarantine replay --reason unknown_gpu` writes them" in listed
    run(sys.executable, "-c", SCRIPT, str(data), "inventory")
    first = gpuledger("quarantine", "replay", "--reason", "unknown_gpu")
    assert "wrote" in first and "20  into gpu_samples" in first
    assert "nothing to replay" in gpuledger("quarantine", "replay", "--reason", "unknown_gpu")
    query = (
        "SELECT count(), (SELECT sum(samples) FROM gpuledger.gpu_samples_1m), "
        "(SELECT count() FROM gpuledger.quarantine) FROM gpuledger.gpu_samples"
    )
    assert gpuledger("sql", query, "--format", "csv").splitlines()[1] == "20,20,20"
