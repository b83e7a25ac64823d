"""Numbered schema migrations: render, apply, and report status.

Each ``migrations/NNNN_name.sql`` file holds one statement (one table or view), made of parts
filled in by :func:`render` (``{{part}}``, as everywhere in gpuledger: see
:mod:`warehouse.queries`); schema statements take no server-side parameters, since the engine
keeps a table's DDL as text. The parts:

- ``{{db}}`` — the database; ``{{local}}`` — ``""``, or ``"_local"`` on a cluster;
- ``{{on_cluster}}`` — ``""``, or ``ON CLUSTER name``;
- ``{{engine:Name(args)}}`` — ``Name(args)``, or ``ReplicatedName('/clickhouse/tables/{shard}/
  db/table', '{replica}', args)`` on a cluster;
- ``{{raw_retention_days}}`` and the other retention settings.

Files 0000 to 0034 spell their parts ``${part}``: they were applied with that text, and
``gpuledger db status`` compares each applied file's checksum with the one recorded, so their
text stays as it is and :func:`render` reads ``${part}`` as ``{{part}}``. Later files use
``{{part}}`` only.

On a cluster every ``CREATE TABLE ... {{local}}`` is followed by a ``Distributed`` table with the
plain name over the local ones, so readers and writers use the same names in both deployments.
An ``ALTER TABLE {{db}}.name{{local}}`` changes the local tables; the ``Distributed`` table over
them (which holds no data) is then dropped and created again, so it takes the new columns. An
``ALTER TABLE {{db}}.name{{local}} {{on_cluster}} MODIFY QUERY`` changes a materialized view,
which has no ``Distributed`` table, so it is the one statement on a cluster too.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
from importlib import resources

from warehouse import queries
from warehouse.client import Warehouse, WarehouseError

#: The spelling of parts in the migrations applied before ``{{part}}`` (0000 to 0034).
_DOLLAR_PART = re.compile(r"\$\{(\w+(?::[A-Za-z]+(?:\(.*?\))?)?)\}")
#: The last migration that may spell its parts ``${part}``.
LAST_DOLLAR_MIGRATION = 34
_TABLE = re.compile(r"CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+\{\{db\}\}\.(\w+)\{\{local\}\}", re.I)
_ALTER = re.compile(r"ALTER\s+TABLE\s+\{\{db\}\}\.(\w+)\{\{local\}\}", re.I)
#: An ALTER of a materialized view's query (views have no ``Distributed`` table over them).
_ALTER_VIEW = re.compile(
    r"ALTER\s+TABLE\s+\{\{db\}\}\.\w+\{\{local\}\}\s+\{\{on_cluster\}\}\s+MODIFY\s+QUERY\b", re.I
)
_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
#: What a migration creates: tables and views, by their plain name.
_CREATES = re.compile(
    r"CREATE\s+(?:TABLE|MATERIALIZED\s+VIEW|VIEW)\s+IF\s+NOT\s+EXISTS\s+\{\{db\}\}\.(\w+)\{\{local\}\}",
    re.I,
)

#: On a cluster, a table's engine (``{shard}`` and ``{replica}`` are the server's macros).
_REPLICATED = (
    "Replicated{{name}}('/clickhouse/tables/{shard}/{{db}}/{{table}}{{local}}', "
    "'{replica}'{{args}})"
)
#: On a cluster, the ``Distributed`` table over a table's local ones, and dropping it.
_DISTRIBUTED = (
    "CREATE TABLE IF NOT EXISTS {{db}}.{{table}} {{on_cluster}} AS {{db}}.{{table}}{{local}} "
    "ENGINE = Distributed({{cluster}}, {{db}}, {{table}}{{local}}, rand())"
)
_DROP_DISTRIBUTED = "DROP TABLE IF EXISTS {{db}}.{{table}} {{on_cluster}} SYNC"
#: A table's retention, rendered like a migration: the table keeps its TTL as text.
_RETENTION = (
    "ALTER TABLE {{db}}.{{table}}{{on_cluster}} MODIFY TTL {{expr}} + INTERVAL {{days}} DAY"
)


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]

    @property
    def text(self) -> str:
        """The SQL with its parts spelled ``{{part}}`` (see :func:`render`)."""
        if self.version <= LAST_DOLLAR_MIGRATION:
            return _DOLLAR_PART.sub(r"{{\1}}", self.sql)
        return self.sql

    @property
    def creates(self) -> tuple[str, ...]:
        """The tables and views it creates (plain names, without ``_local``)."""
        return tuple(_CREATES.findall(self.text))

    @property
    def alters(self) -> str | None:
        """The table (or materialized view) it alters, if it is an ALTER."""
        match = _ALTER.search(self.text)
        return match[1] if match else None


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
    text = migration.text
    table_match = _TABLE.search(text)
    alter_match = _ALTER.search(text)
    table = table_match[1] if table_match else alter_match[1] if alter_match else migration.name
    alters_table = alter_match is not None and not _ALTER_VIEW.search(text)
    local = "_local" if opts.cluster else ""
    where = f"migration {migration.version:04d}_{migration.name}"

    def engine(spec: str) -> str:
        name, _, args = spec.partition("(")
        if not name:
            raise WarehouseError(f"migration {migration.name}: {{{{engine}}}} needs a name")
        if not opts.cluster:
            return spec
        more = {"name": name, "args": ", " + args.removesuffix(")") if args else ""}
        return queries.fill(_REPLICATED, {**parts, **more}, where)

    parts: dict[str, queries.Part] = {
        "db": opts.database,
        "table": table,
        "local": local,
        "cluster": opts.cluster,
        "on_cluster": f"ON CLUSTER {opts.cluster}" if opts.cluster else "",
        "engine": engine,
        "raw_retention_days": str(int(opts.raw_retention_days)),
        "rollup_1m_retention_days": str(int(opts.rollup_1m_retention_days)),
        "rollup_1h_retention_days": str(int(opts.rollup_1h_retention_days)),
    }
    try:
        statements = [queries.fill(text, parts, where).strip().rstrip(";")]
    except ValueError as exc:
        raise WarehouseError(str(exc)) from exc
    if opts.cluster and alters_table:
        statements.append(queries.fill(_DROP_DISTRIBUTED, parts, where))
    if opts.cluster and (table_match or alters_table):
        statements.append(queries.fill(_DISTRIBUTED, parts, where))
    return statements


@dataclasses.dataclass(frozen=True)
class MigrationStatus:
    version: int
    name: str
    applied_at: dt.datetime | None
    checksum_changed: bool
    #: what it created that is gone now (a table or view dropped by hand), by engine name
    missing: tuple[str, ...] = ()

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
    present = {
        str(name)
        for (name,) in wh.rows(
            "SELECT name FROM system.tables WHERE database = {db:String}", {"db": opts.database}
        )
    }
    local = "_local" if opts.cluster else ""
    out = []
    for m in load_migrations():
        at, checksum = applied.get(m.version, (None, None))
        gone = tuple(n + local for n in m.creates if at is not None and n + local not in present)
        out.append(
            MigrationStatus(m.version, m.name, at, at is not None and checksum != m.checksum, gone)
        )
    return out


class SchemaDamaged(WarehouseError):
    """Tables or views the applied migrations created are gone: not recreated unasked."""


def damage(wh: Warehouse, opts: RenderOptions) -> list[MigrationStatus]:
    """The applied migrations whose tables or views are gone."""
    return [s for s in status(wh, opts) if s.missing]


def migrate(wh: Warehouse, opts: RenderOptions, *, repair: bool = False) -> list[Migration]:
    """Apply every pending migration in order; return the ones applied.

    Statements are idempotent (``IF NOT EXISTS``), so a run interrupted between a statement
    and its bookkeeping row is completed by the next run. A table or view that an applied
    migration created and that is gone (dropped by hand) is an error (:class:`SchemaDamaged`):
    its data is lost, and creating it again empty is the user's call; ``repair`` does it (the
    migration that created it again, then every later one that altered it).
    """
    by_version = {m.version: m for m in load_migrations()}
    # The database and the bookkeeping table come first, so that the loop can record itself.
    for version in (0, 1):
        for statement in render(by_version[version], opts):
            wh.command(statement)
    states = status(wh, opts)
    broken = [s for s in states if s.missing]
    if broken and not repair:
        names = [f"{opts.database}.{n}" for s in broken for n in s.missing]
        it, is_, their = ("it", "is", "its") if len(names) == 1 else ("them", "are", "their")
        raise SchemaDamaged(
            f"{', '.join(names)} {is_} gone from the warehouse although the schema created "
            f"{it} (dropped by hand?); {their} data is lost. `gpuledger db migrate` creates "
            f"{it} again, empty"
        )
    gone = {n.removesuffix("_local") for s in broken for n in s.missing}
    redo = [
        s
        for s in states
        if s.applied
        and (set(by_version[s.version].creates) & gone or by_version[s.version].alters in gone)
    ]
    done = []
    for st in redo:
        for statement in render(by_version[st.version], opts):
            wh.command(statement)
        done.append(by_version[st.version])
    pending = [s for s in states if not s.applied]
    for st in pending:
        m = by_version[st.version]
        for statement in render(m, opts):
            wh.command(statement)
        # a plain INSERT statement: half the cost of a client insert, once per migration
        wh.command(
            "INSERT INTO {db:Identifier}.schema_migrations (version, name, checksum, applied_at) "
            "VALUES ({v:UInt32}, {n:String}, {c:String}, now64(3, 'UTC'))",
            {"db": wh.database, "v": m.version, "n": m.name, "c": m.checksum},
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
            queries.fill(
                _RETENTION,
                {
                    "db": opts.database,
                    "table": target,
                    "on_cluster": on_cluster,
                    "expr": expr,
                    "days": str(int(days)),
                },
                "the retention statement",
            )
        )
        changed.append(table)
    return changed
