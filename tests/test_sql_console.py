"""The SQL console's check (`warehouse.console`): one statement at a time, read by the engine's
own parser, never reaching outside the warehouse; tested on the real embedded engine, with
every name it refuses."""

from __future__ import annotations

import pytest

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
