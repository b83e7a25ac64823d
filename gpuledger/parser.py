"""The ``gpuledger`` command line's grammar: every command, its options and their help."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from gpuledger.advise_commands import add_parser as add_advise_parser
from gpuledger.alert_commands import add_parser as add_alerts_parser
from gpuledger.quarantine_commands import add_parser as add_quarantine_parser
from gpuledger.report_commands import add_parser as add_report_parser
from gpuledger_errors import InputError

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


def _parser(
    kind: type[argparse.ArgumentParser] = _Parser,
) -> argparse.ArgumentParser:
    # SUPPRESS: a subcommand's parser would otherwise overwrite an option given before the
    # subcommand with its default (`gpuledger --data-dir D sql ...`); parse fills them in.
    common = kind(add_help=False, argument_default=argparse.SUPPRESS)
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

    parser = kind(
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
    demo.add_argument("--insecure", action="store_true", help=_INSECURE)

    serve = sub.add_parser(
        "serve", parents=[common], help="serve the dashboard and the agents' ingest API"
    )
    serve.add_argument("--port", type=int, help="port (default 8050)")
    serve.add_argument("--insecure", action="store_true", help=_INSECURE)

    user = sub.add_parser("user", parents=[common], help="people who may log in, and their roles")
    user_actions = user.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = user_actions.add_parser("add", parents=[common], help="add a user")
    add.add_argument("name")
    add.add_argument(
        "--role", required=True, help="admin, manager, tenant:ORG or tenant:ORG/PROJECT"
    )
    add.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of stdin (default: make one, shown once)",
    )
    user_actions.add_parser("list", parents=[common], help="the users and their roles")
    remove = user_actions.add_parser("remove", parents=[common], help="remove a user")
    remove.add_argument("name")

    token = sub.add_parser("token", parents=[common], help="ingest tokens for agents")
    token_actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = token_actions.add_parser(
        "create", parents=[common], help="make a token (shown once) for one cluster's agents"
    )
    create.add_argument("--cluster", required=True, help="the cluster its rows must belong to")
    create.add_argument("--node", default="", help="one node only (default: any node)")
    create.add_argument("--note", default="", help="what it is for")
    token_actions.add_parser("list", parents=[common], help="the tokens, never their secrets")
    revoke = token_actions.add_parser("revoke", parents=[common], help="refuse a token from now on")
    revoke.add_argument("id", help="the token's id (`token list` shows it)")

    sql = sub.add_parser("sql", parents=[common], help="run a SQL query against the warehouse")
    sql.add_argument("query", help='the SQL text, e.g. "SELECT count() FROM gpuledger.gpu_samples"')
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.add_argument(
        "--write",
        action="store_true",
        help="allow statements that change data or schema, as an admin (read-only otherwise; "
        "audited)",
    )
    sql.add_argument(
        "--user",
        help="with --write: the gpuledger user, of role admin, to run as (default: sql.user, "
        "GPULEDGER_SQL__USER); its password is asked for",
    )
    sql.add_argument(
        "--password-stdin",
        action="store_true",
        help="with --write: read the user's password from the first line of stdin",
    )

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
    add_report_parser(sub, common)
    add_alerts_parser(sub, common)
    add_advise_parser(sub, common)

    audit = sub.add_parser(
        "audit", parents=[common], help="who did what: the audit log, newest first"
    )
    audit.add_argument("--since", help="entries from this day or ISO time on (default: all)")
    audit.add_argument("--who", default="", help="one actor")
    audit.add_argument("--action", default="", help="an action, or a prefix such as sql")
    audit.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    audit.add_argument("--format", choices=("table", "csv", "json"), default="table")

    db = sub.add_parser("db", parents=[common], help="schema migrations")
    db.add_argument("action", choices=("migrate", "status"))
    return parser


_INSECURE = (
    "no logins and no ingest tokens: anyone who reaches it reads and writes everything "
    "(a test bed only)"
)


def parse(argv: Sequence[str] | None, *, strict: bool = False) -> argparse.Namespace:
    """The command line as a namespace with every common option set. ``strict``: an error
    (or ``--help``) raises :class:`InputError` instead of printing and exiting, for argv
    that did not come from this process's own command line."""
    args = _parser(_Strict if strict else _Parser).parse_args(argv)
    for name, default in COMMON_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


class _Strict(argparse.ArgumentParser):
    """A parser that raises instead of printing to this process's streams and exiting: for
    argv sent by another process (see :mod:`gpuledger.forward`), whose own parser has
    already answered ``--help`` and a mistake."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {_escape_breaks(message)}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise InputError(f"{self.prog}: {(message or 'asked to exit').strip()}")

    def print_help(self, file: Any = None) -> None:
        """Nothing: help is printed by the process the user typed the command into."""

    def print_usage(self, file: Any = None) -> None:
        """Nothing, as :meth:`print_help`."""
