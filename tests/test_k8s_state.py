"""The Kubernetes collector's state file (``collector.kubernetes.state``): restarts re-emit nothing.

Each test runs the real client against the fake API server, stops the collector, and starts a
new one on the same state directory, as a restarted ``gpuledger collect kubernetes`` would.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SqlRows
from k8s_fake import FakeKubeApi
from k8s_helpers import (
    NOW,
    Runner,
    admitted,
    at,
    ended,
    job_pod,
    make,
    node,
    pod,
    running,
    workload,
)
from kubernetes import client as k8s

from collector.kubernetes.collector import GAP_REASON
from collector.kubernetes.state import StateFile
from gpuledger.collect_commands import _source
from gpuledger.settings import SettingsError, load_settings


class Session:
    """One collector after another on the same state directory; every event they emitted."""

    def __init__(self, fake: FakeKubeApi, api: k8s.ApiClient, state_dir: Path):
        self.fake, self.api, self.state_dir = fake, api, state_dir
        self.runs: list[Runner] = []

    def start(self, **kw: Any) -> Runner:
        runner = Runner(make(self.api, state_dir=self.state_dir, state_save_interval_s=0.05, **kw))
        self.runs.append(runner)
        runner.thread.start()
        self.fake.wait_for_watchers("pods")
        return runner

    def stop(self) -> None:
        runner = self.runs[-1]
        runner.stop.set()
        runner.thread.join(5)
        assert not runner.thread.is_alive()

    @property
    def events(self) -> list[Any]:
        return [e for r in self.runs for e in r.events]


@pytest.fixture
def session(fake: FakeKubeApi, api: k8s.ApiClient, tmp_path: Path) -> Iterator[Session]:
    s = Session(fake, api, tmp_path / "state")
    yield s
    for runner in s.runs:
        runner.stop.set()
        runner.thread.join(5)


def counts(events: list[Any]) -> Counter[tuple[str, int, str]]:
    return Counter((e.job_id, e.attempt, e.event) for e in events)


def cluster_before_the_restart(fake: FakeKubeApi) -> None:
    fake.put("nodes", node())
    fake.put("pods", running(pod("busy")))
    fake.put("pods", ended(pod("done"), "Succeeded"))
    fake.put("pods", pod("waiting"))
    fake.put("workloads", workload())  # a suspended Job: reported from its Workload


def test_a_restart_resumes_the_watches_and_reports_nothing_twice(
    fake: FakeKubeApi, session: Session
) -> None:
    cluster_before_the_restart(fake)
    first = session.start()
    first.wait_events(9)  # busy 3, done 4, waiting 1, the Workload's job 1
    session.stop()
    saved = json.loads((session.state_dir / "kubernetes-c1.json").read_text())
    assert saved["resource_versions"]["pods"] == str(fake.resource_version)
    assert set(saved["pods"]) == {"uid-busy", "uid-done", "uid-waiting"}

    second = session.start()
    time.sleep(0.3)
    assert second.events == [] and second.batches == []  # not even the node inventory again
    assert len(fake.list_requests("pods")) == 1  # resumed: the second run did not list
    assert fake.watch_requests("pods")[-1]["resourceVersion"] == saved["resource_versions"]["pods"]

    fake.put("pods", running(pod("waiting")))
    fake.put("workloads", admitted(workload(), -5))
    second.wait_events(3)
    fake.put("pods", running(job_pod("train-aaaaa")))  # continues the job the first run began
    second.wait_events(4)
    time.sleep(0.1)
    assert sorted(counts(second.events)) == [
        ("job-train", 0, "admitted"),
        ("job-train", 0, "started"),
        ("uid-waiting", 0, "admitted"),
        ("uid-waiting", 0, "started"),
    ]
    assert set(counts(session.events).values()) == {1}
    assert {e.pool for e in second.events if e.job_id == "uid-waiting"} == {"h100-pool"}


@pytest.mark.parametrize("gap", ["watch", "410"])
def test_what_happened_while_stopped_is_reported_once(
    fake: FakeKubeApi, session: Session, gap: str
) -> None:
    """``watch``: the history since the saved resourceVersion is still there; ``410``: it is
    not, and a relist is reconciled against the saved state."""
    cluster_before_the_restart(fake)
    session.start().wait_events(9)
    session.stop()
    quiet = gap == "410"  # after a 410 only the relist tells what happened
    fake.put("pods", ended(pod("busy"), "Succeeded"), event=not quiet)
    fake.delete("pods", "ml-vision/busy", event=not quiet)  # finished, then went away
    fake.delete("pods", "ml-vision/waiting", event=not quiet)
    fake.put("pods", pod("new"), event=not quiet)
    fake.delete("workloads", "ml-vision/job-train-1a2b3", event=not quiet)
    if quiet:
        fake.expire("http")
    second = session.start()
    second.wait_events(4)
    time.sleep(0.2)
    got = sorted((e.job_id, e.event, e.reason, e.ts) for e in second.events)
    if gap == "watch":  # each pod's last state: the real ending
        assert got == [
            ("job-train", "cancelled", "deleted while queued", NOW),
            ("uid-busy", "finished", "", at(10)),
            ("uid-new", "submitted", "", at(0)),
            ("uid-waiting", "cancelled", "deleted while pending", NOW),
        ]
    else:  # gone without a trace: the gap's guess
        assert got == [
            ("job-train", "cancelled", GAP_REASON, NOW),
            ("uid-busy", "finished", GAP_REASON, NOW),
            ("uid-new", "submitted", "", at(0)),
            ("uid-waiting", "cancelled", GAP_REASON, NOW),
        ]
        assert second.collector.stats.relists_410 >= 1
    assert set(counts(session.events).values()) == {1}


def test_an_unreadable_state_file_is_set_aside(
    fake: FakeKubeApi, session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    fake.put("pods", pod("a"))
    path = session.state_dir / "kubernetes-c1.json"
    path.parent.mkdir()
    path.write_text('{"format": "gpuledger-kubernetes-state", "version": 1, "cluster": "c1", "po')
    with caplog.at_level(logging.WARNING, logger="collector.kubernetes.state"):
        runner = session.start()
        runner.wait_events(1)  # a fresh start: "a" is reported
    assert "is unreadable" in caplog.text and "starting afresh" in caplog.text
    assert path.with_name("kubernetes-c1.json.unreadable").exists()
    session.stop()
    assert json.loads(path.read_text())["pods"].keys() == {"uid-a"}  # and it saves a good one


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\x00\xff", "JSONDecodeError"),
        (b'{"format": "other"}', "not a gpuledger Kubernetes collector state file"),
        (b'{"format": "gpuledger-kubernetes-state", "version": 99}', "version 99"),
        (
            b'{"format": "gpuledger-kubernetes-state", "version": 1, "cluster": "c2"}',
            "the state of cluster 'c2'",
        ),
    ],
)
def test_state_files_that_cannot_be_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, why: str
) -> None:
    (tmp_path / "kubernetes-c1.json").write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert StateFile(tmp_path, "c1").load() is None
    assert why in caplog.text


def test_a_state_directory_that_cannot_be_written_does_not_stop_the_collector(
    fake: FakeKubeApi, api: k8s.ApiClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    fake.put("pods", pod("a"))
    with caplog.at_level(logging.WARNING):
        runner = Runner(make(api, state_dir=blocker))
        runner.thread.start()
        runner.wait_events(1)  # from the start: it runs without a state
        assert runner.collector.state is None
        runner.stop.set()
        runner.thread.join(5)
    assert "cannot use" in caplog.text and "not-a-dir" in caplog.text

    state = tmp_path / "state"
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        runner = Runner(make(api, state_dir=state, state_save_interval_s=0.01))
        runner.thread.start()
        runner.wait_events(1)
        with runner.collector._lock:  # no save starts meanwhile (they encode under the lock)
            time.sleep(0.05)  # and the one in flight, if any, is done
            shutil.rmtree(state)  # later on: the disk goes away under it
            state.write_text("")
        fake.put("pods", running(pod("a")))
        runner.wait_events(3)
        time.sleep(0.1)  # several saves fail meanwhile
        runner.stop.set()
        runner.thread.join(5)
    assert not runner.thread.is_alive()
    assert caplog.text.count("cannot save the Kubernetes collector state") == 1  # not per try


# -- settings: [kubernetes] state_dir ------------------------------------------------------------
def test_the_state_directory_comes_from_the_settings(fake: FakeKubeApi, tmp_path: Path) -> None:
    # by default in the data directory, never the working one
    default = load_settings(env={"GPULEDGER_WAREHOUSE__DATA_DIR": str(tmp_path / "d")})
    assert default.kubernetes_state_dir == tmp_path / "d" / "k8s-state"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "fake",
            }
        )
    )
    args = argparse.Namespace(source="kubernetes", kubeconfig=str(kubeconfig))
    env = {
        "GPULEDGER_KUBERNETES__STATE_DIR": str(tmp_path / "k8s"),
        "GPULEDGER_AGENT__SERVER_URL": "http://127.0.0.1:9",  # no warehouse for tenant rules
        "GPULEDGER_AGENT__CLUSTER": "prod-east",
    }
    collector = _source(load_settings(env=env), args)
    assert collector.state is not None
    assert collector.state.path == tmp_path / "k8s" / "kubernetes-prod-east.json"
    off = _source(load_settings(env=env | {"GPULEDGER_KUBERNETES__KEEP_STATE": "false"}), args)
    assert off.state is None


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("state_dir", "FILE", "is a file: give a directory"),
        ("state_save_interval_s", 0, "kubernetes.state_save_interval_s 0.0 must be positive"),
        ("state_dri", "/x", "Did you mean 'state_dir'"),
    ],
)
def test_bad_kubernetes_settings_are_refused(
    tmp_path: Path, key: str, value: object, needle: str
) -> None:
    if value == "FILE":
        value = str(tmp_path / "a-file")
        Path(value).write_text("")
    with pytest.raises(SettingsError) as err:
        load_settings(env={}, overrides={"kubernetes": {key: value}})
    assert needle in str(err.value)


def test_a_saved_resource_version_the_server_keeps_refusing_is_given_up(
    fake: FakeKubeApi, session: Session
) -> None:
    """As after a restore of the API server: watching from the saved version keeps failing
    (here HTTP 500, for a real server a 504 "too large resource version"): relist instead."""
    fake.put("pods", running(pod("busy")))
    session.start(kueue=False).wait_events(3)
    session.stop()
    fake.put("pods", ended(pod("busy"), "Succeeded"), event=False)
    fake.fail_next(500, 500, 500, kind="pods")
    second = session.start(kueue=False)
    second.wait_events(1)
    assert [(e.job_id, e.event) for e in second.events] == [("uid-busy", "finished")]
    assert len(fake.list_requests("pods")) == 2  # the first run's, and the relist


# -- the real process -------------------------------------------------------------------------
def _kubeconfig(fake: FakeKubeApi, path: Path) -> Path:
    cluster = {"name": "fake", "cluster": {"server": fake.url}}
    context = {"name": "fake", "context": {"cluster": "fake", "user": "u"}}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "u", "user": {}}],
                "contexts": [context],
                "current-context": "fake",
            }
        )
    )
    return path


def test_gpuledger_collect_kubernetes_restarted_writes_each_event_once(
    fake: FakeKubeApi,
    tmp_path: Path,
    gpuledger_cmd: list[str],
    cli_env: dict[str, str],
    sql_rows: SqlRows,
) -> None:
    """``gpuledger collect kubernetes`` into the embedded warehouse, stopped (SIGTERM) and
    started again: the second run writes only what changed, once."""
    state = tmp_path / "k8s-state"
    env = cli_env | {
        "GPULEDGER_KUBERNETES__STATE_DIR": str(state),
        "GPULEDGER_AGENT__CLUSTER": "c1",
        "GPULEDGER_AGENT__STATUS_HOST": "127.0.0.1",
        "GPULEDGER_AGENT__STATUS_PORT": "0",
    }
    data = ["--data-dir", str(tmp_path / "data")]
    collect = [*gpuledger_cmd, "collect", "kubernetes", *data]
    collect += ["--kubeconfig", str(_kubeconfig(fake, tmp_path / "kubeconfig"))]
    cluster_before_the_restart(fake)

    def run_until(done: Callable[[dict[str, Any]], bool]) -> None:
        proc = subprocess.Popen(collect, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
                assert time.monotonic() < deadline, "the collector did not get there"
                path = state / "kubernetes-c1.json"
                if path.exists() and done(json.loads(path.read_text())):
                    break
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()[-2000:]

    run_until(lambda s: s["pods"].keys() == {"uid-busy", "uid-done", "uid-waiting"})
    fake.put("pods", ended(pod("busy"), "Succeeded"))
    fake.put("workloads", admitted(workload(), -5))
    fake.put("pods", running(job_pod("train-aaaaa")))
    run_until(lambda s: "started" in s["pods"].get("uid-train-aaaaa", {}).get("done", ()))

    query = (
        "SELECT job_id, attempt, event, count() FROM gpuledger.job_events "
        "GROUP BY job_id, attempt, event ORDER BY job_id, attempt, event"
    )
    rows = sql_rows(query, data[1])
    assert {(job, event) for job, _, event, _ in rows} == {
        ("job-train", "submitted"),
        ("job-train", "admitted"),
        ("job-train", "started"),
        ("uid-busy", "submitted"),
        ("uid-busy", "admitted"),
        ("uid-busy", "started"),
        ("uid-busy", "finished"),
        ("uid-done", "submitted"),
        ("uid-done", "admitted"),
        ("uid-done", "started"),
        ("uid-done", "finished"),
        ("uid-waiting", "submitted"),
    }
    assert {n for *_, n in rows} == {"1"}, rows  # nothing twice across the restart


def test_a_second_collector_on_the_same_state_file_keeps_none(
    fake: FakeKubeApi, session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    fake.put("pods", pod("a"))
    first = session.start()
    first.wait_events(1)
    with caplog.at_level(logging.WARNING):
        second = session.start()
        second.wait_events(1)
    assert "another collector holds" in caplog.text
    assert first.collector.state is not None and second.collector.state is None
    session.stop()  # the second one
    session.runs[0].stop.set()
    session.runs[0].thread.join(5)
    third = session.start()  # the lock went with the first one
    time.sleep(0.2)
    assert third.collector.state is not None and third.events == []
