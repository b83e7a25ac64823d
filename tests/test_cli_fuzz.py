"""Every subcommand with hostile arguments (issue 17): the command line ends with status 0 and
some output, or with a non-zero status and one line on stderr, never with a traceback.

The one line is ``gpuledger: <what is wrong, the value, what to do>`` (status 1 or 2), or
argparse's own form for a command line it cannot parse (status 2): its ``usage:`` lines, then
``<prog>: error: <one line>``. Under ``-v`` the logs the user asked for may come first.

The command lines run in one worker process (tests/cli_worker.py) that calls
``gpuledger.cli.main`` as the entry point does, on a data directory it fills first with
``gpuledger demo --no-serve``. Commands that serve or run until stopped (``serve`` with a good
port, ``demo`` without ``--no-serve``, ``agent`` and ``collect`` without ``--once``) are left
out, as are arguments that would write outside this test's folder or run a program other than
the few fake ``sacct`` scripts here; the only network is 127.0.0.1 (a closed port, and a stub
dcgm-exporter).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import http.server
import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from cli_runner import Outcome, Worker
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from gpuledger.cli import _settings
from gpuledger.parser import parse as _parse

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CLOSED = "127.0.0.1:9"  # the discard port: nothing listens there


class _Exporter(http.server.BaseHTTPRequestHandler):
    """A stand-in dcgm-exporter: a real body, a garbage body, a 404."""

    bodies: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.bodies.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body or b"not found")

    def log_message(self, *_args: Any) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class Places:
    """The files and folders the command lines name."""

    root: Path
    data: str  # the filled warehouse
    exporter: str  # http://127.0.0.1:PORT

    def __getitem__(self, name: str) -> str:
        return str(self.root / "files" / name)


def _write_files(files: Path) -> None:
    files.mkdir()
    for name, source, lines in (
        ("nodes.csv", "alibaba-gpu-v2023/openb_node_list_all_node.csv", 400),
        ("pods.csv", "alibaba-gpu-v2023/openb_pod_list_default.csv", 40),
        ("dlrm.csv", "alibaba-gpu-v2025/disaggregated_DLRM_trace.csv", 40),
    ):
        head = (DATA / source).read_text().splitlines(keepends=True)[:lines]
        (files / name).write_text("".join(head))
    (files / "header.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\n")
    (files / "mangled.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\np,x,-1,99999999999999999999,nan,,LS,Running,-5,inf,\n"
        "q,1,1,1,1000,,LS,Running,10,5,7\nshort,row\n"
    )
    (files / "empty").write_text("")
    (files / "garbage").write_bytes(bytes(range(256)) * 4)
    (files / "dir").mkdir()
    configs = {
        "bad.toml": "[warehouse\n",
        "unknown.toml": "[warehouse]\ndata_dri = 'x'\n",
        "nan.toml": "[ledger]\nidle_threshold_ratio = nan\n",
        "types.toml": "[warehouse]\ndata_dir = ['a']\n",
        "flat.toml": "warehouse = 1\n",
        "huge.toml": "[warehouse]\nraw_retention_days = 9223372036854775807\n"
        "rollup_1m_retention_days = 9223372036854775807\n"
        "rollup_1h_retention_days = 9223372036854775807\nmax_memory_bytes = -1\n",
        "even.toml": "[ledger]\nidle_policy = 'even'\n",
        "eur.toml": "[ledger]\ncurrency = 'EUR'\n",
        "hostile.toml": "[ledger]\ncurrency = \"€\\n💥\"\n[agent]\ncluster = ''\n",
    }
    for name, text in configs.items():
        (files / name).write_text(text)
    (files / "latin1.toml").write_bytes(b"[ledger]\ncurrency = '\xff'\n")
    kubeconfigs = {
        "kube-closed.yaml": (
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: k, cluster: {{server: 'https://{CLOSED}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        ),
        "kube-list.yaml": "- 1\n- 2\n",
        "kube-bad.yaml": "apiVersion: v1\nclusters: {\n",
        "kube-empty.yaml": "",
    }
    for name, text in kubeconfigs.items():
        (files / name).write_text(text)
    sacct = {
        "sacct-ok": f"cat {DATA / 'slurm' / 'sacct_poll1.txt'}",
        "sacct-garbage": "printf '|||\\n\\377\\376 not sacct\\n1001|x\\n'",
        "sacct-fails": "echo 'sacct: error: slurmdbd: connection refused' >&2\n"
        "echo 'second line' >&2\nexit 1",
    }
    for name, body in sacct.items():
        script = files / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Places]:
    root = tmp_path_factory.mktemp("fuzz")
    for sub in ("work", "home"):
        (root / sub).mkdir()
    _write_files(root / "files")
    dcgm = DATA / "dcgm" / "h100_80gb_hbm3_x8_podlabels__nvidia_aicr@156a357.prom"
    _Exporter.bodies = {"/metrics": dcgm.read_bytes(), "/garbage": bytes(range(256)) * 8}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Places(root, str(root / "data"), f"http://127.0.0.1:{server.server_port}")
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def cli(places: Places) -> Iterator[Worker]:
    """The worker, its data directory filled by a small demo."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULEDGER_", "KUBECONFIG"))}
    # HOME: no ~/.kube/config of the user's; NO_PROXY: 127.0.0.1 is reached directly
    env |= {"PYTHONPATH": str(ROOT), "HOME": str(places.root / "home"), "NO_PROXY": "*"}
    worker = Worker(places.root, env, cwd=places.root / "work")
    filled = worker(
        ["demo", "--no-serve", "--days", "0.05", "--gpus", "8", "--data-dir", places.data]
    )
    assert filled.status == 0, filled.stderr
    yield worker
    worker.stop()


