"""dcgm-exporter source over HTTP: real bodies scraped from a local server, counter resets
across scrapes, retries, timeouts and down targets.

Every ``tests/data/dcgm/*.prom`` (real exporter bodies, see tests/data/README.md) is
served by a local ``http.server`` on 127.0.0.1 and scraped for real with ``requests``. Parsing
itself (label spellings, MIG, blanks, hostile input) is tested in ``test_dcgm.py``.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import http.server
import random
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from collector.dcgm.collector import FIELDS, DcgmCollector
from collector.dcgm.promtext import TextFetcher
from collector.records import SAMPLE_SCHEMA, GpuSample, samples_frame
from warehouse.client import Warehouse
from warehouse.ingest.checks import check_gpu
from warehouse.ingest.writer import Ingestor

DATA = Path(__file__).parent / "data" / "dcgm"
FILES = sorted(p.name for p in DATA.glob("*.prom"))
NOW = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
MIB = 2**20
H100 = "NVIDIA H100 80GB HBM3"

#: file -> (samples, gpu_model, node, memory_total MiB or None). Memory totals are the
#: MANIFEST's card sizes; the old A100 exporter has no FB_RESERVED, so used + free only.
EXPECTED = {
    "a100_40gb_mig_1g5gb__nvidia_cloud-native-docs.prom": (2, "", "ub20-a100-k8s", 40535),
    "h100_80gb_hbm3_x8_podlabels__nvidia_aicr@156a357.prom": (
        8,
        H100,
        "ip-10-0-171-111.ec2.internal",
        None,
    ),
    "h100_80gb_hbm3_x8_podlabels__nvidia_aicr@19edc95.prom": (
        8,
        H100,
        "ip-100-64-147-149.ec2.internal",
        None,
    ),
    "l40s_upcloud__cncf_k8s-ai-conformance.prom": (1, "NVIDIA L40S", "gpu1-wl8sg", 46067),
    "l4_kops__cncf_k8s-ai-conformance.prom": (1, "NVIDIA L4", "i-030791dc5a37cd257", 23033),
    "readme_blank_sentinel__nvidia_cloud-native-docs.prom": (1, "", "127.0.0.1", None),
    "t4_ericsson-ccd__cncf_k8s-ai-conformance.prom": (1, "Tesla T4", "cp-bm14r7", 15358),
    "t4_rafay__cncf_k8s-ai-conformance.prom": (1, "Tesla T4", "ip-10-200-3-41", 15359),
    "vgpu_grid_a100-10c_vks__cncf_k8s-ai-conformance.prom": (
        1,
        "GRID A100-10C",
        "conformance-test-np1-qcqc8-bpdtl-wv2gs",
        10239,
    ),
    "vgpu_grid_a100-40c_vks__cncf_k8s-ai-conformance.prom": (
        1,
        "GRID A100-40C",
        "test-ai-1-node-pool-40c-d5ds8-br9r6-9tb2c",
        40959,
    ),
}


def read(name: str) -> str:
    return (DATA / name).read_text()


# --------------------------------------------------------------------------- local server


@dataclasses.dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0  # before the headers
    trickle_s: float = 0.0  # between single body bytes


class Stub:
    """Routes for the local server: path -> function(hit number) -> Reply."""

    def __init__(self) -> None:
        self.routes: dict[str, Callable[[int], Reply]] = {}
        self.hits: collections.Counter[str] = collections.Counter()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def serve(self, path: str, body: str | bytes, status: int = 200) -> str:
        data = body.encode() if isinstance(body, str) else body
        self.routes[path] = lambda _n: Reply(status, data)
        return self.url(path)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        stub = self.server.stub
        with stub.lock:
            n = stub.hits[self.path]
            stub.hits[self.path] += 1
        route = stub.routes.get(self.path)
        reply = route(n) if route else Reply(404, b"not found")
        if reply.delay_s and stub.stop.wait(reply.delay_s):
            return
        self.send_response(reply.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if not reply.trickle_s:
            self.wfile.write(reply.body)
            return
        for i in range(len(reply.body)):
            self.wfile.write(reply.body[i : i + 1])
            self.wfile.flush()
            if stub.stop.wait(reply.trickle_s):
                return

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads: nothing left open

    def __init__(self, stub: Stub):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stub = stub

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the client hung up on purpose (timeout tests)


@pytest.fixture
def stub() -> Iterator[Stub]:
    s = Stub()
    server = _Server(s)
    s.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield s
    s.stop.set()
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def collector(*targets: str, **kw: object) -> DcgmCollector:
    kw.setdefault("timeout_s", (1.0, 2.0))
    kw.setdefault("sleep", lambda _s: None)
    return DcgmCollector(list(targets), "test-cluster", **kw)  # type: ignore[arg-type]


def scrape_file(stub: Stub, name: str) -> tuple[list[GpuSample], DcgmCollector]:
    url = stub.serve("/" + name, read(name))
    with collector(url) as c:
        batch = c.collect(NOW)
    assert list(batch.rejects) == []
    assert c.failures == {url: 0}
    return list(batch.samples), c  # type: ignore[arg-type]


# --------------------------------------------------------------------------- real bodies


def test_every_body_listed_is_in_the_test_data() -> None:
    assert set(FILES) == set(EXPECTED)


@pytest.mark.parametrize("name", FILES)
def test_real_body_scraped_over_http(stub: Stub, name: str) -> None:
    samples, c = scrape_file(stub, name)
    count, model, node, total_mib = EXPECTED[name]
    assert len(samples) == count
    url = stub.url("/" + name)
    for s in samples:
        assert s.cluster == "test-cluster" and s.source == f"dcgm:{url}" and s.ts == NOW
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", s.gpu_uuid)
        assert s.gpu_model == model and s.node == node and s.vendor == "nvidia"
    whole = [s for s in samples if not s.mig_instance]
    assert [s.gpu_index for s in whole] == list(range(len(whole)))
    assert len({(s.gpu_uuid, s.mig_instance) for s in samples}) == len(samples)
    if total_mib is not None:
        assert all(abs(s.memory_total_bytes - total_mib * MIB) <= MIB for s in whole)
        assert all(0 <= s.memory_used_bytes <= s.memory_total_bytes for s in whole)
    else:
        assert all(s.memory_total_bytes is None for s in whole)
    # Every line of a metric we do not map was counted, none silently vanished.
    unmapped = [
        ln.split("{")[0]
        for ln in read(name).splitlines()
        if ln and not ln.startswith("#") and ln.split("{")[0] not in FIELDS
    ]
    assert c.stats[url].unknown_lines == len(unmapped)
    frame = samples_frame(samples)
    assert frame.schema == SAMPLE_SCHEMA and frame.height == count


@pytest.mark.parametrize("name", [n for n in FILES if "h100" in n])
def test_h100_exactly_one_gpu_per_node_has_pod_labels(stub: Stub, name: str) -> None:
    samples, _ = scrape_file(stub, name)
    held = [s for s in samples if s.pod]
    assert len(held) == 1 and len(samples) - len(held) == 7
    assert held[0].namespace == "dynamo-workload" and held[0].container == "main"
    assert held[0].pod.startswith("vllm-agg-0-vllmdecodeworker-")
    assert all(s.namespace == s.container == s.job_id == "" for s in samples if not s.pod)
    assert all(s.power_watts is not None and s.power_watts > 60 for s in samples)


@pytest.mark.parametrize("name", [n for n in FILES if n.startswith("vgpu")])
def test_vgpu_has_no_power(stub: Stub, name: str) -> None:
    (s,), _ = scrape_file(stub, name)
    assert s.power_watts is None and s.energy_millijoules is None
    assert s.gpu_util_ratio == 0.0 and s.sm_clock_mhz == 1410
    assert s.gpu_uuid.endswith("00000000")


@pytest.mark.parametrize("name", FILES)
def test_real_body_gives_the_inventory_of_its_gpus(stub: Stub, name: str) -> None:
    """The first scrape carries a valid inventory row for every GPU (and MIG instance) it
    samples, from the labels; a second scrape of the same body carries none."""
    url = stub.serve("/" + name, read(name))
    body = read(name)
    with collector(url, pool="p1") as c:
        first, again = c.collect(NOW), c.collect(NOW + dt.timedelta(seconds=10))
    samples, rows = list(first.samples), list(first.gpus)
    assert list(again.gpus) == [] and len(again.samples) == len(samples)
    assert {(r.cluster, r.gpu_uuid) for r in rows} == {(s.cluster, s.gpu_uuid) for s in samples}
    by_key = {(s.gpu_uuid, s.mig_instance): s for s in samples}
    for r in rows:
        s = by_key[(r.gpu_uuid, r.mig_instance)]
        assert check_gpu(r) is None, r
        assert (r.node, r.gpu_index, r.gpu_model, r.mig_profile) == (
            s.node,
            s.gpu_index,
            s.gpu_model,
            s.mig_profile,
        )
        assert (r.pool, r.source, r.ts, r.memory_total_bytes) == (
            "p1",
            f"dcgm:{url}",
            NOW,
            s.memory_total_bytes,
        )
        assert bool(r.pci_bus_id) == ("pci_bus_id=" in body)
        assert bool(r.driver_version) == ("DCGM_FI_DRIVER_VERSION=" in body)
    for uuid in {r.gpu_uuid for r in rows}:  # a GPU's rows add up to the whole GPU
        assert sum(r.capacity_fraction for r in rows if r.gpu_uuid == uuid) == pytest.approx(1)


def test_inventory_is_sent_again_when_the_labels_change(stub: Stub) -> None:
    name = "h100_80gb_hbm3_x8_podlabels__nvidia_aicr@156a357.prom"
    bodies = [read(name), read(name), read(name).replace("580.105.08", "590.48.01")]
    stub.routes["/m"] = lambda n: Reply(body=bodies[min(n, 2)].encode())
    with collector(stub.url("/m")) as c:
        sent = [list(c.collect(NOW + dt.timedelta(seconds=10 * i)).gpus) for i in range(4)]
    assert [len(rows) for rows in sent] == [8, 0, 8, 0]  # first sight, same, driver update, same
    assert {r.driver_version for r in sent[2]} == {"590.48.01"}
    assert {r.ts for r in sent[2]} == {NOW + dt.timedelta(seconds=20)}


def test_inventory_left_to_another_source(stub: Stub) -> None:
    url = stub.serve("/t4", read("t4_rafay__cncf_k8s-ai-conformance.prom"))
    with collector(url, inventory=False) as c:
        batch = c.collect(NOW)
    assert len(batch.samples) == 1 and list(batch.gpus) == []


def test_dcgm_only_scrapes_are_written_not_quarantined(stub: Stub, wh: Warehouse) -> None:
    """A deployment with dcgm-exporter and no NVML agent: its samples find their GPUs."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=5)
    urls = [stub.serve("/" + n, read(n)) for n in FILES if n.startswith(("a100", "h100"))]
    with collector(*urls, pool="p1") as c:
        batches = [c.collect(now + dt.timedelta(seconds=10 * i)) for i in range(3)]
    assert [len(b.gpus) for b in batches] == [2 + 8 + 8, 0, 0]
    first = Ingestor(wh, 35).write(batches[0])
    later = Ingestor(wh, 35)  # a restarted writer: the GPUs are known from the warehouse
    rest = [later.write(b) for b in batches[1:]]
    assert not first.quarantined and not any(r.quarantined for r in rest)
    assert first.written["gpu_samples"] + sum(r.written["gpu_samples"] for r in rest) == 3 * 18
    assert wh.rows(f"SELECT count() FROM {wh.database}.gpus FINAL") == [(18,)]
    assert wh.rows(f"SELECT count() FROM {wh.database}.quarantine") == [(0,)]


