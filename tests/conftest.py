"""Test tiers: unit tests need nothing; ``integration`` tests use the real embedded engine.

The engine allows one data directory per process, so the whole session shares one, and
every test that writes gets a fresh database in it (``wh``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import requests
from cli_runner import Cli, Worker

from warehouse.client import Warehouse, connect
from warehouse.migrate import RenderOptions, migrate

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"  # everything the suite reads (see tests/data/README.md)
_counter = itertools.count()


#: The modules that take longest (`make test`'s durations), run first: with one module per
#: worker at a time (``--dist loadfile``), a long one taken up last keeps the others waiting.
SLOWEST_FIRST = (
    "test_pages_browser.py",
    "test_cli.py",
    "test_ledger_seal.py",
    "test_sql_console.py",
    "test_reports.py",
    "test_pages_http.py",
    "test_cli_fuzz.py",
    "test_ledger.py",
    "test_advice_api.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "wh" in getattr(item, "fixturenames", ()) or "engine" in getattr(
            item, "fixturenames", ()
        ):
            item.add_marker(pytest.mark.integration)
    rank = {name: n for n, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    """The session's embedded engine (memory-capped), on a fresh data directory."""
    path = tmp_path_factory.mktemp("engine")
    wh = connect(f"chdb://{path}", "gpuledger", max_memory_bytes=4 * 2**30)
    yield wh
    wh.close()


@contextlib.contextmanager
def fresh_database(engine: Warehouse) -> Iterator[Warehouse]:
    """A new, migrated database in ``engine``, dropped afterwards (for fixtures of any scope)."""
    database = f"t{os.getpid()}_{next(_counter)}"
    fresh = Warehouse(engine.client, database, engine.dsn)
    copy_schema(engine, _migrated(engine), database)
    yield fresh
    engine.command(f"DROP DATABASE IF EXISTS {database} SYNC")


_templates: dict[int, str] = {}  # id(engine's client) -> its migrated template database


def _migrated(engine: Warehouse) -> str:
    """A database of ``engine`` migrated once per process, whose schema the tests' databases
    copy: its CREATE statements as the engine shows them cost a fifth of running every
    migration (test_migrations checks that the copy and a migration are the same)."""
    key = id(engine.client)
    if key not in _templates:
        name = f"tpl{os.getpid()}_{next(_counter)}"
        migrate(Warehouse(engine.client, name, engine.dsn), RenderOptions(database=name))
        _templates[key] = name
    return _templates[key]


def copy_schema(engine: Warehouse, source: str, database: str) -> None:
    """Create ``database`` with the tables and views of ``source`` (materialised views after
    the tables they read and write) and its record of applied migrations."""
    engine.command(
        engine.rows("SHOW CREATE DATABASE {db:Identifier}", {"db": source})[0][0].replace(
            source, database, 1
        )
    )
    tables = engine.rows(
        "SELECT name FROM system.tables WHERE database = {db:String} "
        "ORDER BY engine = 'MaterializedView', name",
        {"db": source},
    )
    for (name,) in tables:
        create = engine.rows(
            "SHOW CREATE TABLE {db:Identifier}.{t:Identifier}", {"db": source, "t": name}
        )[0][0]
        engine.command(create.replace(f"{source}.", f"{database}."))
    engine.command(
        f"INSERT INTO {database}.schema_migrations SELECT * FROM {source}.schema_migrations"
    )


@pytest.fixture
def wh(engine: Warehouse) -> Iterator[Warehouse]:
    """A fresh, migrated database in the session's engine."""
    with fresh_database(engine) as fresh:
        yield fresh


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """Environment for running the CLI in a subprocess: no GPULEDGER_* from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture
def gpuledger_cmd() -> list[str]:
    return [sys.executable, "-m", "gpuledger.cli"]


@pytest.fixture(scope="session")
def _cli_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    worker = Worker(tmp_path_factory.mktemp("cli"), env)
    yield worker
    worker.stop()


@pytest.fixture
def run_cli(_cli_worker: Worker) -> Cli:
    """`gpuledger ARGS` run by this test process's CLI worker (tests/cli_runner.py): a
    CompletedProcess as :func:`subprocess.run` would give it, without a process's start-up."""
    return Cli(_cli_worker)


