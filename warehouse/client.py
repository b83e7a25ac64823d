"""The client factory: a DSN in, a connected :class:`Warehouse` out.

Nothing else in gpuledger knows whether it talks to the embedded engine (chDB, in-process)
or to a ClickHouse server: both are ``clickhouse_connect.get_client(dsn=...)``. This module is
also where the engine's vague failures become one clear sentence (STYLE.md item 8).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import clickhouse_connect
import polars as pl
from clickhouse_connect.driver.exceptions import ClickHouseError, DatabaseError, DataError

from gpuledger_errors import GpuledgerError

log = logging.getLogger(__name__)


class WarehouseError(GpuledgerError):
    """Anything that went wrong talking to the warehouse.

    ``code`` and ``name`` keep ClickHouse's own error code and name when the engine gave one.
    ``bad_input``: the data sent were at fault (the driver could not serialise a value, or the
    engine could not parse or convert one), not the warehouse (unreachable, a missing table,
    out of memory): sending the same data again fails again.
    """

    def __init__(
        self,
        message: str,
        code: int | None = None,
        name: str | None = None,
        bad_input: bool = False,
    ):
        super().__init__(message)
        self.code = code
        self.name = name
        self.bad_input = bad_input


#: ClickHouse's codes for a value it cannot parse, convert or store (the data's fault).
_BAD_INPUT_CODES = frozenset(
    {
        6,  # CANNOT_PARSE_TEXT
        26,  # CANNOT_PARSE_QUOTED_STRING
        27,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
        38,  # CANNOT_PARSE_DATE
        41,  # CANNOT_PARSE_DATETIME
        53,  # TYPE_MISMATCH
        69,  # ARGUMENT_OUT_OF_BOUND
        70,  # CANNOT_CONVERT_TYPE
        72,  # CANNOT_PARSE_NUMBER
        117,  # INCORRECT_DATA
        131,  # TOO_LARGE_STRING_SIZE
        190,  # SIZES_OF_ARRAYS_DONT_MATCH
        321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
        349,  # CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
        469,  # VIOLATED_CONSTRAINT
    }
)


class DataDirInUse(WarehouseError):
    """Another process owns the embedded data directory ``path`` (``pid``: its PID, or
    "unknown"); the engine lets one process own a data directory."""

    def __init__(self, path: Path, pid: str = "unknown"):
        super().__init__(
            f"data directory {path} is in use by another process (PID {pid}): stop that "
            "gpuledger process, or use another --data-dir. The embedded engine lets one process "
            "own a data directory; a ClickHouse server DSN lets many share a warehouse"
        )
        self.path = path
        self.pid = pid


def embedded_path(dsn: str) -> Path | None:
    """The data directory of an embedded DSN (``chdb:///abs/path``); None for a server or
    an in-memory engine."""
    parts = urlsplit(dsn)
    if parts.scheme != "chdb":
        return None
    # clickhouse-connect reads chdb://memory/db as location "memory" and database "db", and
    # chdb:///abs/path as the location /abs/path.
    location = parts.netloc.rpartition("@")[2] or parts.path
    if location in ("", "memory", ":memory:"):
        return None
    return Path(location)


def lock_holder(data_dir: Path) -> str | None:
    """Say who holds ``data_dir``'s engine lock, or None when nobody does.

    The engine holds an exclusive ``flock`` on ``<data_dir>/status`` while it runs; the file
    names the owner's PID. Probing it first turns the engine's vague "Error initializing
    EmbeddedServer" into a sentence the user can act on.
    """
    status = data_dir / "status"
    try:
        fd = status.open("rb")
    except OSError:
        return None
    with fd:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            text = fd.read(200).decode("utf-8", "replace")
            pid = next(
                (ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("PID:")),
                "unknown",
            )
            return pid
        fcntl.flock(fd, fcntl.LOCK_UN)
    return None


def _translate(exc: BaseException, dsn: str) -> WarehouseError:
    """Turn a driver exception into a WarehouseError with a sentence saying what to do."""
    text = str(exc)
    code = getattr(exc, "code", None)
    name = None
    if "Code:" in text:
        with contextlib.suppress(ValueError, IndexError):
            code = int(text.split("Code:", 1)[1].split(".", 1)[0].strip())
        if "(" in text and ")" in text:
            name = text.rsplit("(", 1)[1].split(")", 1)[0] or None
    safe = _redact(dsn)
    lowered = text.lower()
    if "authentication" in lowered or code == 516:
        msg = f"ClickHouse at {safe} refused the user name or password: check the DSN's credentials"
    elif any(
        s in lowered
        for s in (
            "connection refused",
            "max retries",
            "name or service",
            "failed to establish",
            "timed out",
            "nodename nor",
        )
    ):
        msg = (
            f"cannot reach ClickHouse at {safe}: is the server running and the host and port "
            "right? (for the embedded engine, leave warehouse.dsn empty)"
        )
    else:
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        msg = f"warehouse error at {safe}: {first}"
    bad_input = isinstance(exc, DataError) or code in _BAD_INPUT_CODES
    return WarehouseError(msg, code=code, name=name, bad_input=bad_input)


def _redact(dsn: str) -> str:
    parts = urlsplit(dsn)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return dsn


class Warehouse:
    """A connected client plus the database name; thread-safe (the driver serialises)."""

    def __init__(
        self, client: Any, database: str, dsn: str, connect_kwargs: Mapping[str, Any] | None = None
    ):
        self.client = client
        self.database = database
        self.dsn = dsn
        self._connect_kwargs = dict(connect_kwargs or {"dsn": dsn, "tz_mode": "aware"})
        self.embedded = urlsplit(dsn).scheme == "chdb"
        self._settings_known: dict[str, bool] = {}

    def read_only(self, *, settings: bool = False) -> Warehouse:
        """The same warehouse through a second client that the engine keeps read-only
        (``readonly = 1``: no writes, no DDL, no setting changes, no table function that reaches
        files or URLs; ``settings``: ``readonly = 2``, which lets a query change its own
        settings). A client of its own, since the setting sticks to the client that sent it,
        and this one's writers must keep writing."""
        kwargs = dict(self._connect_kwargs)
        kwargs["settings"] = {**kwargs.get("settings", {}), "readonly": 2 if settings else 1}
        try:
            client = clickhouse_connect.get_client(**kwargs)
        except Exception as exc:  # the driver raises many kinds; each becomes one sentence
            raise _translate(exc, self.dsn) from exc
        return Warehouse(client, self.database, self.dsn, kwargs)

    def per_thread(self) -> Warehouse:
        """The same warehouse through a client per thread (:class:`PerThread`)."""
        return PerThread(self)

    def _another_client(self) -> Any:
        try:
            return clickhouse_connect.get_client(**self._connect_kwargs)
        except Exception as exc:  # the driver raises many kinds; each becomes one sentence
            raise _translate(exc, self.dsn) from exc

    def name_tables_unqualified(self) -> None:
        """Let a table name without a database mean this warehouse's table, as a person typing
        ``SELECT ... FROM gpu_samples`` at the SQL console expects (gpuledger's own queries
        always name the database)."""
        self.client.database = self.database

    def has_setting(self, name: str) -> bool:
        """Whether the engine knows the setting ``name`` (asked once per name, then cached):
        lets a query use a newer engine's feature and still run on an older server."""
        if name not in self._settings_known:
            rows = self.rows(
                "SELECT count() FROM system.settings WHERE name = {name:String}", {"name": name}
            )
            self._settings_known[name] = bool(rows[0][0])
        return self._settings_known[name]

    # -- queries -------------------------------------------------------------------------------
    def command(
        self,
        sql: str,
        parameters: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            return self.client.command(sql, parameters=parameters, settings=settings)
        except (ClickHouseError, DatabaseError) as exc:
            raise _translate(exc, self.dsn) from exc

    def table(
        self, sql: str, parameters: Mapping[str, Any] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run a query and return its column names and rows."""
        try:
            result = self.client.query(sql, parameters=parameters)
        except (ClickHouseError, DatabaseError) as exc:
            raise _translate(exc, self.dsn) from exc
        return list(result.column_names), list(result.result_rows)

    def rows(self, sql: str, parameters: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a query and return its rows as tuples."""
        return self.table(sql, parameters)[1]

    def frame(
        self,
        sql: str,
        parameters: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> pl.DataFrame:
        """Run a query and return a polars DataFrame (through Arrow, no row objects)."""
        try:
            table = self.client.query_arrow(sql, parameters=parameters, settings=settings)
        except (ClickHouseError, DatabaseError) as exc:
            raise _translate(exc, self.dsn) from exc
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def insert_arrow(
        self, table: str, data: Any, settings: Mapping[str, Any] | None = None
    ) -> None:
        try:
            self.client.insert_arrow(table, data, database=self.database, settings=settings)
        except (ClickHouseError, DatabaseError) as exc:
            raise _translate(exc, self.dsn) from exc

    def insert_rows(
        self,
        table: str,
        rows: Sequence[Sequence[Any]],
        column_names: Sequence[str],
        column_types: Sequence[str],
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """Insert rows with explicit column names and types (no DESCRIBE round trip)."""
        try:
            self.client.insert(
                table,
                list(rows),
                column_names=list(column_names),
                column_type_names=list(column_types),
                database=self.database,
                settings=settings,
            )
        except (ClickHouseError, DatabaseError) as exc:
            raise _translate(exc, self.dsn) from exc

    def audit(
        self,
        actor: str,
        action: str,
        obj: str,
        detail: str,
        outcome: str = "ok",
        ts: dt.datetime | None = None,
    ) -> None:
        """Record an action in ``audit_log`` (who did what to which object, with details) at
        ``ts`` (default: now)."""
        self.audit_many([(ts or dt.datetime.now(dt.UTC), actor, action, obj, outcome, detail)])

    def audit_many(self, entries: Sequence[tuple[dt.datetime, str, str, str, str, str]]) -> None:
        """Record many actions in one insert: (ts, actor, action, object, outcome, detail)."""
        self.insert_rows(
            "audit_log",
            list(entries),
            ("ts", "actor", "action", "object", "outcome", "detail"),
            (
                "DateTime64(3, 'UTC')",
                "String",
                "LowCardinality(String)",
                "String",
                "LowCardinality(String)",
                "String",
            ),
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


class PerThread(Warehouse):
    """A warehouse whose every thread queries through a client of its own, made on its first
    query. One client runs one query at a time, so threads sharing it wait for each other:
    a page's quick query would wait behind another page's slow one, or behind a background
    recomputation. The engine runs clients on the same data directory in parallel (and a
    server takes one connection per client). The thread that made this object keeps the
    client it was made from."""

    def __init__(self, base: Warehouse) -> None:
        self._local = threading.local()
        self._made: list[Any] = []
        self._made_lock = threading.Lock()
        super().__init__(base.client, base.database, base.dsn, base._connect_kwargs)
        self._settings_known = base._settings_known

    @property  # type: ignore[override]
    def client(self) -> Any:
        mine = getattr(self._local, "client", None)
        if mine is None:
            mine = self._local.client = self._another_client()
            with self._made_lock:
                self._made.append(mine)
        return mine

    @client.setter
    def client(self, value: Any) -> None:
        self._local.client = value  # the maker's own thread keeps the client it came with

    def close(self) -> None:
        """Close the clients this object made (the one it was made from is its maker's)."""
        with self._made_lock:
            made, self._made = self._made, []
        for client in made:
            with contextlib.suppress(Exception):
                client.close()


def connect(
    dsn: str,
    database: str = "gpuledger",
    *,
    max_memory_bytes: int = 0,
    connect_timeout_s: float = 10.0,
) -> Warehouse:
    """Open the warehouse at ``dsn``: ``chdb:///abs/path`` or ``http(s)://user:pass@host:port``.

    Raises :class:`WarehouseError` with a sentence saying what to do when the DSN is bad, the
    server cannot be reached, or another process holds the embedded data directory.
    """
    scheme = urlsplit(dsn).scheme
    if scheme not in ("chdb", "http", "https"):
        raise WarehouseError(
            f"DSN {_redact(dsn)!r} is not a ClickHouse DSN: use chdb:///absolute/path (embedded) "
            "or http(s)://user:pass@host:8123/database (server)"
        )
    kwargs: dict[str, Any] = {"dsn": dsn, "tz_mode": "aware"}
    path = embedded_path(dsn)
    if scheme == "chdb":
        if path is not None:
            if not path.is_absolute():
                raise WarehouseError(
                    f"embedded data directory {str(path)!r} in DSN {dsn!r} must be an absolute "
                    "path: use chdb:///absolute/path (three slashes)"
                )
            holder = lock_holder(path)
            if holder is not None:
                raise DataDirInUse(path, holder)
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WarehouseError(
                    f"cannot create data directory {path}: {exc.strerror}; choose a writable "
                    "--data-dir"
                ) from None
        if max_memory_bytes:
            kwargs["settings"] = {"max_memory_usage": max_memory_bytes}
    else:
        kwargs["connect_timeout"] = connect_timeout_s
    try:
        client = clickhouse_connect.get_client(**kwargs)
    except Exception as exc:  # the driver raises many kinds; each becomes one sentence
        holder = lock_holder(path) if path is not None else None
        if path is not None and holder is not None:
            raise DataDirInUse(path, holder) from exc
        if "one engine path per process" in str(exc) or "different path" in str(exc):
            raise WarehouseError(
                f"this process already has another embedded data directory open; the engine "
                f"allows one per process (wanted {path})"
            ) from exc
        raise _translate(exc, dsn) from exc
    return Warehouse(client, database, dsn, kwargs)