# --------------------------------------------------------------------------- HTTP behaviour


def test_energy_counter_reset_is_kept_and_counted(stub: Stub) -> None:
    readings = [1_000_000, 400, 900]
    stub.routes["/m"] = lambda n: Reply(
        body=(
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="GPU-a"}} {readings[n]}\n'
        ).encode()
    )
    with collector(stub.url("/m")) as c:
        got = [c.collect(NOW).samples[0].energy_millijoules for _ in readings]
    assert got == readings
    assert c.stats[stub.url("/m")].counter_resets == 1


def test_retries_with_backoff_then_success(stub: Stub) -> None:
    body = read("l4_kops__cncf_k8s-ai-conformance.prom").encode()
    stub.routes["/flaky"] = lambda n: Reply(503) if n < 2 else Reply(body=body)
    sleeps: list[float] = []
    url = stub.url("/flaky")
    with collector(
        url, retries=3, backoff_s=0.1, backoff_max_s=1.0, sleep=sleeps.append, rng=random.Random(7)
    ) as c:
        batch = c.collect(NOW)
    assert len(batch.samples) == 1 and stub.hits["/flaky"] == 3
    assert c.stats[url].retries == 2 and c.failures[url] == 0 and c.last_error[url] == ""
    assert 0.05 <= sleeps[0] <= 0.1 and 0.1 <= sleeps[1] <= 0.2


