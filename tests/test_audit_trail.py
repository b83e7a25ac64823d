"""Token and user changes in the audit log, whoever owns the data directory: sent to a running
`serve` over its socket, or kept in a 0600 pending file that the next process opening the
warehouse writes into the log exactly once."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from cli_runner import Cli
from conftest import make_token, serving

from gpuledger.audit_pending import as_json, drain, keep, new_entry
from gpuledger.forward import ForwardError, ForwardServer, tell
from warehouse.audit import AuditEntry, audit_entries
from warehouse.client import Warehouse

pytestmark = pytest.mark.integration

PENDING = "audit-pending.json"


def _credentials_actions(wh: Warehouse) -> list[tuple[str, str, str]]:
    entries = reversed(audit_entries(wh))
    return [(e.action, e.object, e.outcome) for e in entries if e.action != "demo.start"]


def test_kept_entries_are_written_once_even_after_a_crash(wh: Warehouse, tmp_path: Path) -> None:
    path = tmp_path / PENDING
    made = new_entry("ops", "token.create", "c1", "cluster c1")
    revoked = new_entry("ops", "token.revoke", "abcd1234", "cluster c1")
    keep(path, made)
    keep(path, revoked)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # a crash: the first written, and the file not yet emptied
    wh.audit(made.actor, made.action, made.object, made.detail, made.outcome, made.ts)
    assert drain(wh, path) == 2
    assert not path.exists()
    assert drain(wh, path) == 0
    assert _credentials_actions(wh) == [
        ("token.create", "c1", "ok"),
        ("token.revoke", "abcd1234", "ok"),
    ]
    assert audit_entries(wh)[1].ts == made.ts  # the time it happened, not when written


def test_an_entry_damaged_by_hand_is_written_as_what_it_says(wh: Warehouse, tmp_path: Path) -> None:
    path = tmp_path / PENDING
    keep(path, new_entry("ops", "user.add", "ana", "role admin"))
    doc = json.loads(path.read_text())
    doc["entries"].append({"ts": "yesterday", "actor": "?"})
    path.write_text(json.dumps(doc))
    assert drain(wh, path) == 2
    damaged = audit_entries(wh, action="audit.damaged")
    assert len(damaged) == 1 and '"ts": "yesterday"' in damaged[0].detail
    assert damaged[0].outcome == "failed" and not path.exists()


def test_the_socket_takes_only_credential_entries_of_its_own_user(tmp_path: Path) -> None:
    taken: list[AuditEntry] = []
    server = ForwardServer(tmp_path, lambda argv, out: 0, taken.append)
    try:
        entry = new_entry("ops", "user.remove", "ana", "role admin")
        tell(tmp_path, "1", entry, 30)
        assert taken == [entry]
        with pytest.raises(ForwardError, match=r"entries of 'sql\.write' are not taken"):
            tell(tmp_path, "1", new_entry("ops", "sql.write", "db", "DROP TABLE x"), 30)
        request = json.dumps({"version": 1, "audit": as_json(entry)}).encode() + b"\n"
        stranger = server.reply_to(request, os.getuid() + 1)
        assert stranger.status == 1 and "runs as another user" in stranger.stderr
        bad = server.reply_to(b'{"version": 1, "audit": {"actor": "x"}}\n', os.getuid())
        assert bad.status == 1 and "audit entry is not one" in bad.stderr
        assert taken == [entry]
    finally:
        server.close()


def _run(
    cli: Cli, env: dict[str, str], *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return cli(*args, env=env, stdin=stdin, timeout=120)


def _changes(cmd: Cli, env: dict[str, str], data: Path, cluster: str) -> None:
    """A token made and revoked, a user added and removed, and a revocation that fails."""
    where = ("--data-dir", str(data))
    make_token(cmd, env, data, cluster)
    listed = _run(cmd, env, "token", "list", *where).stdout.splitlines()
    token_id = next(line.split()[0] for line in listed if f" {cluster} " in line)
    assert _run(cmd, env, "token", "revoke", token_id, *where).returncode == 0
    assert _run(cmd, env, "token", "revoke", "nosuch", *where).returncode == 2
    added = _run(cmd, env, "user", "add", f"u-{cluster}", "--role", "manager", *where)
    assert added.returncode == 0, added.stderr
    assert _run(cmd, env, "user", "remove", f"u-{cluster}", *where).returncode == 0


def _audit(cmd: Cli, env: dict[str, str], data: Path) -> list[dict[str, str]]:
    got = _run(cmd, env, "audit", "--format", "json", "--data-dir", str(data))
    assert got.returncode == 0, got.stderr
    return [e for e in reversed(json.loads(got.stdout)) if e["action"] != "demo.start"]


def _summary(entries: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    return [
        (e["action"], "-" if e["action"] == "token.create" else e["object"], e["outcome"])
        for e in entries
    ]


def _expected(cluster: str, token_id: str) -> list[tuple[str, str, str]]:
    return [
        ("token.create", "-", "ok"),
        ("token.revoke", token_id, "ok"),
        ("token.revoke", "nosuch", "failed"),
        ("user.add", f"u-{cluster}", "ok"),
        ("user.remove", f"u-{cluster}", "ok"),
    ]


def _token_id(entries: list[dict[str, str]]) -> str:
    return next(e["object"] for e in entries if e["action"] == "token.revoke")


def test_changes_wait_for_the_next_process_when_nobody_owns_the_warehouse(
    tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]
) -> None:
    data = tmp_path / "d"
    _changes(run_cli, cli_env, data, "c1")  # before any warehouse exists, even
    pending = data / PENDING
    assert stat.S_IMODE(pending.stat().st_mode) == 0o600
    assert len(json.loads(pending.read_text())["entries"]) == 5
    entries = _audit(run_cli, cli_env, data)
    assert _summary(entries) == _expected("c1", _token_id(entries))
    assert {e["actor"] for e in entries} == {_os_user()}
    assert "no token 'nosuch'" in entries[2]["detail"]
    assert entries[0]["detail"] == "cluster c1" and entries[3]["detail"] == "role manager"
    assert not pending.exists()
    assert _audit(run_cli, cli_env, data) == entries  # once


def test_changes_reach_the_running_server_at_once(
    tmp_path: Path, run_cli: Cli, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = tmp_path / "d"
    _changes(run_cli, cli_env, data, "before")  # kept; `serve` writes them as it starts
    with serving(gpuledger_cmd, cli_env, data):
        assert not (data / PENDING).exists()
        _changes(run_cli, cli_env, data, "during")
        assert not (data / PENDING).exists()  # sent over the socket, written there
        entries = _audit(run_cli, cli_env, data)  # answered by `serve`
    before, during = entries[:5], entries[5:]
    assert _summary(before) == _expected("before", _token_id(before))
    assert _summary(during) == _expected("during", _token_id(during))
    assert _audit(run_cli, cli_env, data) == entries  # read directly: the same, once


def test_an_owner_that_does_not_answer_leaves_the_entry_waiting(
    tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]
) -> None:
    """Another process holds the engine's lock and has no socket to ask it on (such as
    `gpuledger import` while it runs): the entry waits, and is written once it has gone."""
    data = tmp_path / "d"
    data.mkdir()
    where = ("--data-dir", str(data))
    with open(data / "status", "w") as status:
        status.write("PID: 4242\n")
        status.flush()
        fcntl.flock(status, fcntl.LOCK_EX)
        added = _run(run_cli, cli_env, "user", "add", "ana", "--role", "admin", "-v", *where)
        fcntl.flock(status, fcntl.LOCK_UN)
    (data / "status").unlink()
    assert added.returncode == 0
    note = added.stderr.splitlines()[-1]  # -v: the log line
    assert "INFO gpuledger.audit_trail: the audit log did not take this change now (" in note
    assert "(PID 4242)" in note and f"it waits in {data / PENDING}" in note
    assert len(json.loads((data / PENDING).read_text())["entries"]) == 1
    assert _summary(_audit(run_cli, cli_env, data)) == [("user.add", "ana", "ok")]
    assert not (data / PENDING).exists()


def _os_user() -> str:
    from gpuledger.audit_trail import os_user

    return os_user()
