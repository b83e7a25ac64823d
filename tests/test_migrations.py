import datetime as dt
import itertools
import os
import re
from typing import Any

import pytest
from conftest import copy_schema

from warehouse.analytics import gpu
from warehouse.client import Warehouse
from warehouse.migrate import (
    LAST_DOLLAR_MIGRATION,
    Migration,
    RenderOptions,
    SchemaDamaged,
    damage,
    load_migrations,
    migrate,
    reconcile_retention,
    render,
    status,
)

TABLES = {
    "gpu_samples",
    "gpu_samples_1m",
    "gpu_samples_1h",
    "gpus",
    "nodes",
    "gpu_inventory_log",
    "node_inventory_log",
    "job_events",
    "jobs",
    "allocations",
    "tenants",
    "tenant_rules",
    "quotas",
    "price_book",
    "alerts",
    "advice",
    "audit_log",
    "quarantine",
    "schema_migrations",
    "gpu_processes",
    "gpu_health",
}
_old = itertools.count()
KEY_COLUMNS = {"cluster", "pool", "node", "gpu_uuid", "gpu_model", "job_id", "tenant"}


def test_migrations_are_numbered_one_statement_each() -> None:
    migrations = load_migrations()
    assert [m.version for m in migrations] == list(range(len(migrations)))
    for m in migrations:
        body = "\n".join(ln for ln in m.sql.splitlines() if not ln.lstrip().startswith("--"))
        assert body.count("CREATE ") + body.count("ALTER TABLE ") == 1, m.name
        assert ";" not in body.strip().rstrip(";"), m.name


#: The checksums recorded when these migrations were applied: an installation compares them
#: with the files (`gpuledger db status`), so an applied file's text never changes.
APPLIED = {
    0: "7a0d5b93ad325ea2",
    1: "2e567d622c8a08eb",
    2: "d09b5c18a44be37a",
    3: "9ba7b33c566fcd75",
    4: "2299959b8b40eb90",
    5: "1f9957173b081817",
    6: "2997acdd34f415f5",
    7: "fd2d9d5887ce51a7",
    8: "cfa4f1b4a64e1f76",
    9: "ed8fb7881a86bbd1",
    10: "36079b6e0a465bb9",
    11: "56e9aada2ca38632",
    12: "d4642d9cab34549c",
    13: "65804e648f35a121",
    14: "e32abb3ffb531a23",
    15: "0e50447773e9bb66",
    16: "7a7e6e6de17a0d97",
    17: "97715832bb4badab",
    18: "f622b8ff78fbeaee",
    19: "61f686bc80450082",
    20: "1bd62835562feef9",
    21: "9334d177b00db47b",
    22: "f5af4530c05aa9c0",
    23: "55c911e571812716",
    24: "bef4e45bb5355afb",
    25: "65599c8884eaec2f",
    26: "a602ba10d2ed2ee0",
    27: "d915ff86dd1c6313",
    28: "234236599e84d138",
    29: "f176fc5d6f1c3c32",
    30: "2f4aa8666560b22b",
    31: "36b6372a69536905",
    32: "76369aac58540e89",
    33: "1f895e1d59f3fe8b",
    34: "721f36dc8d7937ef",
    35: "da241f1a6cb02c64",
    36: "e6de189508ad207b",
    37: "766a8517f9606e95",
    38: "9547ca315f57cde7",
    39: "f6aec8e3334e5a9f",
    40: "538814f5343f6394",
}


def test_applied_migrations_keep_their_text() -> None:
    checksums = {m.version: m.checksum for m in load_migrations()}
    assert {v: checksums[v] for v in APPLIED} == APPLIED


def test_parts_render_alike_in_both_spellings() -> None:
    """Files after LAST_DOLLAR_MIGRATION spell their parts {{part}}, the earlier ones ${part};
    both render to the same statements."""
    dollar = next(m for m in load_migrations() if m.name == "gpu_samples")
    braces = Migration(
        LAST_DOLLAR_MIGRATION + 1,
        dollar.name,
        re.sub(r"\$\{([^}]*)\}", r"{{\1}}", dollar.sql),
    )
    assert "${" not in braces.sql and "{{engine:MergeTree}}" in braces.sql
    for opts in (RenderOptions(database="gl"), RenderOptions(database="gl", cluster="prod")):
        assert render(braces, opts) == render(dollar, opts)
    for m in load_migrations():
        assert m.version <= LAST_DOLLAR_MIGRATION or "${" not in m.sql, m.name


