"""Numbered schema migrations: render, apply, and report status.

Each ``migrations/NNNN_name.sql`` file holds one statement (one table or view). Placeholders:

- ``${db}`` — the database; ``${local}`` — ``""``, or ``"_local"`` on a cluster;
- ``${on_cluster}`` — ``""``, or ``ON CLUSTER name``;
- ``${engine:Name(args)}`` — ``Name(args)``, or ``ReplicatedName('/clickhouse/tables/{shard}/
  db/table', '{replica}', args)`` on a cluster;
- ``${raw_retention_days}`` and the other retention settings.

On a cluster every ``CREATE TABLE ... ${local}`` is followed by a ``Distributed`` table with the
plain name over the local ones, so readers and writers use the same names in both deployments.
An ``ALTER TABLE ${db}.name${local}`` changes the local tables; the ``Distributed`` table over
them (which holds no data) is then dropped and created again, so it takes the new columns.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
from importlib import resources

from warehouse.client import Warehouse, WarehouseError

_PLACEHOLDER = re.compile(r"\$\{(\w+)(?::([A-Za-z]+)(?:\((.*?)\))?)?\}")
_TABLE = re.compile(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+\$\{db\}\.(\w+)\$\{local\}", re.I)
_ALTER = re.compile(r"ALTER\s+TABLE\s+\$\{db\}\.(\w+)\$\{local\}", re.I)
_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class RenderOptions:
    database: str = "gpuledger"
    cluster: str = ""
    raw_retention_days: int = 35
    rollup_1m_retention_days: int = 180
    rollup_1h_retention_days: int = 1095


def load_migrations() -> list[Migration]:
    """The migration files shipped with the package, in version order."""
    found = []
    for entry in resources.files("warehouse.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise WarehouseError(f"two migration files share a version number: {versions}")
    return found


def render(migration: Migration, opts: RenderOptions) -> list[str]:
    """The statements that apply ``migration`` under ``opts`` (one; more on a cluster)."""
    table_match = _TABLE.search(migration.sql)
    alter_match = _ALTER.search(migration.sql)
    table = table_match[1] if table_match else alter_match[1] if alter_match else migration.name
    local = "_local" if opts.cluster else ""
    values = {
        "db": opts.database,
        "local": local,
        "on_cluster": f"ON CLUSTER {opts.cluster}" if opts.cluster else "",
        "raw_retention_days": str(opts.raw_retention_days),
        "rollup_1m_retention_days": str(opts.rollup_1m_retention_days),
        "rollup_1h_retention_days": str(opts.rollup_1h_retention_days),
    }

    def substitute(match: re.Match[str]) -> str:
        key, engine, args = match[1], match[2], match[3]
        if key == "engine":
            if not engine:
                raise WarehouseError(f"migration {migration.name}: ${{engine}} needs a name")
            if not opts.cluster:
                return f"{engine}({args})" if args else engine
            path = f"'/clickhouse/tables/{{shard}}/{opts.database}/{table}{local}'"
            replicated = [path, "'{replica}'"] + ([args] if args else [])
            return f"Replicated{engine}({', '.join(replicated)})"
        if key not in values:
            raise WarehouseError(f"migration {migration.name}: unknown placeholder ${{{key}}}")
        return values[key]

    statement = _PLACEHOLDER.sub(substitute, migration.sql).strip().rstrip(";")
    statements = [statement]
    if opts.cluster and alter_match:
        statements.append(
            f"DROP TABLE IF EXISTS {opts.database}.{table} ON CLUSTER {opts.cluster} SYNC"
        )
    if opts.cluster and (table_match or alter_match):
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {opts.database}.{table} ON CLUSTER {opts.cluster} "
            f"AS {opts.database}.{table}{local} "
            f"ENGINE = Distributed({opts.cluster}, {opts.database}, {table}{local}, rand())"
        )
    return statements


@dataclasses.dataclass(frozen=True)
class MigrationStatus:
    version: int
    name: str
    applied_at: dt.datetime | None
    checksum_changed: bool

    @property
    def applied(self) -> bool:
        return self.applied_at is not None


def status(wh: Warehouse, opts: RenderOptions) -> list[MigrationStatus]:
    """Every known migration with when it was applied (None: pending)."""
    applied: dict[int, tuple[dt.datetime, str]] = {}
    exists = wh.rows(
        "SELECT count() FROM system.tables WHERE database = {db:String} "
        "AND name = 'schema_migrations'",
        {"db": opts.database},
    )[0][0]
    if exists:
        for version, applied_at, checksum in wh.rows(
            "SELECT version, max(applied_at), argMax(checksum, applied_at) "
            "FROM {db:Identifier}.schema_migrations GROUP BY version",
            {"db": opts.database},
        ):
            applied[int(version)] = (applied_at, checksum)
    out = []
    for m in load_migrations():
        at, checksum = applied.get(m.version, (None, None))
        out.append(
            MigrationStatus(m.version, m.name, at, at is not None and checksum != m.checksum)
        )
    return out


def migrate(wh: Warehouse, opts: RenderOptions) -> list[Migration]:
    """Apply every pending migration in order; return the ones applied.

    Statements are idempotent (``IF NOT EXISTS``), so a run interrupted between a statement
    and its bookkeeping row is completed by the next run.
    """
    by_version = {m.version: m for m in load_migrations()}
    # The database and the bookkeeping table come first, so that the loop can record itself.
    for version in (0, 1):
        for statement in render(by_version[version], opts):
            wh.command(statement)
    pending = [s for s in status(wh, opts) if not s.applied]
    done = []
    for st in pending:
        m = by_version[st.version]
        for statement in render(m, opts):
            wh.command(statement)
        wh.insert_rows(
            "schema_migrations",
            [(m.version, m.name, m.checksum, dt.datetime.now(dt.UTC))],
            ["version", "name", "checksum", "applied_at"],
            ["UInt32", "String", "String", "DateTime64(3, 'UTC')"],
        )
        done.append(m)
    reconcile_retention(wh, opts)
    return done


#: Tables whose TTL follows a retention setting, with the expression the TTL is on.
RETENTION = {
    "gpu_samples": ("toDateTime(ts)", "raw_retention_days"),
    "gpu_processes": ("toDateTime(ts)", "raw_retention_days"),
    "gpu_health": ("toDateTime(ts)", "raw_retention_days"),
    "gpu_samples_1m": ("ts", "rollup_1m_retention_days"),
    "gpu_samples_1h": ("ts", "rollup_1h_retention_days"),
    "gpu_minutes_1h": ("ts", "rollup_1m_retention_days"),
}
_TTL_DAYS = re.compile(r"TTL .*?(?:INTERVAL (\d+) DAY|toIntervalDay\((\d+)\))")


def local_target(table: str, cluster: str) -> tuple[str, str]:
    """Where a statement that changes ``table``'s rows or settings goes, and its ``ON CLUSTER``
    clause: ``(table, "")`` on one server; on a cluster the local tables, since the
    ``Distributed`` table over them holds nothing: ``(table + "_local", " ON CLUSTER name")``."""
    if not cluster:
        return table, ""
    return f"{table}_local", f" ON CLUSTER {cluster}"


def reconcile_retention(wh: Warehouse, opts: RenderOptions) -> list[str]:
    """Bring each table's TTL to the retention in ``opts``; return the tables changed.

    The raw table's TTL and the ingest guard must agree, or samples between the two would be
    dropped from ``gpu_samples`` at insert while still reaching the rollups.
    """
    changed = []
    for table, (expr, setting) in RETENTION.items():
        target, on_cluster = local_target(table, opts.cluster)
        rows = wh.rows(
            "SELECT create_table_query FROM system.tables WHERE database = {d:String} "
            "AND name = {t:String}",
            {"d": opts.database, "t": target},
        )
        if not rows:
            continue
        match = _TTL_DAYS.search(rows[0][0])
        days = getattr(opts, setting)
        if match and int(match[1] or match[2]) == days:
            continue
        wh.command(
            f"ALTER TABLE {opts.database}.{target}{on_cluster} "
            f"MODIFY TTL {expr} + INTERVAL {int(days)} DAY"
        )
        changed.append(table)
    return changed
