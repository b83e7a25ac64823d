"""The SQL console's statements (``gpuledger sql``): one at a time, and none that reaches
outside the warehouse, as the engine's own parser reads them. Nothing here runs a statement.

The engine reads each statement twice:

1. ``formatQuery`` gets the text as a value (a server-side parameter) and returns the canonical
   text of the one statement in it; text that holds more is a syntax error there. The console
   runs that canonical text, not the text as typed: the embedded engine runs every statement of
   a text it is given, so what runs is exactly what was checked.
2. ``EXPLAIN AST`` of the canonical text dumps its syntax tree, a node a line, indented by its
   depth (``Function file (children 1)``, ``Storage definition``, ``Literal 'x'``). The check
   refuses a tree that names a table function, table or database engine, dictionary source or
   function that reaches files, URLs, other servers or programs (:data:`OUTSIDE`, any case), a
   ``BACKUP`` or ``RESTORE``, and ``INTO OUTFILE`` or ``FROM INFILE``.

An INSERT's inline data (``VALUES (...)``, ``FORMAT CSV ...``) is not part of the tree: the
embedded engine would run a statement that follows it (after a ``;`` or a blank line) unchecked,
so the console takes ``INSERT ... SELECT`` instead (:attr:`Statement.inline_data`).
"""

from __future__ import annotations

import dataclasses

from gpuledger_errors import InputError
from warehouse import queries
from warehouse.client import Warehouse, WarehouseError

#: Names (lower case) of what reaches outside the warehouse: table functions, table and
#: database engines, dictionary sources, and the ``file`` function.
OUTSIDE = frozenset(
    {
        # files, object stores, distributed file systems
        "file",
        "filecluster",
        "filesystem",
        "filelog",
        "url",
        "urlcluster",
        "s3",
        "s3cluster",
        "s3queue",
        "gcs",
        "oss",
        "cosn",
        "hdfs",
        "hdfscluster",
        "azureblobstorage",
        "azureblobstoragecluster",
        "azurequeue",
        "backup",
        "datalakecatalog",
        "http",
        "https",
        "yamlregexptree",
        # other servers
        "remote",
        "remotesecure",
        "cluster",
        "clusterallreplicas",
        "clickhouse",
        "mysql",
        "materializedmysql",
        "postgresql",
        "materializedpostgresql",
        "sqlite",
        "mongodb",
        "redis",
        "cassandra",
        "jdbc",
        "odbc",
        "kafka",
        "rabbitmq",
        "nats",
        "bigquery",
        "ytsaurus",
        "hive",
        # programs, the host process, and queries built from strings (which this check
        # cannot see into)
        "executable",
        "executablepool",
        "executable_pool",
        "python",
        "arrowstream",
        "queryrunner",
        "eval",
        "input",
    }
)
#: Families of names that reach outside (Iceberg, Delta Lake, Hudi and Paimon tables).
OUTSIDE_FAMILIES = ("iceberg", "deltalake", "hudi", "paimon")

#: Statements whose own clauses hold a literal directly under them (their WHERE), and which
#: take no INTO OUTFILE.
_LITERAL_CLAUSES = frozenset({"DeleteQuery", "UpdateQuery"})


class ConsoleRefusal(InputError):
    """A statement the SQL console does not run (more than one, or one that reaches outside
    the warehouse)."""


@dataclasses.dataclass(frozen=True)
class Statement:
    """One statement as the engine reads it."""

    #: The engine's canonical text of it: what the console runs.
    text: str
    #: The kind of its root node: ``SelectWithUnionQuery``, ``InsertQuery``, ``AlterQuery``...
    kind: str
    #: An INSERT whose rows follow in the text (VALUES or FORMAT), not from a SELECT.
    inline_data: bool


@dataclasses.dataclass(frozen=True)
class _Node:
    depth: int
    kind: str
    name: str


