"""The command line, run as a user runs it, on a real data directory: by the tests' CLI worker
(tests/cli_runner.py: ``gpuledger.cli.main`` with the command's own environment, stdin and
output), and as a subprocess where the process itself is under test (a closed pipe, a data
directory another process holds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import Cli

from gpuledger.cli import format_rows
from gpuledger.parser import parse
from warehouse.times import format_duration

pytestmark = pytest.mark.integration


def run(
    cli: Cli, env: dict[str, str], *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return cli(*args, env=env, timeout=timeout)


def run_process(
    cmd: list[str], env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args], env=env, capture_output=True, text=True, timeout=240, check=False
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr  # one clear line, not a traceback
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_sql_formats_and_db_status(tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]) -> None:
    d = str(tmp_path / "d")
    proc = run(run_cli, cli_env, "db", "status", "--data-dir", d)
    assert proc.returncode == 0, proc.stderr
    assert "pending" in proc.stdout and "gpu_samples" in proc.stdout
    proc = run(run_cli, cli_env, "db", "migrate", "--data-dir", d)
    assert proc.returncode == 0, proc.stderr
    assert "schema is up to date" in proc.stdout
    proc = run(run_cli, cli_env, "db", "status", "--data-dir", d)
    assert "pending" not in proc.stdout and proc.stdout.count("applied") >= 20
    query = "SELECT number AS n, toString(number * 2) AS s FROM system.numbers LIMIT 3"
    as_json = json.loads(
        run(run_cli, cli_env, "sql", query, "--format", "json", "--data-dir", d).stdout
    )
    assert as_json == [{"n": 0, "s": "0"}, {"n": 1, "s": "2"}, {"n": 2, "s": "4"}]
    as_csv = run(run_cli, cli_env, "sql", query, "--format", "csv", "--data-dir", d).stdout
    assert as_csv.splitlines() == ["n,s", "0,0", "1,2", "2,4"]
    # a table named without its database is the warehouse's own
    bare = run(run_cli, cli_env, "sql", "SELECT count() FROM gpu_samples", "--data-dir", d)
    assert bare.returncode == 0 and bare.stdout.split()[2:] == ["0", "(1", "row)"], bare.stderr


def test_sql_json_holds_every_type(tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]) -> None:
    """Dates, times, UUIDs, decimals, IPs, maps, arrays and NaN all come out as valid JSON."""
    query = (
        "SELECT toDate('2026-12-04') AS d, toDateTime64('2026-12-04 01:02:03.5', 3, 'UTC') AS t, "
        "toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0') AS u, toDecimal64('12.34', 2) AS m, "
        "toIPv4('10.1.2.3') AS ip, map('a', 1) AS mp, [toDate('2026-01-01')] AS ds, "
        "nan AS x, NULL AS z"
    )
    d = str(tmp_path / "d")
    assert run(run_cli, cli_env, "db", "migrate", "--data-dir", d).returncode == 0
    proc = run(run_cli, cli_env, "sql", query, "--format", "json", "--data-dir", d)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row == {
        "d": "2026-12-04",
        "t": "2026-12-04T01:02:03.500000+00:00",
        "u": "61f0c404-5cb3-11e7-907b-a6006ad3dba0",
        "m": "12.34",
        "ip": "10.1.2.3",
        "mp": {"a": 1},
        "ds": ["2026-01-01"],
        "x": "nan",
        "z": None,
    }


def test_bad_sql_is_one_line(tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]) -> None:
    d = str(tmp_path / "d")
    assert run(run_cli, cli_env, "db", "migrate", "--data-dir", d).returncode == 0
    proc = run(run_cli, cli_env, "sql", "SELEC 1", "--data-dir", d)
    assert proc.returncode == 2 and "is not SQL the engine reads: Syntax error" in (
        one_line_error(proc)
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["ledger", "--from", "2026-11-01", "--to", "2026-11-30"],
        ["sql", "SELECT 1"],
        ["why", "cost", "--month", "2026-11"],
        ["quarantine", "list"],
        ["fragmentation"],
        ["alerts", "list"],
        ["alerts", "check"],
    ],
)
def test_a_read_command_never_creates_a_warehouse(
    tmp_path: Path, run_cli: Cli, cli_env: dict[str, str], argv: list[str]
) -> None:
    missing = tmp_path / "typo"
    line = one_line_error(run(run_cli, cli_env, *argv, "--data-dir", str(missing)))
    assert line.startswith(f"gpuledger: there is no warehouse in {missing}")
    assert not missing.exists()


def test_unknown_names_and_impossible_windows_are_errors(
    tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]
) -> None:
    d = ["--data-dir", str(tmp_path / "d")]
    assert run(run_cli, cli_env, "db", "migrate", *d).returncode == 0
    kind = run(run_cli, cli_env, "quarantine", "list", "--kind", "nosuch", *d)
    assert "--kind 'nosuch' is not a kind of record: use one of gpu_sample," in one_line_error(kind)
    seal = run(run_cli, cli_env, "seal", "--since", "2026-11-28", "--until", "2026-11-27", *d)
    assert "--since 2026-11-28 is after --until 2026-11-27" in one_line_error(seal)
    window = ["--from", "2026-11-01", "--to", "2026-11-02"]
    cluster = run(run_cli, cli_env, "ledger", *window, "--cluster", "nosuch", *d)
    assert "--cluster 'nosuch' is not in the warehouse (its clusters: none yet)" in (
        one_line_error(cluster)
    )
    # a window in the future is an empty ledger, not a traceback
    future = ["--from", "2030-01-01", "--to", "2030-01-31", "--format", "json"]
    proc = run(run_cli, cli_env, "ledger", *future, *d)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["from"], doc["to"], doc["rows"]) == ("2030-01-01", "2030-01-31", [])


def test_a_reader_that_stops_early_gets_no_traceback(
    tmp_path: Path, run_cli: Cli, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    """`gpuledger sql ... | head -1`: the pipe closes under the writer."""
    d = str(tmp_path / "d")
    assert run(run_cli, cli_env, "db", "migrate", "--data-dir", d).returncode == 0
    query = "SELECT number FROM system.numbers LIMIT 200000"
    proc = subprocess.Popen(
        [*gpuledger_cmd, "sql", query, "--format", "csv", "--data-dir", d],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "number\n"
    proc.stdout.close()
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err


def test_unknown_setting_is_one_line(tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[warehouse]\ndata_dri = 'x'\n")
    line = one_line_error(run(run_cli, cli_env, "db", "status", "--config", str(cfg)))
    assert "unknown key in [warehouse] 'data_dri'" in line and "data_dir" in line
    env = {**cli_env, "GPULEDGER_LEDGER__IDLE_POLICY": "fair"}
    line = one_line_error(run(run_cli, env, "db", "status"))
    assert "'fair' is not one of weighted, even, none" in line


@pytest.mark.parametrize(
    ("argv", "env", "status", "needle", "error"),
    [
        (  # a ConfigError: a key the settings do not have
            ["db", "status", "--config", "{cfg}"],
            {},
            2,
            "unknown key in [warehouse] 'data_dri'",
            "gpuledger.settings.SettingsError",
        ),
        (  # an InputError: a request that cannot be answered as given
            ["ledger", "--from", "2026-11-05", "--to", "2026-11-01"],
            {},
            2,
            "the window is empty: --to 2026-11-01 is before --from 2026-11-05",
            "warehouse.ledger.result.LedgerError",
        ),
        (  # the same for queues: the window named as typed, never its exclusive end
            ["queues", "--from", "2026-12-03", "--to", "2026-11-28"],
            {},
            2,
            "the window is empty: --to 2026-11-28 is before --from 2026-12-03",
            "warehouse.ledger.result.LedgerError",
        ),
        (  # a WarehouseError: ClickHouse cannot answer the SQL (bad SQL is the console's
            # own refusal, an InputError: test_bad_sql_is_one_line)
            ["sql", "SELECT * FROM nosuch"],
            {},
            1,
            "Unknown table expression identifier 'nosuch'",
            "warehouse.client.WarehouseError",
        ),
        (  # a SourceError: with --once, an exporter that answered nothing fails the check
            ["collect", "dcgm", "http://127.0.0.1:9/metrics", "--once"],
            {"GPULEDGER_AGENT__SERVER_URL": "http://127.0.0.1:9"},
            1,
            "1 target(s) answered nothing: http://127.0.0.1:9/metrics: ConnectionError",
            "gpuledger_errors.SourceError",
        ),
        (  # a SourceError: no sacct here (no warehouse opened: the agent sends to a server)
            ["collect", "slurm", "--once", "--sacct", "/nonexistent/sacct"],
            {"GPULEDGER_AGENT__SERVER_URL": "http://127.0.0.1:9"},
            1,
            "'/nonexistent/sacct' not found",
            "collector.slurm.collector.SlurmError",
        ),
    ],
    ids=["config", "input", "input-queues", "warehouse", "unanswered", "source"],
)
def test_an_error_is_one_line_and_with_debug_its_traceback(
    argv: list[str],
    env: dict[str, str],
    status: int,
    needle: str,
    error: str,
    tmp_path: Path,
    run_cli: Cli,
    cli_env: dict[str, str],
) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[warehouse]\ndata_dri = 'x'\n")
    argv = [a.format(cfg=cfg) for a in argv] + ["--data-dir", str(tmp_path / "d")]
    env = {**cli_env, **env}
    assert run(run_cli, env, "db", "migrate", "--data-dir", str(tmp_path / "d")).returncode == 0
    plain = run(run_cli, env, *argv)
    assert plain.returncode == status, plain.stderr
    line = one_line_error(plain)
    assert line.startswith("gpuledger: ") and needle in line
    for debug in (["--debug", *argv], [*argv, "--debug"]):  # before or after the command
        traced = run(run_cli, env, *debug)
        assert traced.returncode == status, traced.stderr
        assert "Traceback (most recent call last):" in traced.stderr  # with its causes
        last = traced.stderr.strip().splitlines()[-1]
        assert last.startswith(f"{error}: ") and needle in last
        assert "gpuledger: " not in traced.stderr


@pytest.mark.parametrize(
    ("dsn", "needle"),
    [
        ("mysql://x@y/db", "is not a ClickHouse DSN"),
        (
            "http://default:pw@127.0.0.1:9/gpuledger",
            "cannot reach ClickHouse at http://default:***@127.0.0.1:9/gpuledger",
        ),
        ("chdb://relative/path", "must be an absolute path"),
    ],
)
def test_bad_dsn_is_one_line(dsn: str, needle: str, run_cli: Cli, cli_env: dict[str, str]) -> None:
    line = one_line_error(run(run_cli, cli_env, "db", "status", "--dsn", dsn))
    assert needle in line
    assert "pw" not in line  # credentials never printed


def test_locked_data_dir_is_one_line(
    tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    d = tmp_path / "d"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from warehouse.client import connect; "
            f"wh = connect('chdb://{d}'); print('ready', flush=True); time.sleep(120)",
        ],
        env=cli_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        line = one_line_error(
            run_process(gpuledger_cmd, cli_env, "sql", "SELECT 1", "--data-dir", str(d))
        )
        assert f"data directory {d} is in use by another process (PID {holder.pid})" in line
        assert "--data-dir" in line
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    # once the owner is gone the directory opens again
    proc = run_process(gpuledger_cmd, cli_env, "sql", "SELECT 1", "--data-dir", str(d))
    assert proc.returncode == 0, proc.stderr


def test_table_format_aligns_and_counts() -> None:
    text = format_rows(["model", "gpus"], [("H100", 8), ("L40S", None)], "table")
    lines = text.splitlines()
    assert lines[0].split() == ["model", "gpus"]
    assert lines[2].endswith("   8") and "NULL" in lines[3]
    assert lines[-1] == "(2 rows)"


@pytest.mark.parametrize(
    "argv",
    [
        ["--data-dir", "D", "-v", "sql", "SELECT 1"],
        ["sql", "SELECT 1", "--data-dir", "D", "-v"],
        ["--data-dir", "X", "sql", "--data-dir", "D", "SELECT 1", "--verbose"],
    ],
)
def test_common_options_go_before_or_after_the_command(argv: list[str]) -> None:
    args = parse(argv)
    assert (args.data_dir, args.verbose, args.dsn, args.config) == ("D", True, None, None)
    assert parse(["quarantine", "list"]).data_dir is None
    assert parse(["--dsn", "chdb:///x", "quarantine", "list"]).dsn == "chdb:///x"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (44.6, "45 s"),
        (725, "12 m 5 s"),
        (3600, "1 h 0 m"),
        (175134.0, "2 d 0 h 38 m"),
        (None, ""),
        (float("nan"), ""),
    ],
)
def test_durations_read_as_a_person_says_them(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


def test_the_sql_console_is_read_only_unless_asked(
    tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]
) -> None:
    """The engine refuses writes and DDL on the console's own read-only client; --write runs
    the statement for an admin and the audit log keeps it (tests/test_sql_console.py has the
    refusals)."""
    d = str(tmp_path / "d")
    assert run(run_cli, cli_env, "db", "migrate", "--data-dir", d).returncode == 0
    for statement in (
        "DROP TABLE gpuledger.gpu_samples",
        "INSERT INTO gpuledger.tenants (tenant) SELECT 'x/y'",
        "INSERT INTO gpuledger.tenants (tenant) VALUES ('x/y')",
    ):
        line = one_line_error(run(run_cli, cli_env, "sql", statement, "--data-dir", d))
        assert "the SQL console is read-only" in line and "--write --user" in line, statement
    _admin(run_cli, cli_env, d)
    wrote = _write(run_cli, cli_env, d, "INSERT INTO tenants (tenant) SELECT 'x/y'")
    assert wrote.returncode == 0, wrote.stderr
    got = run(run_cli, cli_env, "audit", "--action", "sql", "--format", "json", "--data-dir", d)
    (entry,) = json.loads(got.stdout)
    assert (entry["actor"], entry["action"], entry["outcome"]) == ("root", "sql.write", "ok")
    assert entry["detail"].startswith("INSERT INTO tenants (tenant) SELECT 'x/y'\n-- OS user ")
    nobody = run(run_cli, cli_env, "audit", "--who", "nobody", "--data-dir", d)
    assert nobody.returncode == 0 and "(0 rows)" in nobody.stdout
    later = run(run_cli, cli_env, "audit", "--since", "2100-01-01", "--data-dir", d)
    assert "(0 rows)" in later.stdout
    count = run(run_cli, cli_env, "sql", "SELECT count() FROM tenants", "--data-dir", d)
    assert count.stdout.split()[2] == "1"


_PASSWORD = "a password of some length"
_AS_ROOT = ("--user", "root", "--password-stdin")


def _admin(cli: Cli, env: dict[str, str], data_dir: str) -> None:
    """An admin, ``root``, for `sql --write`."""
    added = cli(
        "user",
        "add",
        "root",
        "--role",
        "admin",
        "--password-stdin",
        "--data-dir",
        data_dir,
        env=env,
        stdin=_PASSWORD + "\n",
    )
    assert added.returncode == 0, added.stderr


def _write(
    cli: Cli, env: dict[str, str], data_dir: str, statement: str
) -> subprocess.CompletedProcess[str]:
    """`gpuledger sql STATEMENT --write` as the admin :func:`_admin` made."""
    return cli(
        "sql",
        statement,
        "--write",
        *_AS_ROOT,
        "--data-dir",
        data_dir,
        env=env,
        stdin=_PASSWORD + "\n",
    )


def test_a_dropped_database_is_said_not_silently_recreated(
    tmp_path: Path, run_cli: Cli, cli_env: dict[str, str]
) -> None:
    d = str(tmp_path / "d")
    ledger = ["ledger", "--from", "2026-11-01", "--to", "2026-11-01", "--data-dir", d]
    assert run(run_cli, cli_env, *ledger).returncode != 0  # no warehouse there yet
    assert run(run_cli, cli_env, "db", "migrate", "--data-dir", d).returncode == 0
    assert run(run_cli, cli_env, *ledger).returncode == 0
    _admin(run_cli, cli_env, d)
    dropped = _write(run_cli, cli_env, d, "DROP DATABASE gpuledger")
    assert dropped.returncode == 0, dropped.stderr
    line = one_line_error(run(run_cli, cli_env, *ledger))
    assert "the database gpuledger is gone from" in line and "`gpuledger db migrate`" in line
    status = run(run_cli, cli_env, "db", "status", "--data-dir", d).stdout
    assert "was made here before and is gone" in status
    assert run(run_cli, cli_env, "db", "migrate", "--data-dir", d).returncode == 0
    assert run(run_cli, cli_env, *ledger).returncode == 0