# -- what a command line may end with ------------------------------------------------------
def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _argparse_error(lines: list[str]) -> bool:
    """argparse's form: ``usage: gpuledger ...`` (wrapped lines indented), then
    ``gpuledger[ COMMAND...]: error: <message>``."""
    if len(lines) < 2 or not lines[0].startswith("usage: gpuledger"):
        return False
    *usage, last = lines[1:]
    prog, sep, message = last.partition(": error: ")
    return (
        all(ln.startswith(" ") for ln in usage)
        and bool(sep and message.strip())
        and prog.split(" ")[0] == "gpuledger"
    )


def _verbose(argv: list[str]) -> bool:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return bool(_parse(argv).verbose)
        except SystemExit:
            return False


def check(argv: list[str], got: Outcome) -> None:
    """The rule of issue 17 for one command line."""
    where = f"argv={argv!r}\nstatus={got.status}\nstdout={got.stdout[-2000:]}\nstderr={got.stderr}"
    assert "Traceback" not in got.stderr, where
    assert got.status is not None, where
    if got.status == 0:
        assert got.stdout.strip(), where
        return
    lines = _lines(got.stderr)
    if _argparse_error(lines):
        assert got.status == 2, where
        return
    if _verbose(argv):  # the logs asked for come first; the error is still the last line
        lines = lines[-1:]
    assert len(lines) == 1 and lines[0].startswith("gpuledger: "), where
    assert got.status in (1, 2), where


# -- the command lines ---------------------------------------------------------------------
HOSTILE = [
    "",
    " ",
    "-",
    "--",
    "-1",
    "0",
    "nan",
    "1e308",
    "9" * 40,
    "x" * 3000,
    "日本語",
    "\u202eevil",
    "💥",
    "a\nb",
    "a\rb",
    "a\u2028b",
    "'",
    '"',
    "\\",
    "%s%n",
    "{db:Identifier}",
    "{}",
    "'; DROP TABLE gpu_samples; --",
    "x' OR '1'='1",
    "NULL",
    "\t",
    "../../etc/passwd",
    "~",
    "$HOME",
    "--help",
]
_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")


def texts() -> st.SearchStrategy[str]:
    """Hostile text: special cases, any text, and bytes that are not UTF-8 as the interpreter
    hands them to a program (``os.fsdecode``: lone surrogates)."""
    return st.one_of(
        st.sampled_from(HOSTILE),
        st.text(_CHARS, max_size=24),
        st.binary(min_size=1, max_size=6).map(os.fsdecode).filter(lambda s: "\x00" not in s),
    )


