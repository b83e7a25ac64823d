"""The ``gpuledger`` command line. The only place that calls ``sys.exit``.

    gpuledger demo [--days N] [--gpus N] [--seed S] [--no-serve]
    gpuledger serve
    gpuledger agent [--once]
    gpuledger collect nvml|dcgm URL...|kubernetes|slurm [--once]
    gpuledger import alibaba-v2023|alibaba-v2025 ...
    gpuledger ledger --from YYYY-MM-DD --to YYYY-MM-DD [--by ...] [--idle-policy ...]
    gpuledger seal [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--format table|json]
    gpuledger sql "SELECT ..." [--format table|csv|json] [--write --user NAME [--password-stdin]]
    gpuledger token create|list|revoke ...   gpuledger user add|list|remove ...
    gpuledger audit [--since ...] [--who NAME] [--action PREFIX]
    gpuledger quarantine list [--kind K] [--reason TEXT] [--since ISO] [--format ...]
    gpuledger quarantine replay [--kind K] [--reason TEXT] [--since ISO] [--dry-run]
    gpuledger quarantine rejected [--format table|csv|json]
    gpuledger db migrate | gpuledger db status
    gpuledger report --month YYYY-MM [--tenant T] [--formats ...] [--out DIR]
    gpuledger alerts check [--format table|json] [--at ISO] | alerts list [--state open]
    gpuledger advise [list|approve ID|reject ID|apply ID] [--format ...] [--kubeconfig F]
                     [--user NAME [--password-stdin]]

Every command takes ``--config FILE``, ``--data-dir DIR``, ``--dsn DSN``, ``-v`` and
``--debug``, before or after its name. A :class:`gpuledger_errors.GpuledgerError` (a bad
setting, a request that cannot be answered, a locked data directory, bad SQL, a source that
fails) ends with one line on stderr saying what is wrong and what to do, and exit status 2
(a ConfigError or an InputError) or 1 (any other); ``--debug`` prints its traceback instead.
Any other exception is a bug and prints its traceback.

While ``gpuledger serve`` or ``gpuledger demo`` owns the embedded data directory, the read
commands (ledger, why, queues, fragmentation, sql without --write, audit, quarantine list, db
status, alerts list) are sent to it and answered there, with the same output and exit status
(:mod:`gpuledger.forward`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from gpuledger.advise_commands import cmd_advise
from gpuledger.alert_commands import cmd_alerts
from gpuledger.collect_commands import cmd_agent, cmd_collect
from gpuledger.commands import (
    cmd_audit,
    cmd_db,
    cmd_fragmentation,
    cmd_import,
    cmd_ledger,
    cmd_queues,
    cmd_seal,
    cmd_token,
    cmd_user,
    cmd_why,
)
from gpuledger.forward import IN_USE_NOTE, Reply, ask_owner
from gpuledger.output import exit_status, one_line
from gpuledger.output import format_rows as format_rows  # re-exported for callers and tests
from gpuledger.parser import parse
from gpuledger.quarantine_commands import cmd_quarantine
from gpuledger.report_commands import cmd_report
from gpuledger.serve_commands import cmd_demo, cmd_serve
from gpuledger.settings import Settings, load_settings
from gpuledger.sql_command import cmd_sql
from gpuledger_errors import GpuledgerError, InputError


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, dict[str, Any]] = {}
    if args.data_dir:
        overrides.setdefault("warehouse", {})["data_dir"] = args.data_dir
    if args.dsn:
        overrides.setdefault("warehouse", {})["dsn"] = args.dsn
    for flag, key in (("days", "days"), ("gpus", "gpus"), ("seed", "seed")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.setdefault("simulator", {})[key] = value
    if getattr(args, "port", None) is not None:
        overrides.setdefault("server", {})["port"] = args.port
    if getattr(args, "user", None):  # who `sql --write` or `advise approve` runs as
        section = "scheduler" if args.command == "advise" else "sql"
        overrides.setdefault(section, {})["user"] = args.user
    return load_settings(args.config, overrides=overrides)


COMMANDS = {
    "fragmentation": cmd_fragmentation,
    "queues": cmd_queues,
    "why": cmd_why,
    "demo": cmd_demo,
    "ledger": cmd_ledger,
    "seal": cmd_seal,
    "agent": cmd_agent,
    "collect": cmd_collect,
    "import": cmd_import,
    "serve": cmd_serve,
    "sql": cmd_sql,
    "quarantine": cmd_quarantine,
    "db": cmd_db,
    "audit": cmd_audit,
    "token": cmd_token,
    "user": cmd_user,
    "report": cmd_report,
    "alerts": cmd_alerts,
    "advise": cmd_advise,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # the drivers' retry chatter; their failures reach the user as one line
        import warehouse.client  # noqa: F401 - its driver sets urllib3's level when imported

        for name in ("urllib3", "clickhouse_connect"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        _utf8_only(sys.argv[1:] if argv is None else argv)
        settings = _settings(args)
        answer = ask_owner(settings, args, sys.argv[1:] if argv is None else argv)
        if answer is not None:
            return _show(answer)
        return COMMANDS[args.command](settings, args)
    except GpuledgerError as exc:
        if args.debug:
            traceback.print_exception(exc)
        else:
            from warehouse.client import DataDirInUse

            note = f". {IN_USE_NOTE}" if isinstance(exc, DataDirInUse) else ""
            print(f"gpuledger: {one_line(exc)}{note}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader (`| head`) has gone: what it wanted it has; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _utf8_only(argv: Sequence[str]) -> None:
    """Refuse an argument that holds bytes that are not UTF-8 (the interpreter hands them over
    as lone surrogates, which no query, file or warehouse value can hold)."""
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                f"argument {arg!r} is not UTF-8 text (the \\udcXX are bytes that are not): "
                "type it again in UTF-8"
            ) from None


def _show(answer: Reply) -> int:
    """Print what a command answered by the process that owns the data directory printed."""
    sys.stdout.write(answer.stdout)
    sys.stdout.flush()
    sys.stderr.write(answer.stderr)
    return answer.status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