def test_fresh_database_gets_every_table_and_the_tests_copy_is_the_same(
    engine: Warehouse,
) -> None:
    migrated = Warehouse(engine.client, f"t_migrated_{os.getpid()}", engine.dsn)
    copied = f"t_copied_{os.getpid()}"
    try:
        migrate(migrated, RenderOptions(database=migrated.database))
        copy_schema(engine, migrated.database, copied)  # what the `wh` fixture does

        def schema(database: str) -> dict[str, str]:
            return {
                name: create.replace(f"{database}.", "DB.")
                for name, create in engine.rows(
                    "SELECT name, create_table_query FROM system.tables "
                    "WHERE database = {d:String}",
                    {"d": database},
                )
            }

        assert set(schema(migrated.database)) >= TABLES
        assert schema(copied) == schema(migrated.database)
        for database in (migrated.database, copied):
            states = status(
                Warehouse(engine.client, database, engine.dsn), RenderOptions(database=database)
            )
            assert len(states) == len(load_migrations())
            assert all(s.applied and not s.checksum_changed for s in states)
    finally:
        for database in (migrated.database, copied):
            engine.command(f"DROP DATABASE IF EXISTS {database} SYNC")


def test_migrate_twice_applies_nothing_the_second_time(wh: Warehouse) -> None:
    assert migrate(wh, RenderOptions(database=wh.database)) == []


def test_a_dropped_table_is_said_and_recreated_only_when_asked(wh: Warehouse) -> None:
    """A table the schema made and someone dropped: every open says so (never recreating it
    empty behind the user's back); `db migrate` (repair) makes it again, with every later
    migration that altered it, and the data it still holds elsewhere is untouched."""
    opts = RenderOptions(database=wh.database)
    wh.command(f"INSERT INTO {wh.database}.tenants (tenant, org, project) VALUES ('a/b', 'a', 'b')")
    wh.command(f"DROP TABLE {wh.database}.quotas SYNC")
    (broken,) = damage(wh, opts)
    assert (broken.name, broken.missing) == ("quotas", ("quotas",))
    with pytest.raises(SchemaDamaged, match=rf"{wh.database}\.quotas is gone .* its data is lost"):
        migrate(wh, opts)
    assert not wh.rows(
        "SELECT 1 FROM system.tables WHERE database = {d:String} AND name = 'quotas'",
        {"d": wh.database},
    )
    redone = [m.name for m in migrate(wh, opts, repair=True)]
    assert redone == ["quotas", "quotas_cluster"]  # made, then altered as before
    assert damage(wh, opts) == [] and migrate(wh, opts) == []
    columns = [r[0] for r in wh.rows(f"DESCRIBE TABLE {wh.database}.quotas")]
    assert "cluster" in columns
    assert wh.rows(f"SELECT count() FROM {wh.database}.tenants")[0][0] == 1


def test_status_lists_pending_before_migrate(engine: Warehouse) -> None:
    fresh = Warehouse(engine.client, "t_pending_status", engine.dsn)
    try:
        before = status(fresh, RenderOptions(database=fresh.database))
        assert before and not any(s.applied for s in before)
        migrate(fresh, RenderOptions(database=fresh.database))
        after = status(fresh, RenderOptions(database=fresh.database))
        assert all(s.applied for s in after)
    finally:
        engine.command("DROP DATABASE IF EXISTS t_pending_status SYNC")


def test_key_columns_share_names_and_types(wh: Warehouse) -> None:
    rows = wh.rows(
        "SELECT table, name, type FROM system.columns WHERE database = {d:String}",
        {"d": wh.database},
    )
    types: dict[str, set[str]] = {}
    for _table, name, type_ in rows:
        if name in KEY_COLUMNS:
            types.setdefault(name, set()).add(type_.replace("SimpleAggregateFunction(max, ", ""))
    assert set(types) == KEY_COLUMNS
    # every table that has a cluster column calls it `cluster` with one type
    assert len(types["cluster"]) == 1