@pytest.mark.parametrize(
    ("reply", "attempts", "error"),
    [
        (Reply(503), 3, "HTTP 503"),
        (Reply(429), 3, "HTTP 429"),
        (Reply(404), 1, "HTTP 404"),
        (Reply(body=b"# " + b"x" * (2 * MIB) + b"\n"), 1, "body over"),
    ],
)
def test_which_failures_are_retried(stub: Stub, reply: Reply, attempts: int, error: str) -> None:
    stub.routes["/t"] = lambda n: reply
    url = stub.url("/t")
    with collector(url, retries=2, max_body_bytes=MIB) as c:
        assert len(c.collect(NOW)) == 0
    assert stub.hits["/t"] == attempts and c.stats[url].retries == attempts - 1
    assert c.failures[url] == 1 and error in c.last_error[url]
    assert (f"after {attempts} attempts" in c.last_error[url]) == (attempts > 1)


@given(st.integers(0, 40), st.integers(0, 2**32))
def test_backoff_is_exponential_capped_and_jittered(attempt: int, seed: int) -> None:
    fetcher = TextFetcher(
        requests.Session(), backoff_s=0.2, backoff_max_s=2.0, rng=random.Random(seed)
    )
    ceiling = min(2.0, 0.2 * 2**attempt)
    assert ceiling / 2 <= fetcher.backoff(attempt) <= ceiling
    fetcher.session.close()