@dataclasses.dataclass(frozen=True)
class Values:
    """What an option or argument is given: a good value, or a bad one."""

    good: st.SearchStrategy[str]
    bad: st.SearchStrategy[str]


def values(good: list[str], bad: list[str] | None = None) -> Values:
    """``good``; bad: ``bad`` as often as hostile text."""
    odd = st.one_of(st.sampled_from(bad), texts()) if bad else texts()
    return Values(st.sampled_from(good), odd)


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def days() -> Values:
    t = _today()
    recent = [(t - dt.timedelta(days=n)).isoformat() for n in (-1, 0, 1, 3)]
    odd = ["2026-13-45", "yesterday", "0001-01-01", "9999-12-31", "1969-12-31", "1970-01-01"]
    odd += ["2105-12-31", "2106-01-01", "2299-12-31", "2024-02-29", "2026-02-29", "20261201"]
    odd += ["2026-W49-1", "2026-12-01T00:00", "2026-1-1", "٢٠٢٦-٠١-٠١", f"{t}T23:59+14:00"]
    return values(recent, odd)


def times() -> Values:
    t = _today()
    recent = [f"{t}T00:30", f"{t}T01:00:00Z", f"{t}T02:00+14:00", f"{t - dt.timedelta(days=1)}"]
    odd = ["0001-01-01T00:00:00+00:00", "9999-12-31T23:59:59-23:59", "1969-12-31T23:59:59Z"]
    odd += ["2106-02-07T06:28:16+00:00", "2026-12-01T12:00:00+23:59:59.999999", "1", "now"]
    odd += ["2026-12-01 25:00", "2026-12-01T12:00:00+00:00[UTC]", "9999-12-31T23:59:59.999999"]
    return values(recent, odd)


def months() -> Values:
    t = _today()
    recent = [f"{t:%Y-%m}", f"{t - dt.timedelta(days=31):%Y-%m}"]
    odd = ["2026-13", "0001-01", "1970-01", "1969-12", "2105-12", "9999-12", "2026", "2026-1"]
    return values(recent, odd)


def choices(*good: str) -> Values:
    return values(list(good))


FLOATS = ["nan", "inf", "-inf", "-1", "0", "-0", "1e308", "1e-300", "1e999", "٣", "1e9"]
INTS = ["-1", "9223372036854775808", "9" * 30, "1_0", "٣", "1.5", "0x10"]


@dataclasses.dataclass(frozen=True)
class Opt:
    flag: str
    values: Values | None  # None: a flag without a value
    required: bool = False


@dataclasses.dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    positionals: tuple[Values, ...] = ()
    options: tuple[Opt, ...] = ()


@dataclasses.dataclass(frozen=True)
class Known:
    """Names the filled warehouse holds, so that good values find something."""

    jobs: list[str]
    gpus: list[str]
    tenants: list[str]


#: days of a demo: small, or refused before anything is simulated
DEMO_DAYS = ["0.01", "0"]
BAD_DEMO_DAYS = ["-1", "nan", "inf", "-inf", "1e308", "1e999", "36", "1e-320"]
BAD_PORTS = ["0", "-1", "65536", "99999999999999999999"]
SQL = [
    "SELECT 1",
    "SELECT count() FROM gpu_samples",
    "SELECT * FROM gpu_samples LIMIT 3",
    "SELECT number, toString(number) FROM numbers(5)",
    "SHOW TABLES",
    "SELECT NULL, [1, 2], map('a', 1), (1, 'x'), 1/0, 0/0",
    "SELECT 'a\nb' AS `x\ny`, '日本語' AS z",
    "SELECT toDecimal128(1, 30), toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0')",
]
BAD_SQL = [
    "SELEC 1",
    "",
    "SELECT * FROM nosuch",
    "SELECT 1; SELECT 2",
    "SELECT '{db:Identifier}'",
    "SELECT {x:UInt8}",
    "SELECT toDate('2026-13-45')",
    "SELECT 1 FORMAT JSON",
    "SELECT throwIf(1, 'boom\nsecond line')",
    "DROP TABLE IF EXISTS nosuch",
    "SELECT '\udcff'",
    "SELECT 'x' AS a, 'y' AS a",
]