def test_cluster_rendering_is_replicated_behind_distributed() -> None:
    opts = RenderOptions(database="gl", cluster="prod")
    by_name = {m.name: m for m in load_migrations()}
    samples = render(by_name["gpu_samples"], opts)
    assert len(samples) == 2
    assert "CREATE TABLE IF NOT EXISTS gl.gpu_samples_local ON CLUSTER prod" in samples[0]
    assert (
        "ReplicatedMergeTree('/clickhouse/tables/{shard}/gl/gpu_samples_local', '{replica}')"
    ) in samples[0]
    assert samples[1].startswith("CREATE TABLE IF NOT EXISTS gl.gpu_samples ON CLUSTER prod")
    assert "Distributed(prod, gl, gpu_samples_local" in samples[1]
    gpus = render(by_name["gpus"], opts)[0]
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/gl/gpus_local', "
        "'{replica}', ts)" in gpus
    )
    view = render(by_name["gpu_samples_1m_mv"], opts)
    assert len(view) == 1
    assert "TO gl.gpu_samples_1m_local" in view[0] and "FROM gl.gpu_samples_local" in view[0]
    single = render(by_name["gpu_samples"], RenderOptions(database="gl"))
    assert len(single) == 1 and "ON CLUSTER" not in single[0] and "Replicated" not in single[0]
    assert "${" not in "".join(render(m, opts)[0] for m in load_migrations())


def test_alter_on_a_cluster_recreates_the_distributed_table() -> None:
    by_name = {m.name: m for m in load_migrations()}
    alter = render(by_name["quotas_cluster"], RenderOptions(database="gl", cluster="prod"))
    assert "ALTER TABLE gl.quotas_local ON CLUSTER prod\n    ADD COLUMN" in alter[0]
    assert alter[1] == "DROP TABLE IF EXISTS gl.quotas ON CLUSTER prod SYNC"
    assert "Distributed(prod, gl, quotas_local" in alter[2]
    (single,) = render(by_name["quotas_cluster"], RenderOptions(database="gl"))
    assert "ALTER TABLE gl.quotas \n" in single and "ON CLUSTER" not in single


def test_a_view_s_new_query_on_a_cluster_is_one_statement() -> None:
    """Migration 40 changes the 1-minute view's query: a view has no Distributed table to drop
    and make again (migration 39, on the view's table, does)."""
    by_name = {m.name: m for m in load_migrations()}
    opts = RenderOptions(database="gl", cluster="prod")
    (view,) = render(by_name["gpu_samples_1m_mv_clock_tensor"], opts)
    assert "ALTER TABLE gl.gpu_samples_1m_mv_local ON CLUSTER prod\nMODIFY QUERY" in view
    assert "FROM gl.gpu_samples_local" in view and "Distributed" not in view
    table = render(by_name["gpu_samples_1m_clock_tensor"], opts)
    assert table[1:] == [
        "DROP TABLE IF EXISTS gl.gpu_samples_1m ON CLUSTER prod SYNC",
        "CREATE TABLE IF NOT EXISTS gl.gpu_samples_1m ON CLUSTER prod AS gl.gpu_samples_1m_local "
        "ENGINE = Distributed(prod, gl, gpu_samples_1m_local, rand())",
    ]
    assert by_name["gpu_samples_1m_mv_clock_tensor"].alters == "gpu_samples_1m_mv"


#: Four samples of GPU-1 in one minute (SM clock 1200, 1300, 1400, NULL), without or with
#: more columns (``str.format`` fills them in; the engine fills in the parameters).
_SAMPLES = (
    "INSERT INTO {{db:Identifier}}.gpu_samples (ts, cluster, gpu_uuid, gpu_util_ratio, "
    "sm_clock_mhz{more}) SELECT {{t:DateTime64(3, 'UTC')}} + toIntervalSecond(number * 15), "
    "'c', 'GPU-1', 0.5, if(number = 3, NULL, 1200 + number * 100){values} FROM numbers(4)"
)


