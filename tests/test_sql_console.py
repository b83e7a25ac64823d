"""The SQL console (`gpuledger sql`): one statement at a time, read by the engine's own parser,
never reaching outside the warehouse; `--write` only for an admin, and on record.

The check is tested on the real embedded engine (every name it refuses); the command as a user
runs it, on a real data directory: who may write, what is audited, what still works.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import Cli

from warehouse.client import Warehouse
from warehouse.console import ConsoleRefusal, check

pytestmark = pytest.mark.integration

#: The table functions the brief names, each as a user would call it.
TABLE_FUNCTIONS = [
    "file('/etc/passwd', 'LineAsString')",
    "url('http://127.0.0.1:1/x', CSV, 'a Int8')",
    "s3('http://127.0.0.1:1/b/x.csv')",
    "hdfs('hdfs://h:9000/x', CSV, 'a Int8')",
    "remote('127.0.0.1:1', system.one)",
    "remoteSecure('127.0.0.1:1', system.one)",
    "mysql('h:3306', 'db', 't', 'u', 'p')",
    "postgresql('h:5432', 'db', 't', 'u', 'p')",
    "jdbc('jdbc:x', 'db', 't')",
    "odbc('DSN=x', 'db', 't')",
    "executable('x.sh', CSV, 'a Int8')",
    "azureBlobStorage('http://h', 'c', 'b')",
    "gcs('https://storage.googleapis.com/b/x.csv')",
    "iceberg('http://h/t')",
    "icebergS3('http://h/t')",
    "deltaLake('http://h/t')",
    "hudi('http://h/t')",
    "sqlite('x.db', 't')",
    "mongodb('h:27017', 'db', 'c', 'u', 'p', 'a Int8')",
    "redis('h:6379', 'k', 'k String')",
    "cluster('default', system.one)",
    "clusterAllReplicas('default', system.one)",
    "urlCluster('default', 'http://h/x')",
    "s3Cluster('default', 'http://h/x')",
    "fileCluster('default', 'x')",
    "hdfsCluster('default', 'hdfs://h/x')",
    "input('a Int8')",
    "FILE('/etc/passwd', 'LineAsString')",
    "eval('SELECT 1')",
    "filesystem('/etc')",
]
#: The table engines, each in a CREATE TABLE.
ENGINES = [
    "File(CSV)",
    "URL('http://h/x', CSV)",
    "S3('http://h/b/x.csv')",
    "HDFS('hdfs://h/x', CSV)",
    "MySQL('h:3306', 'db', 't', 'u', 'p')",
    "PostgreSQL('h:5432', 'db', 't', 'u', 'p')",
    "JDBC('jdbc:x', 'db', 't')",
    "ODBC('DSN=x', 'db', 't')",
    "Executable('x.sh', CSV)",
    "ExecutablePool('x.sh', CSV)",
    "Kafka('h:9092', 't', 'g', 'CSV')",
    "SQLite('x.db', 't')",
]


def _refused(engine: Warehouse, statement: str) -> str:
    """Why the console does not run ``statement`` (the check parses, so any database does)."""
    checker = engine.read_only(settings=True)
    try:
        with pytest.raises(ConsoleRefusal) as refused:
            check(checker, statement)
    finally:
        checker.close()
    return str(refused.value)


@pytest.mark.parametrize("call", TABLE_FUNCTIONS)
def test_a_table_function_that_reaches_outside_is_named_and_refused(
    engine: Warehouse, call: str
) -> None:
    name = call.partition("(")[0]
    for statement in (
        f"SELECT * FROM {call}",
        f"INSERT INTO tenants (tenant) SELECT * FROM {call}",
        f"CREATE TABLE t ENGINE = Memory AS SELECT * FROM {call}",
    ):
        assert f"`{name}` reaches outside the warehouse" in _refused(engine, statement), statement


@pytest.mark.parametrize("table_engine", ENGINES)
def test_a_table_engine_that_reaches_outside_is_named_and_refused(
    engine: Warehouse, table_engine: str
) -> None:
    message = _refused(engine, f"CREATE TABLE t (a Int8) ENGINE = {table_engine}")
    assert f"`{table_engine.partition('(')[0]}` reaches outside the warehouse" in message


@pytest.mark.parametrize(
    ("statement", "said"),
    [
        ("SELECT file('/etc/hostname')", "`file` reaches outside"),
        ("SELECT length(file('/etc/hostname')) + 1", "`file` reaches outside"),
        ("INSERT INTO FUNCTION url('http://127.0.0.1:1/', CSV, 'a Int8') SELECT 1", "`url`"),
        ("INSERT INTO FUNCTION file('x.csv', CSV, 'a Int8') SELECT 1", "`file`"),
        ("CREATE DATABASE m ENGINE = SQLite('x.db')", "`SQLite` reaches outside"),
        (
            "CREATE DICTIONARY d (a Int8) PRIMARY KEY a SOURCE(FILE(path 'x' format 'CSV')) "
            "LAYOUT(FLAT()) LIFETIME(0)",
            "`file` reaches outside",
        ),
        ("BACKUP TABLE tenants TO File('b')", "BACKUP writes or reads files"),
        ("BACKUP TABLE tenants TO Disk('default', 'b')", "BACKUP writes or reads files"),
        ("RESTORE TABLE tenants FROM Disk('default', 'b')", "RESTORE writes or reads files"),
        ("SELECT 1 INTO OUTFILE 'x.csv'", "INTO OUTFILE and FROM INFILE"),
        ("SELECT * FROM tenants INTO OUTFILE 'x' TRUNCATE COMPRESSION 'gzip'", "INTO OUTFILE"),
        ("SHOW TABLES INTO OUTFILE 'x'", "INTO OUTFILE"),
        ("EXPLAIN SELECT 1 INTO OUTFILE 'x'", "INTO OUTFILE"),
        ("CREATE TABLE z (a Int8) ENGINE = Memory COMMENT 'c' INTO OUTFILE 'x'", "INTO OUTFILE"),
        ("KILL QUERY WHERE 1 INTO OUTFILE 'x'", "INTO OUTFILE"),
        ("INSERT INTO tenants FROM INFILE 'x.csv' FORMAT CSV", "INTO OUTFILE and FROM INFILE"),
        ("SELECT 1; SELECT 2", "one statement at a time"),
        ("SELECT 1; SELECT file('/etc/hostname')", "one statement at a time"),
        ("SELEC 1", "is not SQL the engine reads: Syntax error"),
    ],
)
def test_what_the_console_does_not_run(engine: Warehouse, statement: str, said: str) -> None:
    assert said in _refused(engine, statement)


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        ("SELECT 'Function file', 'INTO OUTFILE x' AS url", "SelectWithUnionQuery"),
        ("SELECT cluster, node FROM gpu_samples WHERE cluster = 'file'", "SelectWithUnionQuery"),
        ("INSERT INTO tenants (tenant) SELECT * FROM values('x/y')", "InsertQuery"),
        ("ALTER TABLE tenants DELETE WHERE tenant = 'x/y'", "AlterQuery"),
        ("ALTER TABLE tenants DELETE WHERE 1 SETTINGS mutations_sync = 2", "AlterQuery"),
        ("DELETE FROM tenants WHERE 1", "DeleteQuery"),
        ("CREATE TABLE z (a Int8) ENGINE = Memory COMMENT 'c'", "CreateQuery"),
        ("KILL QUERY WHERE 1", "KillQueryQuery"),
        ("DROP TABLE tenants;", "DropQuery"),
    ],
)
def test_what_stays_inside_is_one_canonical_statement(
    wh: Warehouse, statement: str, kind: str
) -> None:
    checker = wh.read_only(settings=True)
    try:
        checked = check(checker, statement)
    finally:
        checker.close()
    assert (checked.kind, checked.inline_data) == (kind, False)
    assert ";" not in checked.text


def test_inline_data_is_seen_with_whatever_follows_it(wh: Warehouse) -> None:
    """The engine would run the DROP after the VALUES' ';'; the check sees only the INSERT's
    head, so it says the rows are inline and the console runs none of it."""
    checker = wh.read_only(settings=True)
    try:
        checked = check(checker, "INSERT INTO tenants (tenant) VALUES ('x/y'); DROP TABLE tenants")
    finally:
        checker.close()
    assert checked.inline_data and checked.text == "INSERT INTO tenants (tenant) FORMAT Values"


Console = tuple[Cli, dict[str, str], list[str]]


# -- the command, as a user runs it -------------------------------------------------------------
def _run(
    cli: Cli, env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return cli(*args, env=env, stdin=stdin, timeout=120)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuledger: "), proc.stderr
    return lines[0]


PASSWORD = "correct horse battery"
_TENANTS = "SELECT arrayStringConcat(arraySort(groupArray(tenant)), ' ') FROM tenants"


@pytest.fixture
def console(tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]) -> Console:
    """A migrated data directory: the command, its environment and ``--data-dir DIR``."""
    where = ["--data-dir", str(tmp_path / "d")]
    assert _run(run_cli, cli_env, "db", "migrate", *where).returncode == 0
    return run_cli, cli_env, where


def _add_user(console: Console, name: str, role: str) -> None:
    cmd, env, where = console
    added = _run(
        cmd,
        env,
        "user",
        "add",
        name,
        "--role",
        role,
        "--password-stdin",
        *where,
        stdin=PASSWORD + "\n",
    )
    assert added.returncode == 0, added.stderr


def _audit(console: Console) -> list[dict[str, str]]:
    cmd, env, where = console
    got = _run(cmd, env, "audit", "--action", "sql", "--format", "json", *where)
    assert got.returncode == 0, got.stderr
    return list(reversed(json.loads(got.stdout)))  # oldest first


def _count(console: Console, query: str) -> str:
    cmd, env, where = console
    got = _run(cmd, env, "sql", query, "--format", "csv", *where)
    assert got.returncode == 0, got.stderr
    return got.stdout.splitlines()[1]


def test_the_read_only_console_reads_no_file_and_writes_none(
    console: Console, tmp_path: Path
) -> None:
    cmd, env, where = console
    out = tmp_path / "out.csv"
    read = _run(cmd, env, "sql", "SELECT file('/etc/hostname')", *where)
    assert "`file` reaches outside the warehouse" in _one_line(read)
    wrote = _run(cmd, env, "sql", f"SELECT 1 INTO OUTFILE '{out}'", *where)
    assert "INTO OUTFILE and FROM INFILE" in _one_line(wrote)
    both = _run(cmd, env, "sql", "SELECT 1; SELECT 2", *where)
    assert "one statement at a time" in _one_line(both)
    assert not out.exists()
    inserted = _run(cmd, env, "sql", "INSERT INTO tenants (tenant) VALUES ('x/y')", *where)
    assert "the SQL console is read-only" in _one_line(inserted)
    assert _count(console, "SELECT count() FROM tenants") == "0"


def test_write_needs_an_admin_and_each_refusal_is_audited(
    console: Console,
) -> None:
    cmd, env, where = console
    insert = ["sql", "INSERT INTO tenants (tenant) SELECT 'x/y'", "--write"]
    nameless = _one_line(_run(cmd, env, *insert, *where))
    assert "sql --write runs as a gpuledger user of role admin: give --user NAME" in nameless
    nobody = _run(cmd, env, *insert, "--user", "ana", "--password-stdin", *where, stdin="x\n")
    assert "add one with `gpuledger user add NAME --role admin`" in _one_line(nobody)
    _add_user(console, "ana", "admin")
    _add_user(console, "mo", "manager")
    wrong = _run(cmd, env, *insert, "--user", "ana", "--password-stdin", *where, stdin="nope\n")
    assert "the user name 'ana' or its password is wrong" in _one_line(wrong)
    unknown = _run(
        cmd, env, *insert, "--user", "zed", "--password-stdin", *where, stdin=PASSWORD + "\n"
    )
    assert "the user name 'zed' or its password is wrong" in _one_line(unknown)
    manager = _run(
        cmd, env, *insert, "--user", "mo", "--password-stdin", *where, stdin=PASSWORD + "\n"
    )
    assert "needs role admin, and user mo has role manager" in _one_line(manager)
    no_tty = _run(cmd, env, *insert, "--user", "ana", *where)
    assert "stdin is not one: give it on stdin's first line with --password-stdin" in (
        _one_line(no_tty)
    )
    assert _count(console, "SELECT count() FROM tenants") == "0"
    denied = _audit(console)
    assert [(e["actor"], e["action"], e["outcome"]) for e in denied] == [
        ("ana", "sql.write.denied", "denied"),  # no users yet
        ("ana", "sql.write.denied", "denied"),
        ("zed", "sql.write.denied", "denied"),
        ("mo", "sql.write.denied", "denied"),
    ]
    assert "has role manager" in denied[3]["detail"] and "-- OS user " in denied[3]["detail"]
    assert denied[1]["detail"].startswith("INSERT INTO tenants (tenant) SELECT 'x/y'\n")


def test_an_admin_writes_inside_the_warehouse_only(console: Console, tmp_path: Path) -> None:
    cmd, env, where = console
    _add_user(console, "ana", "admin")
    env_user = {**env, "GPULEDGER_SQL__USER": "ana"}

    def write(statement: str) -> subprocess.CompletedProcess[str]:
        return _run(
            cmd,
            env_user,
            "sql",
            statement,
            "--write",
            "--password-stdin",
            *where,
            stdin=PASSWORD + "\n",
        )

    added = write("INSERT INTO tenants (tenant) SELECT * FROM values('x/y', 'z/w')")
    assert added.returncode == 0, added.stderr
    deleted = write("ALTER TABLE tenants DELETE WHERE tenant = 'z/w' SETTINGS mutations_sync = 2")
    assert deleted.returncode == 0, deleted.stderr
    assert _count(console, _TENANTS) == "x/y"
    out = tmp_path / "out.csv"
    for statement, said in (
        ("INSERT INTO tenants (tenant) VALUES ('a/b'); DROP TABLE tenants", "no inline data"),
        ("INSERT INTO tenants (tenant) VALUES ('a/b')", "no inline data"),
        ("INSERT INTO tenants (tenant) SELECT * FROM file('/etc/hostname')", "`file`"),
        ("INSERT INTO FUNCTION url('http://127.0.0.1:1/', CSV, 't String') SELECT 1", "`url`"),
        ("CREATE TABLE t (a Int8) ENGINE = File(CSV)", "`File` reaches outside"),
        ("BACKUP TABLE tenants TO Disk('default', 'b')", "BACKUP writes or reads files"),
        (f"SELECT * FROM tenants INTO OUTFILE '{out}'", "INTO OUTFILE"),
        ("SELECT 1; DROP TABLE tenants", "one statement at a time"),
    ):
        assert said in _one_line(write(statement)), statement
    assert not out.exists()
    assert _count(console, _TENANTS) == "x/y"
    flagged = _run(
        cmd,
        env,
        "sql",
        "CREATE TABLE scratch (a Int8) ENGINE = Memory",
        "--write",
        "--user",
        "ana",
        "--password-stdin",
        *where,
        stdin=PASSWORD + "\n",
    )
    assert flagged.returncode == 0, flagged.stderr
    entries = _audit(console)
    assert [(e["actor"], e["action"], e["outcome"]) for e in entries] == [
        ("ana", "sql.write", "ok"),
        ("ana", "sql.write", "ok"),
        *[("ana", "sql.write.denied", "denied")] * 8,
        ("ana", "sql.write", "ok"),
    ]
    assert entries[0]["detail"].startswith(
        "INSERT INTO tenants (tenant) SELECT * FROM values('x/y', 'z/w')\n-- OS user "
    )
    assert "no inline data" in entries[2]["detail"]