def safe_sacct(p: Places) -> list[str]:
    """The only --sacct values run: fake scripts, and names that run nothing."""
    return [p["sacct-ok"], p["sacct-garbage"], p["sacct-fails"], "", "'", '"x', "/nonexistent"]


def commands(p: Places, known: Known) -> list[Command]:
    t = _today()
    read = [p["nodes.csv"], p["pods.csv"], p["dlrm.csv"]]
    unread = [
        p["header.csv"],
        p["mangled.csv"],
        p["empty"],
        p["garbage"],
        p["dir"],
        str(p.root / "missing.csv"),
    ]
    unread += ["/dev/null", "", str(p.root / ("x" * 300) / "y")]
    paths = values(read, unread)
    start = Values(
        st.sampled_from([f"{t - dt.timedelta(days=2)}T00:00:00+00:00", f"{t}T00:00:00Z"]),
        st.one_of(st.sampled_from([f"{t}T00:00:00", "2026-01-01"]), times().bad),
    )
    urls = values(
        [f"{p.exporter}/metrics"],
        [
            f"{p.exporter}/garbage",
            f"{p.exporter}/nosuch",
            f"http://{CLOSED}/metrics",
            "http://[::1",
            "http://127.0.0.1:99999/metrics",
            "http://",
            "ftp://127.0.0.1/x",
            "not a url",
        ],
    )
    kubeconfigs = values(
        [p["kube-closed.yaml"]],
        [
            *(p[n] for n in ("kube-list.yaml", "kube-bad.yaml", "kube-empty.yaml", "garbage")),
            p["dir"],
            str(p.root / "missing.yaml"),
        ],
    )
    sacct = Values(st.just(safe_sacct(p)[0]), st.sampled_from(safe_sacct(p)[1:]))
    clusters = values(["demo"], ["", "nosuch", "alibaba-v2023"])
    formats = choices("table", "csv", "json")
    why = [
        Opt("--cluster", clusters),
        Opt("--format", choices("text", "json")),
        Opt("--at", times()),
    ]
    return [
        Command(
            ("demo",),
            options=(
                Opt("--no-serve", None, required=True),
                Opt("--days", values(DEMO_DAYS, BAD_DEMO_DAYS), required=True),
                Opt("--gpus", values(["8"], ["16", "0", "-8", "7", "9223372036854775808"])),
                Opt("--seed", values(["0"], ["1", "-1", "4294967296", "1" + "0" * 20])),
                Opt("--port", values(["8050"], BAD_PORTS)),
            ),
        ),
        Command(("serve",), options=(Opt("--port", values(BAD_PORTS), required=True),)),
        Command(("sql",), (values(SQL, BAD_SQL),), (Opt("--format", formats),)),
        Command(
            ("import", "alibaba-v2023"),
            options=(
                Opt("--nodes", paths, required=True),
                Opt("--pods", paths, required=True),
                Opt("--start", start, required=True),
                Opt("--cluster", values(["alibaba-v2023"])),
            ),
        ),
        Command(
            ("import", "alibaba-v2025"),
            (paths,),
            (Opt("--start", start, required=True), Opt("--cluster", values(["alibaba-v2025"]))),
        ),
        Command(("agent",), options=(Opt("--once", None, required=True),)),
        Command(("collect",), (choices("dcgm"), urls, urls), (Opt("--once", None, True),)),
        Command(
            ("collect",),
            (choices("kubernetes"),),
            (Opt("--once", None, True), Opt("--kubeconfig", kubeconfigs)),
        ),
        Command(
            ("collect",),
            (choices("slurm", "slurm", "nvml"),),
            (Opt("--once", None, True), Opt("--sacct", sacct)),
        ),
        Command(
            ("ledger",),
            options=(
                Opt("--from", days(), required=True),
                Opt("--to", days(), required=True),
                Opt("--by", choices("tenant", "org", "project", "gpu_model", "pool", "queue")),
                Opt("--idle-policy", choices("weighted", "even", "none")),
                Opt("--cluster", clusters),
                Opt("--source", choices("rollup", "raw")),
                Opt("--no-seals", None),
                Opt("--format", formats),
                Opt("--energy", None),
            ),
        ),
        Command(
            ("seal",),
            options=(
                Opt("--since", days()),
                Opt("--until", days()),
                Opt("--format", choices("table", "json")),
            ),
        ),
        Command(
            ("why", "cost"),
            options=(
                Opt("--month", months(), required=True),
                Opt("--tenant", values(["", *known.tenants])),
                *why[:2],
            ),
        ),
        Command(("why", "job"), (values(known.jobs),), tuple(why)),
        Command(("why", "gpu"), (values(known.gpus),), (*why, Opt("--mig", values([""], ["1"])))),
        Command(("why", "tenant"), (values(known.tenants),), tuple(why)),
        Command(
            ("queues",),
            options=(
                Opt("--from", days(), required=True),
                Opt("--to", days(), required=True),
                Opt("--cluster", clusters),
                Opt("--by", choices("tenant", "queue", "gpu_model")),
                Opt("--format", choices("table", "json")),
            ),
        ),
        Command(
            ("fragmentation",),
            options=(
                Opt("--at", times()),
                Opt("--cluster", clusters),
                Opt("--window-days", values(["7", "0.5", "30"], FLOATS)),
                Opt("--scope", choices("model", "cluster")),
                Opt("--format", choices("text", "json")),
            ),
        ),
        Command(
            ("quarantine", "list"),
            options=(
                Opt("--kind", choices("gpu_sample", "job_event", "gpu_inventory")),
                Opt("--reason", values(["unknown_gpu", "ts"])),
                Opt("--since", times()),
                Opt("--examples", values(["0", "3"], INTS)),
                Opt("--format", formats),
            ),
        ),
        Command(
            ("quarantine", "replay"),
            options=(
                Opt("--kind", choices("gpu_sample", "job_event")),
                Opt("--reason", values(["unknown_gpu", "ts"])),
                Opt("--since", times()),
                Opt("--dry-run", None),
            ),
        ),
        Command(("db",), (choices("status", "migrate"),)),
    ]