SqlRows = Callable[[str, "Path | str"], list[list[str]]]


@pytest.fixture
def sql_rows(run_cli: Cli, cli_env: dict[str, str]) -> SqlRows:
    """Run ``gpuledger sql QUERY --format csv --data-dir DIR`` (the data directory's owner
    must have stopped); the rows after the header, as lists of strings."""

    def run(query: str, data_dir: Path | str) -> list[list[str]]:
        argv = ("sql", query, "--format", "csv", "--data-dir", str(data_dir))
        got = run_cli(*argv, env=cli_env, timeout=120)
        assert got.returncode == 0, got.stderr[-2000:]
        return [line.split(",") for line in got.stdout.splitlines()[1:]]

    return run


def recent(anchor: dt.datetime, margin: dt.timedelta = dt.timedelta(days=2)) -> dt.datetime:
    """``anchor`` moved forward by whole weeks to between 9 and 2 days ago.

    The warehouse's TTLs run on the wall clock (rows older than the retention are dropped at
    insert), and the ledger stops windows at "now": fixtures dated in the past must move with
    the calendar. Whole weeks keep weekday and time of day, so simulated output is unchanged.
    """
    week = dt.timedelta(weeks=1)
    latest = dt.datetime.now(dt.UTC) - margin
    return anchor + max(0, (latest - anchor) // week) * week


def simulate(
    wh: Warehouse, *, cluster: str, days: float, gpus: int, seed: int, now: dt.datetime
) -> None:
    """Write a simulated cluster (``collector/simulator.py``) into ``wh`` through ingest, as
    ``gpuledger demo`` does, ending at ``now``."""
    from gpuledger.demo import DemoRun
    from gpuledger.settings import load_settings

    cfg = load_settings(
        env={},
        overrides={
            "simulator": {"days": days, "gpus": gpus, "seed": seed, "cluster": cluster},
            "warehouse": {"database": wh.database},
        },
    )
    DemoRun.start(wh, cfg, now=now)


#: When :func:`give_inventory` says the GPUs appeared: before any test's data.
INVENTORY_SINCE = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def give_inventory(
    wh: Warehouse, records: Any, ts: dt.datetime = INVENTORY_SINCE, pool: str = ""
) -> int:
    """Write an inventory row for every GPU that ``records`` name, so that their samples,
    processes and health rows are not quarantined as coming from an unknown GPU.

    ``records``: a sample frame, or records with ``cluster``, ``gpu_uuid`` (and optionally
    ``node``, ``gpu_index``, ``gpu_model``): samples, processes, health rows. One whole-GPU
    row per (cluster, gpu_uuid), as of ``ts``. Returns how many GPUs it wrote.
    """
    from collector.records import GpuInventory
    from warehouse.ingest.writer import Ingestor

    rows = records.to_dicts() if hasattr(records, "to_dicts") else [r._asdict() for r in records]
    gpus: dict[tuple[str, str], GpuInventory] = {}
    for r in rows:
        key = (r["cluster"], r["gpu_uuid"])
        if key in gpus or not all(key):
            continue
        gpus[key] = GpuInventory(
            ts=ts,
            cluster=key[0],
            pool=pool,
            node=r.get("node") or "n1",
            gpu_uuid=key[1],
            gpu_index=r["gpu_index"] if isinstance(r.get("gpu_index"), int) else 0,
            gpu_model=r.get("gpu_model") or "",
            memory_total_bytes=r.get("memory_total_bytes"),
            source="test",
        )
    Ingestor(wh, 36500).write_gpus(list(gpus.values()))
    return len(gpus)


# -- the Kubernetes collector against the fake API server (tests/k8s_fake.py) ---------------
@pytest.fixture
def fake() -> Iterator[Any]:
    """A fake Kubernetes API server on loopback (list and watch)."""
    from k8s_fake import FakeKubeApi

    with FakeKubeApi() as server:
        yield server


@pytest.fixture
def api(fake: Any) -> Iterator[Any]:
    """The official client, configured for ``fake``."""
    from kubernetes import client as k8s

    client = k8s.ApiClient(k8s.Configuration(host=fake.url))
    yield client
    client.close()


@pytest.fixture
def start(api: Any, fake: Any) -> Iterator[Callable[..., Any]]:
    """Start a collector (``k8s_helpers.make(api, **kw)``) in a thread; all are stopped, and
    must stop promptly, at the end of the test."""
    from k8s_helpers import Runner, make

    runners: list[Runner] = []

    def starter(**kw: Any) -> Runner:
        runner = Runner(make(api, **kw))
        runners.append(runner)
        runner.thread.start()
        fake.wait_for_watchers("pods")
        return runner

    yield starter
    for runner in runners:
        began = time.monotonic()
        runner.stop.set()
        runner.thread.join(5)
        assert not runner.thread.is_alive(), "run() did not stop"
        assert time.monotonic() - began < 2.0, "run() took too long to stop"


def idle_rule(**kw: Any) -> Any:
    """An IdleRule from the settings' flat names (idle_threshold_ratio, idle_min_duration_s)."""
    from warehouse.ledger import IdleRule

    return IdleRule(kw.pop("idle_threshold_ratio", 0.05), kw.pop("idle_min_duration_s", 1800))


def ledger_between(
    wh: Warehouse,
    start: dt.datetime,
    end: dt.datetime,
    *,
    now: dt.datetime | None = None,
    **kw: Any,
) -> Any:
    """compute_ledger over [start, end) with the settings' flat names; ``now`` defaults to the
    real clock, as the CLI's."""
    from warehouse.ledger import Window, compute_ledger

    flat = {k: kw.pop(k) for k in ("idle_threshold_ratio", "idle_min_duration_s") if k in kw}
    if "by" in kw:
        kw["group_by"] = kw.pop("by")
    return compute_ledger(
        wh, Window(start, end), now=now or dt.datetime.now(dt.UTC), idle=idle_rule(**flat), **kw
    )


def usage_between(
    wh: Warehouse,
    start: dt.datetime,
    end: dt.datetime,
    *,
    now: dt.datetime | None = None,
    **kw: Any,
) -> Any:
    """The ledger's usage rows of [start, end) (sealed days where they hold, by default)."""
    from warehouse.ledger.compute import usage_frame
    from warehouse.ledger.result import Window

    flat = {k: kw.pop(k) for k in ("idle_threshold_ratio", "idle_min_duration_s") if k in kw}
    return usage_frame(
        wh, Window(start, end), now=now or dt.datetime.now(dt.UTC), idle=idle_rule(**flat), **kw
    )


def make_token(cli: Cli, env: dict[str, str], data_dir: Path, cluster: str, *more: str) -> str:
    """An ingest token for ``cluster``, made as a user would: `gpuledger token create`."""
    argv = ("token", "create", "--cluster", cluster, *more, "--data-dir", str(data_dir))
    got = cli(*argv, env=env, timeout=60)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(
    gpuledger_cmd: list[str],
    env: dict[str, str],
    data_dir: Path,
    *,
    tls_ca: Path | None = None,
    log: Path | None = None,
) -> Iterator[str]:
    """A real `gpuledger serve` over ``data_dir`` on a free port of 127.0.0.1, once its
    /healthz answers (HTTPS checked against ``tls_ca`` when given): its base URL. Stopped at
    the end. What it prints goes to ``log`` (a failed callback's traceback), else to a file
    beside ``data_dir`` that a failure to start quotes. A port another test's process took
    between ``free_port`` and the bind is tried again on another."""
    log = log or data_dir.parent / f"serve-{data_dir.name}.log"
    for _ in range(3):
        port = free_port()
        with open(log, "wb") as out:  # the child keeps its own copy
            server = subprocess.Popen(
                [*gpuledger_cmd, "serve", "--port", str(port), "--data-dir", str(data_dir)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"{'https' if tls_ca else 'http'}://127.0.0.1:{port}"
        try:
            if _started(server, url, tls_ca):
                yield url
                return
            said = log.read_text(errors="replace")
            taken = f"cannot listen on 127.0.0.1:{port}" in said
            assert taken, f"serve did not start: {said[-3000:]}"
        finally:
            server.terminate()
            server.wait(timeout=60)
    raise AssertionError("serve found no free port in three tries")


def _started(server: subprocess.Popen[bytes], url: str, tls_ca: Path | None) -> bool:
    """Whether ``server`` answers /healthz within 120 s (False: it ended first)."""
    deadline = time.monotonic() + 120
    while server.poll() is None:
        try:
            verify = str(tls_ca) if tls_ca else True
            if requests.get(f"{url}/healthz", verify=verify, timeout=5).status_code == 200:
                return True
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, "serve did not answer /healthz in 120 s"
        time.sleep(0.2)
    return False


# -- a served demo warehouse, for the pages' tests over HTTP and in the browser --------------
PASSWORD = "correct horse battery"


def names_in(text: str, names: frozenset[str]) -> set[str]:
    """Which of ``names`` appear in ``text`` as whole words (``product`` in
    ``product/search``, not in ``production``)."""
    return {n for n in names if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)}


@dataclasses.dataclass(frozen=True)
class Site:
    """A real `gpuledger serve` over a small simulated cluster, with two people who log in:
    ``manager`` (role manager) and ``lead`` (role ``tenant:<org>``), both with PASSWORD."""

    url: str
    data_dir: Path
    cmd: list[str]
    env: dict[str, str]
    log: Path
    org: str  # the lead's org
    #: every other tenant's names (orgs, projects, keys, display names, their users):
    #: none may reach the lead
    others: frozenset[str]
    other_orgs: tuple[str, ...]
    #: the ``<variable>`` values of templated pages (``/gpu/<uuid>``)
    template_values: dict[str, str]
    days: tuple[str, str]  # whole days of data: first, last
    manager: str = "mgr"
    lead: str = "lead"

    def cli(self, *args: str, stdin: str = "") -> str:
        """Run `gpuledger ARGS --data-dir DIR` (a read command is answered by the server)."""
        got = subprocess.run(
            [*self.cmd, *args, "--data-dir", str(self.data_dir)],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert got.returncode == 0, got.stderr[-2000:]
        return got.stdout


@pytest.fixture(scope="session")
def _site_data(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The simulated site of :func:`_build_site`, built once per test session and copied into
    each worker that serves it (a data directory has one owner process at a time): not served
    yet."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers'
    built, described = shared / "site-built", shared / "site-built.json"
    with open(shared / "site-built.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker builds, the others wait for it
        if not described.exists():
            site = _build_site(built)
            kept = {
                "org": site.org,
                "others": sorted(site.others),
                "other_orgs": list(site.other_orgs),
                "template_values": site.template_values,
                "days": list(site.days),
            }
            described.write_text(json.dumps(kept))
    kept = json.loads(described.read_text())
    root = tmp_path_factory.mktemp("site")
    shutil.copytree(built / "data", root / "data", symlinks=True)  # the engine's links are relative
    return Site(
        "",
        root / "data",
        _SITE_CMD,
        _site_env(),
        root / "serve.log",
        kept["org"],
        frozenset(kept["others"]),
        tuple(kept["other_orgs"]),
        kept["template_values"],
        (kept["days"][0], kept["days"][1]),
    )


_SITE_CMD = [sys.executable, "-m", "gpuledger.cli"]


def _site_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["PYTHONPATH"] = str(ROOT)
    # The pages are tested here, the periodic jobs and the webhook elsewhere: a server left
    # running them beside the other tests took a fifth of the machine.
    env |= {
        "GPULEDGER_ALERTS__INTERVAL_S": "0",
        "GPULEDGER_SCHEDULER__PROPOSE_INTERVAL_S": "0",
        "GPULEDGER_ADMISSION__ENABLED": "false",
    }
    return env


def _build_site(root: Path) -> Site:
    """32 simulated GPUs over 3 days (`gpuledger demo --no-serve`) in ``root``/data, with the
    alerts of the moment recorded (`gpuledger alerts check`). The lead's org is the one with
    the most jobs."""
    data = root / "data"
    site = Site(
        "", data, _SITE_CMD, _site_env(), root / "serve.log", "", frozenset(), (), {}, ("", "")
    )
    site.cli("demo", "--days", "3", "--gpus", "32", "--seed", "7", "--no-serve")

    held = json.loads(
        site.cli(
            "sql",
            "SELECT a.org AS org, a.project AS project, a.tenant AS tenant, a.user AS user, "
            "count() AS held, argMin(a.gpu_uuid, a.start_ts) AS gpu, "
            "any(t.display_name) AS display_name FROM gpuledger.allocations AS a "
            "LEFT JOIN gpuledger.tenants AS t ON t.tenant = a.tenant "
            "GROUP BY org, project, tenant, user ORDER BY org, project, user",
            "--format",
            "json",
        )
    )
    per_org: dict[str, int] = {}
    for r in held:
        per_org[r["org"]] = per_org.get(r["org"], 0) + int(r["held"])
    org = max(sorted(per_org), key=lambda o: per_org[o])
    mine = {r["user"] for r in held if r["org"] == org}
    names = {
        name
        for r in held
        if r["org"] != org
        for name in (r["org"], r["project"], r["tenant"], r["display_name"], r["user"])
        if name not in mine
    }
    uuid = next(r["gpu"] for r in held if r["org"] == org)  # a GPU the lead's org held
    last = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    days = ((last - dt.timedelta(days=1)).isoformat(), last.isoformat())
    site.cli("user", "add", "mgr", "--role", "manager", "--password-stdin", stdin=PASSWORD)
    site.cli("user", "add", "lead", "--role", f"tenant:{org}", "--password-stdin", stdin=PASSWORD)
    site.cli("alerts", "check")  # what serve's alert job would have recorded by now
    return dataclasses.replace(
        site,
        org=org,
        others=frozenset(n for n in names if n),
        other_orgs=tuple(sorted(o for o in per_org if o != org)),
        template_values={"uuid": uuid},
        days=days,
    )


@pytest.fixture(scope="module")
def demo_site(_site_data: Site) -> Iterator[Site]:
    """The simulated site (``_site_data``) served by `gpuledger serve` while a module's tests
    run: stopped when they end, not at the end of the session."""
    with serving(_site_data.cmd, _site_data.env, _site_data.data_dir, log=_site_data.log) as url:
        yield dataclasses.replace(_site_data, url=url)


@contextlib.contextmanager
def refused(*reads: tuple[object, str]) -> Iterator[None]:
    """Each ``(module, name)`` raising AssertionError inside the block: an answer that should
    come from what a live tail kept shows that it asks none of them."""
    with contextlib.ExitStack() as stack:
        for module, name in reads:
            stack.enter_context(mock.patch.object(module, name, side_effect=AssertionError(name)))
        yield


def eventually(condition: Callable[[], object], timeout: float = 5.0, what: str = "it") -> None:
    """Wait until ``condition()`` holds (a thread or a process reaching a state), failing the
    test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.005)