def _minute_sums(wh: Warehouse) -> list[tuple[Any, ...]]:
    return wh.rows(
        "SELECT ts, sum(samples), sum(sm_clock_samples), sum(sm_clock_mhz_sum), "
        "sum(tensor_samples), sum(tensor_active_ratio_sum) "
        "FROM {db:Identifier}.gpu_samples_1m GROUP BY ts ORDER BY ts",
        {"db": wh.database},
    )


def test_a_warehouse_from_before_tensor_activity_migrates(engine: Warehouse) -> None:
    """A warehouse made by migrations 0-37, with samples: 38 on apply, every checksum stays as
    recorded, the minutes rolled up before read no clock or tensor samples (the GPU page says
    NULL there, not 0), and samples written afterwards roll up their sums."""
    database = f"old{next(_old)}"
    opts = RenderOptions(database=database)
    old = Warehouse(engine.client, database, engine.dsn)
    t0 = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).replace(second=0, microsecond=0)
    try:
        made = [m for m in load_migrations() if m.version < 38]
        for m in made:
            for statement in render(m, opts):
                old.command(statement)
        old.insert_rows(
            "schema_migrations",
            [(m.version, m.name, m.checksum, dt.datetime.now(dt.UTC)) for m in made],
            ["version", "name", "checksum", "applied_at"],
            ["UInt32", "String", "String", "DateTime64(3, 'UTC')"],
        )
        old.command(_SAMPLES.format(more="", values=""), {"db": database, "t": t0})
        applied = migrate(old, opts)
        assert [m.version for m in applied] == [m.version for m in load_migrations()][38:]
        assert all(s.applied and not s.checksum_changed for s in status(old, opts))
        tensor = _SAMPLES.format(
            more=", tensor_active_ratio", values=", if(number = 0, NULL, number / 4)"
        )
        old.command(tensor, {"db": database, "t": t0 + dt.timedelta(minutes=1)})
        before, after = _minute_sums(old)
        assert before[1:] == (4, 0, 0.0, 0, 0.0)  # rolled up before: nothing to average
        assert after[1:] == (4, 3, 1200.0 + 1300 + 1400, 3, pytest.approx(1.5))
        means = gpu.telemetry(old, "c", "GPU-1", t0, t0 + dt.timedelta(minutes=2), step_s=60)
        assert means["sm_clock_mhz"].to_list() == [None, 1300.0]
        assert means["tensor_active_ratio"].to_list() == [None, pytest.approx(0.5)]
        assert migrate(old, opts) == []
    finally:
        engine.command(f"DROP DATABASE IF EXISTS {database} SYNC")


def test_quotas_written_before_the_cluster_column_read_as_every_cluster(wh: Warehouse) -> None:
    """An old database (quotas without cluster) keeps its rows through migration 29."""
    by_name = {m.name: m for m in load_migrations()}
    wh.command("DROP TABLE {db:Identifier}.quotas SYNC", {"db": wh.database})
    for statement in render(by_name["quotas"], RenderOptions(database=wh.database)):
        wh.command(statement)  # the table as migration 19 made it
    wh.command(
        "INSERT INTO {db:Identifier}.quotas (effective_from, tenant, pool, gpu_model, "
        "guaranteed_gpus, updated_at) VALUES (now64(3), 'a/b', 'p', 'H100', 3, now64(3))",
        {"db": wh.database},
    )
    for statement in render(by_name["quotas_cluster"], RenderOptions(database=wh.database)):
        wh.command(statement)
    assert wh.rows(
        "SELECT tenant, cluster, guaranteed_gpus FROM {db:Identifier}.quotas", {"db": wh.database}
    ) == [("a/b", "", 3.0)]


def test_retention_is_rendered_from_settings() -> None:
    by_name = {m.name: m for m in load_migrations()}
    sql = render(by_name["gpu_samples"], RenderOptions(raw_retention_days=9))[0]
    assert "INTERVAL 9 DAY" in sql