def _common(p: Places) -> list[tuple[str, Values]]:
    dirs = [str(p.root / "new" / "dir"), p["garbage"], "", "/dev/null", p.root / ("x" * 300)]
    dsns = [
        "mysql://x@y/db",
        "chdb://relative/path",
        f"chdb://{p.root / 'other'}",
        f"http://default:pw@{CLOSED}/gpuledger",
        f"https://{CLOSED}",
        "http://[::1",
        "http://127.0.0.1:99999/x",
        "",
        "chdb://memory",
    ]
    configs = [p[n] for n in ("bad.toml", "unknown.toml", "nan.toml", "types.toml")]
    configs += [p[n] for n in ("flat.toml", "huge.toml", "hostile.toml", "latin1.toml")]
    configs += [p["eur.toml"]]
    configs += [p["dir"], p["garbage"], "/dev/null", str(p.root / "none.toml")]
    return [
        ("--data-dir", Values(st.just(p.data), st.sampled_from([str(d) for d in dirs]))),
        ("--dsn", Values(st.just(f"chdb://{p.data}"), st.sampled_from(dsns))),
        ("--config", Values(st.just(p["even.toml"]), st.sampled_from(configs))),
    ]


def _token(flag: str, value: str, joined: bool) -> list[str]:
    return [f"{flag}={value}"] if joined else [flag, value]


WORDS = ["--help", "-h", "ledger", "why", "cost", "--from", "--data-dir", "nosuch", "-x", "--"]


