"""`gpuledger sql`: the SQL console.

Every statement is read by the engine's parser first (:mod:`warehouse.console`): one at a time,
and none that reaches outside the warehouse. Without ``--write`` it runs on a client the engine
keeps read-only. ``--write`` runs it on the writing client, for a gpuledger user of role admin
whose password is asked for (``--user``, or ``sql.user``); what it ran, and every refusal, is in
the audit log under that name.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from gpuledger.output import format_rows
from gpuledger.run_as import audit, log_in, named
from gpuledger.settings import Settings
from gpuledger_errors import InputError

if TYPE_CHECKING:
    from warehouse.client import Warehouse

_WHAT, _ROLES = "sql --write", ("admin",)
#: The engine's error code for a statement refused under ``readonly``.
_READONLY = 164
_IS_READ_ONLY = (
    "the SQL console is read-only and this statement would change data or schema; run it "
    "with --write --user ADMIN if you mean it (audited)"
)


def cmd_sql(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    from gpuledger.app import reading_warehouse
    from warehouse.client import WarehouseError

    name = named(settings.sql.user, _WHAT, _ROLES, "sql.user") if args.write else ""
    wh = reading_warehouse(settings, wh)
    out = sys.stdout if out is None else out
    if args.write:
        log_in(
            settings,
            wh,
            name,
            password_stdin=args.password_stdin,
            what=_WHAT,
            roles=_ROLES,
            action="sql.write.denied",
            detail=args.query,
        )
    statement = _checked(wh, args, name)
    console = wh if args.write else wh.read_only()
    console.name_tables_unqualified()
    try:
        columns, rows = console.table(statement)
    except WarehouseError as exc:
        if args.write:
            audit(wh, name, "sql.write", f"{args.query}\n-- {exc}", "failed")
        if exc.name == "READONLY" or exc.code == _READONLY:
            raise InputError(_IS_READ_ONLY) from exc
        raise
    finally:
        if console is not wh:  # a client of its own: a serving process answers many
            console.close()
    if args.write:
        audit(wh, name, "sql.write", args.query, "ok")
    out.write(format_rows(columns, rows, args.format))
    return 0


def _checked(wh: Warehouse, args: argparse.Namespace, name: str) -> str:
    """The statement's canonical text, once the engine's parser has read it as one statement
    that stays inside the warehouse; a refusal under --write is audited."""
    from warehouse.console import INLINE_DATA, ConsoleRefusal, check

    checker = wh.read_only(settings=True)
    try:
        statement = check(checker, args.query)
        if statement.inline_data and not args.write:
            raise InputError(_IS_READ_ONLY)
        if statement.inline_data:
            raise ConsoleRefusal(INLINE_DATA)
    except ConsoleRefusal as exc:
        if args.write:
            audit(wh, name, "sql.write.denied", f"{args.query}\n-- {exc}", "denied")
        raise
    finally:
        checker.close()
    return statement.text
