"""Ingest tokens: made and revoked from the command line, checked by a real `gpuledger serve`
over HTTP, scoped to one cluster (and node), denials in the audit log."""

from __future__ import annotations

import datetime as dt
import json
import stat
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import requests
from cli_runner import Cli
from conftest import free_port, make_token, serving

from collector.records import SAMPLE_SCHEMA, Batch, GpuInventory, GpuSample
from collector.spool import dump_batch
from gpuledger.tokens import TokenBook, TokenStore

pytestmark = pytest.mark.integration


def _batch(cluster: str, node: str) -> bytes:
    ts = dt.datetime.now(dt.UTC).replace(microsecond=0)
    sample = GpuSample(ts, cluster, node, f"GPU-{node}", 0, "H100", gpu_util_ratio=0.5)
    gpu = GpuInventory(ts, cluster, "", node, f"GPU-{node}", 0, "H100")
    frame = pl.DataFrame([sample], schema=SAMPLE_SCHEMA, orient="row")
    return dump_batch(Batch(samples=frame, gpus=[gpu]))


def _run(cli: Cli, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, env=env, timeout=120)


def test_the_store_keeps_hashes_only_and_the_book_refuses_what_it_should(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "t" / "ingest-tokens.json")
    token, record = store.create("c1", by="ops")
    text = store.path.read_text()
    assert token not in text and record.sha256 in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    clock = [0.0]
    book = TokenBook(store, clock=lambda: clock[0])
    assert book.check(f"Bearer {token}")[0] == record
    for header, why in (
        ("", "no ingest token"),
        (f"Basic {token}", "no ingest token"),
        ("Bearer glt_00000000_" + "x" * 43, "not known"),
        (f"Bearer {token[:-1]}x", "not known"),
        ("Bearer " + "\u00e9" * 50, "not known"),
    ):
        assert why in book.check(header)[1], header
    store.revoke(record.id)
    clock[0] += 2  # the book looks at the file again after a second
    found, why = book.check(f"Bearer {token}")
    assert found is None and f"ingest token {record.id} was revoked" in why
    with pytest.raises(ValueError, match="no token 'nope'"):
        store.revoke("nope")


def test_serve_takes_only_its_tokens_rows(
    tmp_path: Path, run_cli: Cli, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    c1 = make_token(run_cli, cli_env, data, "c1")
    node_a = make_token(run_cli, cli_env, data, "c1", "--node", "a")
    listed = _run(run_cli, cli_env, "token", "list", "--data-dir", str(data)).stdout
    assert listed.count(" c1 ") == 2 and c1 not in listed and node_a not in listed
    with serving(gpuledger_cmd, cli_env, data) as url:

        def post(body: bytes, token: str | None, batch_id: str) -> requests.Response:
            headers = {"X-Batch-Id": batch_id}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            return requests.post(f"{url}/api/v1/ingest", data=body, headers=headers, timeout=30)

        anonymous = post(_batch("c1", "a"), None, "b0")
        assert anonymous.status_code == 401 and "no ingest token" in anonymous.json()["error"]
        assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
        assert post(_batch("c1", "a"), "glt_0_nope", "b1").status_code == 401
        assert post(_batch("c1", "a"), c1, "b2").status_code == 202
        other = post(_batch("c2", "a"), c1, "b3")
        assert other.status_code == 403 and "cluster 'c2'" in other.json()["error"]
        assert post(_batch("c1", "a"), node_a, "b4").status_code == 202
        stray = post(_batch("c1", "b"), node_a, "b5")
        assert stray.status_code == 403 and "node 'b'" in stray.json()["error"]
        # revoked while the server runs: refused from then on
        c1_id = c1.split("_")[1]
        assert (
            _run(run_cli, cli_env, "token", "revoke", c1_id, "--data-dir", str(data)).returncode
            == 0
        )
        deadline, late = time.monotonic() + 30, 0  # the server looks again within a second
        while post(_batch("c1", "a"), c1, f"b6-{late}").status_code == 202:
            late += 1
            assert time.monotonic() < deadline, "the revoked token still writes"
            time.sleep(0.2)
        assert post(_batch("c1", "a"), c1, "b7").status_code == 401
    rows = _run(
        run_cli,
        cli_env,
        "sql",
        "SELECT cluster, node FROM gpu_samples ORDER BY node",
        "--format",
        "json",
        "--data-dir",
        str(data),
    )
    # b2, b4 and what was sent in the second before the revocation was seen
    assert json.loads(rows.stdout) == [{"cluster": "c1", "node": "a"}] * (2 + late)
    audit = _run(
        run_cli,
        cli_env,
        "audit",
        "--action",
        "ingest",
        "--format",
        "json",
        "--data-dir",
        str(data),
    )
    denied = json.loads(audit.stdout)
    assert {e["outcome"] for e in denied} == {"denied"}
    whys = " ".join(e["detail"] for e in denied)
    assert "no ingest token" in whys and "cluster 'c2'" in whys and "was revoked" in whys


def test_serve_will_not_show_its_dashboard_beyond_loopback_unasked(
    tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, "GPULEDGER_SERVER__HOST": "0.0.0.0"}
    got = _run(run_cli, env, "serve", "--port", str(free_port()), "--data-dir", str(tmp_path))
    assert got.returncode == 2
    assert got.stderr.strip().startswith(
        "gpuledger: server.host 0.0.0.0 answers beyond this machine and no user or ingest token"
    )