def test_read_timeout(stub: Stub) -> None:
    stub.routes["/slow"] = lambda n: Reply(body=b"x 1\n", delay_s=3.0)
    url = stub.url("/slow")
    start = time.monotonic()
    with collector(url, timeout_s=(1.0, 0.3), retries=0) as c:
        assert len(c.collect(NOW)) == 0
    assert time.monotonic() - start < 2.0
    assert "ReadTimeout" in c.last_error[url] and c.failures[url] == 1


def test_trickling_server_hits_the_deadline(stub: Stub) -> None:
    stub.routes["/drip"] = lambda n: Reply(body=b"#" * 200 + b"\n", trickle_s=0.05)
    url = stub.url("/drip")
    start = time.monotonic()
    with collector(url, retries=0, deadline_s=0.4) as c:
        c.collect(NOW)
    assert time.monotonic() - start < 2.0
    assert "not complete within" in c.last_error[url]


def test_down_target_does_not_stop_the_others(stub: Stub, closed_port_url: str) -> None:
    good = stub.serve("/t4", read("t4_rafay__cncf_k8s-ai-conformance.prom"))
    with collector(closed_port_url, good, retries=1) as c:
        first = c.collect(NOW)
        second = c.collect(NOW)
    assert len(first.samples) == len(second.samples) == 1
    assert first.samples[0].source == f"dcgm:{good}"
    down = c.stats[closed_port_url]
    assert down.failures == 2 and down.consecutive_failures == 2 and down.retries == 2
    assert "ConnectionError" in c.last_error[closed_port_url]
    assert c.failures[good] == 0 and c.stats[good].last_success == NOW


def test_slow_targets_scraped_in_parallel(stub: Stub) -> None:
    body = read("l4_kops__cncf_k8s-ai-conformance.prom").encode()
    for path in ("/a", "/b", "/c"):
        stub.routes[path] = lambda n: Reply(body=body, delay_s=0.5)
    start = time.monotonic()
    with collector(stub.url("/a"), stub.url("/b"), stub.url("/c"), max_workers=3) as c:
        batch = c.collect(NOW)
    assert time.monotonic() - start < 1.2  # not 3 x 0.5 s
    assert [s.source for s in batch.samples] == [f"dcgm:{stub.url(p)}" for p in ("/a", "/b", "/c")]


def test_invalid_url_is_a_failure_not_a_crash() -> None:
    with collector("not a url", retries=3) as c:
        c.collect(NOW)
    assert c.failures["not a url"] == 1 and c.stats["not a url"].retries == 0


def test_collect_keeps_its_spool_in_the_data_directory(
    stub: Stub, tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    """`gpuledger collect dcgm URL` (not --once) spools under the data directory, never in the
    directory it was started from."""
    url = stub.serve("/metrics", read(FILES[0]))
    data_dir, cwd = tmp_path / "data", tmp_path / "cwd"
    cwd.mkdir()
    env = {**cli_env, "GPULEDGER_AGENT__STATUS_PORT": "0", "GPULEDGER_AGENT__INTERVAL_S": "0.2"}
    proc = subprocess.Popen(
        [*gpuledger_cmd, "collect", "dcgm", url, "--data-dir", str(data_dir)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("gpuledger agent: dcgm every"), proc.stderr
        deadline = time.monotonic() + 60
        while stub.hits["/metrics"] < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert stub.hits["/metrics"] >= 2
    assert list(cwd.iterdir()) == []
    assert (data_dir / "agent-spool").is_dir()


def test_collect_once_answers_with_what_one_scrape_read(
    stub: Stub, tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    """`collect dcgm URL --once` prints what the exporter gave and exits 0; with a second
    target that is down, the same read is a failure naming that target."""
    url = stub.serve("/metrics", read(FILES[0]))
    base = [*gpuledger_cmd, "collect", "dcgm", url, "--once", "--data-dir", str(tmp_path)]
    ok = subprocess.run(base, env=cli_env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert int(ok.stdout.split()[0]) > 0 and ok.stdout.split()[1] == "samples,"
    down = "http://127.0.0.1:9/metrics"
    bad = subprocess.run(
        [*base[:6], down, *base[6:]], env=cli_env, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 1 and int(bad.stdout.split()[0]) > 0
    assert bad.stderr.strip().startswith(f"gpuledger: 1 target(s) answered nothing: {down}")