@pytest.mark.parametrize(
    "table", ["gpu_samples", "gpu_samples_1m", "job_events", "gpu_processes", "gpu_health"]
)
def test_dedup_window_is_on_for_ingested_tables(wh: Warehouse, table: str) -> None:
    ddl = wh.rows(
        "SELECT create_table_query FROM system.tables WHERE database = {d:String} "
        "AND name = {t:String}",
        {"d": wh.database, "t": table},
    )[0][0]
    assert "non_replicated_deduplication_window = 10000" in ddl


def test_changed_retention_is_applied_to_the_tables(wh: Warehouse) -> None:
    opts = RenderOptions(database=wh.database, raw_retention_days=9, rollup_1h_retention_days=400)
    assert migrate(wh, opts) == []  # nothing pending, but the TTLs follow the settings
    ddl = dict(
        wh.rows(
            "SELECT name, create_table_query FROM system.tables WHERE database = {d:String}",
            {"d": wh.database},
        )
    )
    for raw in ("gpu_samples", "gpu_processes", "gpu_health"):
        assert "toDateTime(ts) + toIntervalDay(9)" in ddl[raw], raw
    assert "toIntervalDay(400)" in ddl["gpu_samples_1h"]
    assert "toIntervalDay(180)" in ddl["gpu_samples_1m"]
    assert reconcile_retention(wh, opts) == []  # steady state: no ALTER on every start
    assert reconcile_retention(wh, RenderOptions(database=wh.database)) == [
        "gpu_samples",
        "gpu_processes",
        "gpu_health",
        "gpu_samples_1h",
    ]


@pytest.mark.parametrize(
    ("migration", "column", "codec", "default_kind"),
    [
        ("gpu_samples_ts_codec", "ts", "CODEC(Delta(8), ZSTD(1))", ""),
        ("gpu_samples_util_codec", "util_ratio", "CODEC(LZ4HC(2))", "MATERIALIZED"),
    ],
)
def test_samples_written_before_a_codec_change_read_the_same(
    engine: Warehouse, migration: str, column: str, codec: str, default_kind: str
) -> None:
    """Migrations 33 and 34 change the codec of ``ts`` (a sorting-key column) and of
    ``util_ratio`` (a materialised column) on a table with rows: the rows read back unchanged
    after a merge, and rows inserted afterwards still get their utilisation computed."""
    by_name = {m.name: m for m in load_migrations()}
    database = f"old{next(_old)}"
    engine.command(f"CREATE DATABASE {database}")
    try:
        old = Warehouse(engine.client, database, engine.dsn)
        (create,) = render(by_name["gpu_samples"], RenderOptions(database=database))
        old.command(create)
        insert = (
            "INSERT INTO {db:Identifier}.gpu_samples "
            "(ts, cluster, gpu_uuid, gpu_util_ratio, gr_engine_active_ratio) "
            "SELECT fromUnixTimestamp64Milli(toInt64({t0:Int64} + number * 10000 + number % 7)), "
            "'c', 'GPU-1', number / 100, if(number % 3 = 0, NULL, number / 200) FROM numbers(100)"
        )
        yesterday = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).replace(microsecond=0)
        params = {"db": database, "t0": int(yesterday.timestamp()) * 1000}  # inside the TTL
        old.command(insert, params)
        read = "SELECT ts, util_ratio FROM {db:Identifier}.gpu_samples ORDER BY ts"
        before = old.rows(read, {"db": database})
        (alter,) = render(by_name[migration], RenderOptions(database=database))
        old.command(alter)
        old.command("OPTIMIZE TABLE {db:Identifier}.gpu_samples FINAL", {"db": database})
        old.command(insert, params)  # a part written with the new codec
        found = old.rows(
            "SELECT compression_codec, default_kind FROM system.columns "
            "WHERE database = {db:String} AND table = 'gpu_samples' AND name = {column:String}",
            {"db": database, "column": column},
        )
        assert found == [(codec, default_kind)]
        after = old.rows(read, {"db": database})
        assert len(before) == 100 and after == sorted(before + before)
        # the materialised expression survived: engine activity where present, else GPU util
        assert before[1][1] == pytest.approx(1 / 200) and before[3][1] == pytest.approx(3 / 100)
    finally:
        engine.command(f"DROP DATABASE IF EXISTS {database} SYNC")