@st.composite
def command_lines(draw: st.DrawFn, p: Places, known: Known) -> list[str]:
    """A command line: a command with good values, or with some bad ones, some options left
    out or given twice, garbage, and the options every command takes before or after it, in
    any order."""
    if draw(st.integers(0, 29)) == 0:  # now and then, anything at all
        return draw(st.lists(st.one_of(texts(), st.sampled_from(WORDS)), max_size=5))
    spite = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 4]))  # in tenths: how often a value is bad

    def bad() -> bool:
        return draw(st.integers(0, 9)) < spite

    def value(v: Values) -> str:
        return draw(v.bad if bad() else v.good)

    cmd = draw(st.sampled_from(commands(p, known)))
    groups: list[list[str]] = [[value(v)] for v in cmd.positionals if not bad()]
    for opt in cmd.options:
        wanted = not bad() if opt.required else draw(st.booleans())
        for _ in range(2 if wanted and bad() else 1 if wanted else 0):
            if opt.values is None:
                groups.append([opt.flag])
            else:
                groups.append(_token(opt.flag, value(opt.values), draw(st.booleans())))
    before: list[list[str]] = []
    for flag, v in _common(p):
        if flag == "--data-dir" or (spite and draw(st.integers(0, 5)) == 0):
            token = _token(flag, value(v), draw(st.booleans()))
            (before if draw(st.booleans()) else groups).append(token)
    if draw(st.integers(0, 9)) == 0:
        groups.append(["-v"])
    if spite and bad():
        groups.append([draw(st.one_of(texts(), st.sampled_from(WORDS)))])
    order = draw(st.permutations(groups))
    return [*(t for g in before for t in g), *cmd.path, *(t for g in order for t in g)]


# -- what is never run ---------------------------------------------------------------------
def _inside(p: Places, path: str) -> bool:
    full = (p.root / "work" / Path(path).expanduser()).resolve()
    return full == Path("/dev/null") or full.is_relative_to(p.root.resolve())


