"""The ``gpuledger`` command line. The only place that calls ``sys.exit``.

    gpuledger demo [--days N] [--gpus N] [--seed S] [--no-serve]
    gpuledger serve
    gpuledger agent [--once]
    gpuledger collect nvml|dcgm URL...|kubernetes|slurm [--once]
    gpuledger import alibaba-v2023|alibaba-v2025 ...
    gpuledger ledger --from YYYY-MM-DD --to YYYY-MM-DD [--by ...] [--idle-policy ...]
    gpuledger seal [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--format table|json]
    gpuledger sql "SELECT ..." [--format table|csv|json]
    gpuledger quarantine list [--kind K] [--reason TEXT] [--since ISO] [--format ...]
    gpuledger quarantine replay [--kind K] [--reason TEXT] [--since ISO] [--dry-run]
    gpuledger db migrate | gpuledger db status

Every command takes ``--config FILE``, ``--data-dir DIR``, ``--dsn DSN``, ``-v`` and
``--debug``, before or after its name. A :class:`gpuledger_errors.GpuledgerError` (a bad
setting, a request that cannot be answered, a locked data directory, bad SQL, a source that
fails) ends with one line on stderr saying what is wrong and what to do, and exit status 2
(a ConfigError or an InputError) or 1 (any other); ``--debug`` prints its traceback instead.
Any other exception is a bug and prints its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from gpuledger.collect_commands import cmd_agent, cmd_collect
from gpuledger.commands import (
    cmd_db,
    cmd_demo,
    cmd_fragmentation,
    cmd_import,
    cmd_ledger,
    cmd_queues,
    cmd_seal,
    cmd_serve,
    cmd_sql,
    cmd_why,
)
from gpuledger.output import format_rows  # noqa: F401 - re-exported for callers and tests
from gpuledger.quarantine_commands import add_parser as add_quarantine_parser
from gpuledger.quarantine_commands import cmd_quarantine
from gpuledger.settings import Settings, load_settings
from gpuledger_errors import ConfigError, GpuledgerError, InputError

#: The options every command takes, before or after its name, and their values when not given.
COMMON_DEFAULTS: dict[str, Any] = {
    "config": None,
    "data_dir": None,
    "dsn": None,
    "verbose": False,
    "debug": False,
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser (usage, then one ``error:`` line, exit 2), but with that line kept one
    line: a few of its messages hold arguments as typed (``unrecognized arguments: ...``),
    and an argument may hold a line break. Subparsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        super().error(_escape_breaks(message))


#: The characters that end a line (those ``str.splitlines`` splits at).
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _escape_breaks(text: str) -> str:
    """``text`` with each character that ends a line written as its escape (``\\n``)."""
    return "".join(ascii(c)[1:-1] if c in _LINE_BREAKS else c for c in text)


def _parser() -> argparse.ArgumentParser:
    # SUPPRESS: a subcommand's parser would otherwise overwrite an option given before the
    # subcommand with its default (`gpuledger --data-dir D sql ...`); _parse fills them in.
    common = _Parser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--config", help="TOML settings file")
    common.add_argument(
        "--data-dir", help="embedded warehouse directory (default ./gpuledger-data)"
    )
    common.add_argument(
        "--dsn", help="ClickHouse DSN: chdb:///abs/path or http(s)://user:pass@host:8123/db"
    )
    common.add_argument("-v", "--verbose", action="store_true", help="log more")
    common.add_argument(
        "--debug", action="store_true", help="on an error, print its traceback, not one line"
    )

    parser = _Parser(
        prog="gpuledger",
        description="Observability and cost allocation for shared GPU clusters.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="simulate a GPU cluster into the warehouse and serve the dashboard",
    )
    demo.add_argument("--days", type=float, help="days to backfill (default 7)")
    demo.add_argument("--gpus", type=int, help="GPUs in the simulated cluster (default 64)")
    demo.add_argument("--seed", type=int, help="random seed (default 0)")
    demo.add_argument(
        "--no-serve", action="store_true", help="backfill, print what was written, and exit"
    )
    demo.add_argument("--port", type=int, help="dashboard port (default 8050)")

    serve = sub.add_parser(
        "serve", parents=[common], help="serve the dashboard and the agents' ingest API"
    )
    serve.add_argument("--port", type=int, help="port (default 8050)")

    sql = sub.add_parser("sql", parents=[common], help="run a SQL query against the warehouse")
    sql.add_argument("query", help='the SQL text, e.g. "SELECT count() FROM gpuledger.gpu_samples"')
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")

    imp = sub.add_parser("import", parents=[common], help="import a public GPU cluster trace")
    kinds = imp.add_subparsers(dest="trace", required=True, metavar="TRACE")
    v2023 = kinds.add_parser(
        "alibaba-v2023", parents=[common], help="Alibaba openb GPU cluster trace (nodes + pods CSV)"
    )
    v2023.add_argument("--nodes", required=True, help="openb_node_list_*.csv")
    v2023.add_argument("--pods", required=True, help="openb_pod_list_*.csv")
    v2025 = kinds.add_parser(
        "alibaba-v2025", parents=[common], help="Alibaba GPU-disaggregated DLRM serving trace"
    )
    v2025.add_argument("file", help="disaggregated_DLRM_trace.csv")
    for trace in (v2023, v2025):
        trace.add_argument(
            "--start",
            required=True,
            help="ISO time of the trace's second 0, with its offset, e.g. "
            "2026-01-01T00:00:00+00:00",
        )
        trace.add_argument("--cluster", help="cluster name to file the trace under")

    agent = sub.add_parser(
        "agent", parents=[common], help="the node agent: NVML (and dcgm-exporter) to the warehouse"
    )
    agent.add_argument("--once", action="store_true", help="collect once, print, and exit")

    collect = sub.add_parser("collect", parents=[common], help="run one source in the foreground")
    collect.add_argument("source", choices=("nvml", "dcgm", "kubernetes", "slurm"))
    collect.add_argument("targets", nargs="*", help="dcgm-exporter /metrics URLs (dcgm)")
    collect.add_argument("--once", action="store_true", help="collect once, print, and exit")
    collect.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)"
    )
    collect.add_argument("--sacct", default="sacct", help="the sacct command (slurm)")

    led = sub.add_parser(
        "ledger",
        parents=[common],
        help="GPU-hours, idle time and cost per tenant (or other grouping)",
    )
    led.add_argument("--from", dest="date_from", required=True, help="first day, YYYY-MM-DD (UTC)")
    led.add_argument(
        "--to", dest="date_to", required=True, help="last day, YYYY-MM-DD (UTC), included"
    )
    led.add_argument(
        "--by",
        default="tenant",
        help="tenant|org|project|user|gpu_model|pool|node|queue|workload_type (default tenant)",
    )
    led.add_argument(
        "--idle-policy",
        choices=("weighted", "even", "none"),
        help="how unallocated cost is shared (default: ledger.idle_policy)",
    )
    led.add_argument("--cluster", default="", help="one cluster (default: all)")
    led.add_argument(
        "--source",
        choices=("rollup", "raw"),
        default="rollup",
        help="utilisation from the 1-minute rollup (default) or raw samples",
    )
    led.add_argument(
        "--no-seals",
        action="store_true",
        help="compute every day from the minutes, none from the days `gpuledger seal` kept",
    )
    led.add_argument("--format", choices=("table", "csv", "json"), default="table")
    led.add_argument(
        "--energy",
        action="store_true",
        help="also the energy used and its cost (price book resource energy_kwh)",
    )

    seal = sub.add_parser(
        "seal",
        parents=[common],
        help="keep each finished day's ledger rows, so that reports over them read no minutes",
    )
    seal.add_argument(
        "--since", help="first day to seal, YYYY-MM-DD (default: the first with data)"
    )
    seal.add_argument("--until", help="last day to seal, YYYY-MM-DD (default: the last finished)")
    seal.add_argument("--format", choices=("table", "json"), default="table")

    why = sub.add_parser("why", parents=[common], help="explain a number, with numbers")
    whys = why.add_subparsers(dest="what", required=True, metavar="WHAT")
    why_cost = whys.add_parser(
        "cost", parents=[common], help="why cost changed from the month before"
    )
    why_cost.add_argument("--month", required=True, help="YYYY-MM")
    why_cost.add_argument("--tenant", default="", help="one tenant (default: the cluster)")
    why_job = whys.add_parser("job", parents=[common], help="why a job is waiting")
    why_job.add_argument("id", help="the job id")
    why_gpu = whys.add_parser("gpu", parents=[common], help="why a GPU is idle")
    why_gpu.add_argument("id", help="the GPU UUID")
    why_gpu.add_argument("--mig", default="", help="a MIG GPU-instance id")
    why_tenant = whys.add_parser("tenant", parents=[common], help="why a tenant is over quota")
    why_tenant.add_argument("id", help="the tenant, org/project")
    for explained in (why_cost, why_job, why_gpu, why_tenant):
        explained.add_argument(
            "--cluster", default="", help="the cluster (default: the only one, or all for cost)"
        )
        explained.add_argument("--format", choices=("text", "json"), default="text")
    for explained in (why_job, why_gpu, why_tenant):
        explained.add_argument("--at", help="ISO time to explain (default: now)")

    queues = sub.add_parser(
        "queues", parents=[common], help="wait times, failures and preemptions, lost GPU-hours"
    )
    queues.add_argument("--from", dest="date_from", required=True, help="first day, YYYY-MM-DD")
    queues.add_argument("--to", dest="date_to", required=True, help="last day, YYYY-MM-DD")
    queues.add_argument("--cluster", default="", help="the cluster (default: the only one)")
    queues.add_argument("--by", default="tenant", help="tenant|queue|gpu_model (default tenant)")
    queues.add_argument("--format", choices=("table", "json"), default="table")

    frag = sub.add_parser(
        "fragmentation", parents=[common], help="FGD fragmentation and stranded capacity"
    )
    frag.add_argument("--at", help="ISO time (default: now)")
    frag.add_argument("--cluster", default="", help="the cluster (default: the only one)")
    frag.add_argument(
        "--window-days",
        type=float,
        default=7.0,
        help="trailing days the typical task mix is taken from (default 7)",
    )
    frag.add_argument(
        "--scope",
        choices=("model", "cluster"),
        default="model",
        help="measure nodes against tasks for their own GPU model (default) or "
        "every task, as the FGD paper does",
    )
    frag.add_argument("--format", choices=("text", "json"), default="text")

    add_quarantine_parser(sub, common)

    db = sub.add_parser("db", parents=[common], help="schema migrations")
    db.add_argument("action", choices=("migrate", "status"))
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    args = _parser().parse_args(argv)
    for name, default in COMMON_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


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
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
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
        return COMMANDS[args.command](_settings(args), args)
    except GpuledgerError as exc:
        if args.debug:
            traceback.print_exception(exc)
        else:
            print(f"gpuledger: {_one_line(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError | InputError) else 1
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


def _one_line(exc: GpuledgerError) -> str:
    """The message on one line (a source's own text, such as sacct's stderr, may have more)."""
    return (
        " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        or type(exc).__name__
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