def check(checker: Warehouse, text: str) -> Statement:
    """The one statement in ``text``, or :class:`ConsoleRefusal` saying why the console does
    not run it. ``checker``: a read-only client that may take a statement's SETTINGS
    (:meth:`Warehouse.read_only` with ``settings=True``)."""
    canonical = _canonical(checker, text)
    nodes = [_node(line) for (line,) in checker.rows("EXPLAIN AST " + canonical)]
    roots = [n for n in nodes if n.depth == 0]
    if len(roots) != 1:  # formatQuery returned one statement; a second root is a surprise
        raise ConsoleRefusal(_ONE_AT_A_TIME)
    root, top = roots[0], [n for n in nodes if n.depth == 1]
    if root.kind in ("BackupQuery", "RestoreQuery"):
        raise ConsoleRefusal(
            f"{root.kind.removesuffix('Query').upper()} writes or reads files and disks outside "
            "the warehouse, which the SQL console does not reach, even with --write"
        )
    named = next((n.name for n in nodes if n.kind in _CALLS and _outside(n.name)), None)
    if named is not None:
        raise ConsoleRefusal(
            f"`{named}` reaches outside the warehouse (files, URLs, other servers or programs), "
            "which the SQL console does not do, even with --write: it reads and changes the "
            "warehouse's own tables"
        )
    if _names_a_file(checker, canonical, root, top):
        raise ConsoleRefusal(
            "INTO OUTFILE and FROM INFILE write and read files outside the warehouse, which the "
            "SQL console does not do, even with --write: it prints what a query returns"
        )
    inline = root.kind == "InsertQuery" and not any(n.kind.startswith("Select") for n in top)
    return Statement(canonical, root.kind, inline)


#: The nodes that name a function, a table function, an engine or a dictionary source.
_CALLS = ("Function", "FunctionWithKeyValueArguments")
_ONE_AT_A_TIME = "the SQL console runs one statement at a time: give them one by one"
#: Why an INSERT with inline data is not run (see the module's docstring).
INLINE_DATA = (
    "the SQL console takes no inline data (INSERT ... VALUES or FORMAT), since the engine would "
    "run a statement that follows the data unchecked: write INSERT INTO table (columns) "
    "SELECT ..., e.g. SELECT * FROM values('x/y', 'z/w')"
)
#: The engine's code for a statement it cannot parse.
_SYNTAX_ERROR = 62


def _canonical(checker: Warehouse, text: str) -> str:
    try:
        return str(checker.rows(queries.sql("console_statement"), {"statement": text})[0][0])
    except WarehouseError as exc:
        if exc.code != _SYNTAX_ERROR:
            raise
        if "Multi-statements are not allowed" in str(exc):
            raise ConsoleRefusal(_ONE_AT_A_TIME) from None
        # the engine's own words, less the wrapper it was parsed in
        said = str(exc).partition("DB::Exception: ")[2].partition(": In scope ")[0] or str(exc)
        raise ConsoleRefusal(f"the statement is not SQL the engine reads: {said}") from None


def _node(line: str) -> _Node:
    words = line.split()
    return _Node(len(line) - len(line.lstrip(" ")), words[0], words[1] if len(words) > 1 else "")


def _outside(name: str) -> bool:
    lowered = name.lower()
    return lowered in OUTSIDE or lowered.startswith(OUTSIDE_FAMILIES)


def _names_a_file(checker: Warehouse, canonical: str, root: _Node, top: list[_Node]) -> bool:
    """Whether the statement has an INTO OUTFILE or a FROM INFILE: a literal right under its
    root, unless it is one of the statement's own clauses. The parser tells which: a statement
    with either takes no INTO OUTFILE added to it, while a literal of its own (a CREATE's
    COMMENT, a KILL's WHERE) leaves room for one."""
    if root.kind in _LITERAL_CLAUSES or not any(n.kind == "Literal" for n in top):
        return False
    try:
        statement = canonical + "\nINTO OUTFILE '/dev/null'"
        checker.rows(queries.sql("console_statement"), {"statement": statement})
    except WarehouseError as exc:
        if exc.code != _SYNTAX_ERROR:
            raise
        return True
    return False