def runnable(p: Places, argv: list[str]) -> bool:
    """False for a command line that would serve, run until stopped, write outside this
    test's folder or run a program other than the fake sacct scripts."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = _parse(argv)
        except SystemExit:  # argparse refuses it, or prints help
            return True
    try:
        cfg = _settings(args)
    except Exception:  # refused (or a bug) before it does anything
        return True
    dsn = cfg.warehouse.dsn
    if dsn.startswith("chdb://") and not _inside(p, dsn.removeprefix("chdb://") or "/"):
        return False
    if dsn.startswith("http") and not ("127.0.0.1" in dsn or "[::1" in dsn):
        return False
    if not _inside(p, cfg.warehouse.data_dir):
        return False
    if args.command == "serve" or (args.command in ("agent", "collect") and not args.once):
        return False
    if args.command == "demo":
        s = cfg.simulator
        return bool(args.no_serve) and s.days <= 0.02 and s.gpus <= 64
    if args.command == "collect" and args.source == "slurm":
        return args.sacct in safe_sacct(p)
    return True


# -- the tests -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def known(cli: Worker, places: Places) -> Known:
    def column(query: str) -> list[str]:
        got = cli(["sql", query, "--format", "csv", "--data-dir", places.data])
        assert got.status == 0, got.stderr
        return got.stdout.splitlines()[1:]

    return Known(
        jobs=column("SELECT DISTINCT job_id FROM job_events ORDER BY job_id LIMIT 5"),
        gpus=column("SELECT DISTINCT gpu_uuid FROM gpus ORDER BY gpu_uuid LIMIT 3"),
        tenants=column("SELECT tenant FROM tenants ORDER BY tenant LIMIT 3"),
    )


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_every_command_line_ends_in_output_or_one_line(
    cli: Worker, places: Places, known: Known, data: st.DataObject
) -> None:
    argv = data.draw(command_lines(places, known), label="argv")
    assume(runnable(places, argv))
    got = cli(argv)
    note(f"status {got.status}\nstdout: {got.stdout[-500:]}\nstderr: {got.stderr}")
    check(argv, got)


# -- what the fuzzing found ---------------------------------------------------------------
def _demo(*argv: str) -> list[str]:
    """``demo --no-serve`` on a data directory of its own (named after its arguments)."""
    return ["demo", "--no-serve", *argv, "--data-dir", "{root}/demo" + "".join(argv)]


#: Command lines that ended in a traceback, or ran for hours: (argv, status, what the last line
#: of stderr holds; None: status 0 with some output).
CRASHED = [
    (["sql", "SELECT 1", "a\nb"], 2, "gpuledger: error: unrecognized arguments: a\\nb"),
    (["--config", "{files}/dir", "db", "status"], 2, "cannot be read: Is a directory"),
    (["--config", "{files}/latin1.toml", "db", "status"], 2, "is not UTF-8 text (byte 0xff"),
    (["--dsn", "http://[::1", "db", "status"], 2, "'http://[::1' is not a URL (Invalid IPv6"),
    (["quarantine", "list", "--data-dir", "{root}/" + "x" * 300], 2, "has a name of 300 bytes"),
    (["ledger", "--from", "2026-01-01", "--to", "9999-12-31"], 2, "--to 9999-12-31 is outside"),
    (["ledger", "--from", "0001-01-01", "--to", "2026-01-01"], 2, "--from 0001-01-01 is out"),
    (["ledger", "--from", "{tomorrow}", "--to", "{tomorrow}", "--idle-policy", "none"], 0, None),
    (["queues", "--from", "2026-01-01", "--to", "9999-12-31"], 2, "--to 9999-12-31 is outside"),
    (["seal", "--until", "9999-12-31"], 2, "--until 9999-12-31 is outside the days"),
    (["why", "cost", "--month", "0001-01"], 2, "--month 0001-01 is outside the months"),
    (["fragmentation", "--window-days", "nan"], 2, "--window-days nan must be more than 0"),
    (["fragmentation", "--window-days", "inf"], 2, "--window-days inf must be more than 0"),
    (["fragmentation", "--window-days", "1e9"], 2, "--window-days 1e+09 must be more than 0"),
    (["collect", "slurm", "--once", "--sacct", "'"], 2, "is not a command line (No closing"),
    (
        ["collect", "kubernetes", "--once", "--kubeconfig", "{files}/kube-list.yaml"],
        2,
        "kube-list.yaml is not a kubeconfig",
    ),
    (
        [
            *("import", "alibaba-v2023", "--start", "2026-12-01T00:00:00+00:00"),
            *("--nodes", "{files}/nodes.csv", "--pods", "{files}/garbage"),
        ],
        2,
        "garbage lacks the columns name,",
    ),
    (_demo("--days", "nan"), 2, "simulator.days nan must be a number of days"),
    (_demo("--days", "1e308"), 2, "simulator.days 1e+308 is more than"),
    (_demo("--days", "0", "--seed", "-1"), 2, "simulator.seed -1 must be within 0-4294967295"),
    (_demo("--days", "0", "--seed", str(2**64)), 2, "must be within 0-4294967295"),
    (_demo("--gpus", str(2**63 - 8)), 2, "is more than the simulator runs (100000)"),
    (_demo("--days", "36"), 2, "days 36 is more than warehouse.raw_retention_days (35)"),
]
#: Command lines that ended in one line, but one that did not name what was typed, or said
#: something else: (argv, status, what the last line of stderr holds).
UNCLEAR = [
    (["--config", "{files}/huge.toml", "db", "status"], 2, "is more than 36500 days"),
    (["sql", "SELECT '\udcff'"], 2, "argument \"SELECT '\\udcff'\" is not UTF-8 text"),
    (["queues", "--from", "2026-12-02", "--to", "2026-12-01"], 2, "the window is empty: --to"),
    (["why", "cost", "--month", "1970-01"], 2, "there is none before it to compare with"),
    (["fragmentation", "--at", "0001-01-01"], 2, "--at '0001-01-01' is outside the times"),
    (["collect", "slurm", "--once", "--sacct", ""], 2, "--sacct is empty: give the sacct"),
]


@pytest.mark.parametrize(
    ("argv", "status", "needle"),
    CRASHED + UNCLEAR,
    ids=[" ".join(argv)[:48] for argv, _, _ in CRASHED + UNCLEAR],
)
def test_what_the_fuzzing_found(
    cli: Worker, places: Places, argv: list[str], status: int, needle: str | None
) -> None:
    names = {
        "{files}": str(places.root / "files"),
        "{root}": str(places.root),
        "{tomorrow}": (_today() + dt.timedelta(days=1)).isoformat(),
    }
    for name, value in names.items():
        argv = [a.replace(name, value) for a in argv]
    if "--data-dir" not in argv:
        argv += ["--data-dir", places.data]
    got = cli(argv)
    check(argv, got)
    assert got.status == status, got
    if needle is not None:
        assert needle in _lines(got.stderr)[-1], got.stderr
