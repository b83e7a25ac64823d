"""The kubelet's pod-resources API: a real gRPC server on a unix socket answers List, the
client decodes it, and the agent's enricher labels samples with pods, namespaces and
containers — and keeps sampling, unlabelled, while the kubelet cannot be asked."""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import polars as pl
import pytest
from conftest import SqlRows, give_inventory, recent
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.kubernetes.podresources import (
    EGROUP,
    I32,
    I64,
    LEN,
    SGROUP,
    ContainerDevices,
    ContainerResources,
    GpuSlot,
    PodResources,
    PodResourcesClient,
    PodResourcesEnricher,
    PodResourcesError,
    ProtocolError,
    decode_list_response,
    encode_list_response,
    encode_pod,
    encode_varint,
    field_key,
    len_field,
    varint_field,
)
from collector.records import SAMPLE_SCHEMA, Batch, GpuInventory, GpuSample
from gpuledger.agent import make_pipeline
from gpuledger.settings import load_settings
from tests import nvml_stub
from warehouse.client import Warehouse
from warehouse.ingest.sink import WarehouseSink
from warehouse.ingest.writer import Ingestor

NOW = recent(dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC))
H0 = "GPU-11111111-2222-3333-4444-555555555555"
H1 = "GPU-66666666-7777-8888-9999-000000000000"
A100 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
MIG13 = "MIG-0e1d2c3b-4a59-6877-8695-a4b3c2d1e0f9"  # A100's GPU instance 13 (the NVML stub's)
MIG5 = "MIG-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"  # A100's GPU instance 5


def pod(namespace: str, name: str, *containers: tuple[str, str, tuple[str, ...]]) -> PodResources:
    """A pod whose containers each hold ``(container, resource, device ids)``."""
    return PodResources(
        name,
        namespace,
        tuple(ContainerResources(c, (ContainerDevices(r, ids),)) for c, r, ids in containers),
    )


class FakeKubelet:
    """``v1.PodResourcesLister/List`` served by gRPC on a unix socket, from ``pods`` (encoded
    with the encoder under test) or, when set, the literal bytes ``raw``."""

    def __init__(self, path: Path):
        self.path = path
        self.pods: list[PodResources] = []
        self.raw: bytes | None = None
        self.calls = 0
        self.server: grpc.Server | None = None

    def _list(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        assert request == b""  # ListPodResourcesRequest{}
        self.calls += 1
        return self.raw if self.raw is not None else encode_list_response(self.pods)

    def start(self) -> FakeKubelet:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list, request_deserializer=bytes, response_serializer=bytes
                )
            },
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix:{self.path}")
        self.server.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(None).wait()
            self.server = None


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    path = tmp_path / "kubelet.sock"
    assert len(str(path)) < 100, "unix socket paths are limited to 107 bytes"
    return path


@pytest.fixture
def kubelet(sock: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(sock).start()
    yield k
    k.stop()


def sample(uuid: str, index: int, mig: str = "", **kw: str) -> GpuSample:
    return GpuSample(NOW, "c1", "n1", uuid, index, "H100", mig_instance=mig, **kw)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the client against a real gRPC server ------------------------------------------------------
def test_client_decodes_the_answer_and_skips_what_it_does_not_read(
    kubelet: FakeKubelet, sock: Path
) -> None:
    """A kubelet's answer with fields this client does not know (memory, dynamic resources,
    newer fields of every wire type, a group) and other resources (cpus, hugepages)."""
    memory = len_field(1, b"hugepages-1Gi") + varint_field(2, 2**31) + len_field(3, b"\x0a\x00")
    dynamic = len_field(1, b"resource.k8s.io/gpu-claim") + len_field(2, b"ns-claim")
    group = field_key(7, SGROUP) + varint_field(1, 5) + field_key(8, SGROUP)
    group += field_key(8, EGROUP) + len_field(2, b"x") + field_key(7, EGROUP)
    unknown = (
        field_key(40, I64) + (2**63 + 5).to_bytes(8, "little")
        + field_key(41, I32) + b"\xff\xff\xff\x7f"
        + varint_field(42, 2**64 - 1)
        + len_field(43, b"\x00\xff garbage that is not a message")
        + group
    )  # fmt: skip
    devices = (
        len_field(1, b"nvidia.com/gpu")
        + unknown
        + len_field(2, H0.encode())
        + len_field(3, len_field(1, varint_field(1, 1)) + unknown)  # NUMA node 1
        + len_field(2, H1.encode())
        + len_field(3, len_field(1, b""))  # a second topology merges in: NUMA node 0
    )
    container = (
        len_field(1, b"trainer")
        + len_field(2, devices)
        + len_field(2, len_field(1, b"example.com/fpga") + len_field(2, b"fpga-3"))
        + len_field(3, encode_varint(4) + encode_varint(5))  # packed cpu_ids
        + varint_field(3, 7)  # and one unpacked: both are valid
        + varint_field(3, -1)
        + len_field(4, memory)
        + len_field(5, dynamic)
        + unknown
    )
    pod_bytes = len_field(1, b"llm-0") + unknown + len_field(2, b"team-a")
    pod_bytes += len_field(3, container) + len_field(3, len_field(1, b"sidecar"))
    kubelet.raw = (
        unknown
        + len_field(1, pod_bytes)
        + varint_field(2, 1)
        + len_field(1, encode_pod(PodResources("idle", "team-b")))
    )

    pods = PodResourcesClient(str(sock)).list()

    assert pods == [
        PodResources(
            "llm-0",
            "team-a",
            (
                ContainerResources(
                    "trainer",
                    (
                        ContainerDevices("nvidia.com/gpu", (H0, H1), (1, 0)),
                        ContainerDevices("example.com/fpga", ("fpga-3",)),
                    ),
                    cpu_ids=(4, 5, 7, -1),
                ),
                ContainerResources("sidecar"),
            ),
        ),
        PodResources("idle", "team-b"),
    ]
    assert kubelet.calls == 1


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (len_field(1, b"\x0a\x02\xff\xfe"), "PodResources.name is not valid UTF-8"),
        (len_field(1, b"\x0a\x05ab"), "runs past the end"),
        (b"\x0a\x80", "truncated varint"),
        (field_key(3, EGROUP), "without its start"),
        (b"\x0f", "invalid wire type 7"),
        (field_key(3, SGROUP) + varint_field(1, 1), "group 3 is not closed"),
        (b"\x00", "invalid field number 0"),
    ],
)
def test_a_malformed_answer_is_a_clear_error(
    kubelet: FakeKubelet, sock: Path, raw: bytes, reason: str
) -> None:
    kubelet.raw = raw
    with pytest.raises(ProtocolError, match=f"answered List with .*{reason}"):
        PodResourcesClient(str(sock)).list()


def test_missing_socket_names_the_path_and_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "kubelet.sock"
    with pytest.raises(PodResourcesError) as err:
        PodResourcesClient(str(path)).list()
    assert f"socket {path} does not exist" in str(err.value)
    assert "agent.pod_resources_socket" in str(err.value)


def test_a_socket_nobody_listens_on_asks_whether_the_kubelet_runs(sock: Path) -> None:
    with socket.socket(socket.AF_UNIX) as stale:  # a kubelet that died left its socket
        stale.bind(str(sock))
        with pytest.raises(PodResourcesError, match=r"not answering .* is the kubelet running"):
            PodResourcesClient(str(sock), timeout_s=2).list()


def test_a_kubelet_without_the_service_says_so(sock: Path) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    try:
        with pytest.raises(PodResourcesError, match=r"does not serve /v1\.PodResourcesLister/List"):
            PodResourcesClient(str(sock)).list()
    finally:
        server.stop(None).wait()


def test_permission_denied_says_the_agent_needs_access(kubelet: FakeKubelet, sock: Path) -> None:
    """As a user who may not open the socket: this user with the socket's mode cleared, or,
    as root (who may open anything), a forked child that became nobody. The check comes
    before any gRPC call, so the child makes none."""
    client = PodResourcesClient(str(sock))
    if os.geteuid() != 0:
        sock.chmod(0)
        with pytest.raises(PodResourcesError) as err:
            client.list()
        message = str(err.value)
    else:
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                client.list()
                os.write(write, b"no error")
            except BaseException as exc:
                os.write(write, str(exc).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            message = pipe.read().decode()
        os.waitpid(child, 0)
    assert f"permission denied on the kubelet's pod-resources socket {sock}" in message
    assert "needs read and write access" in message
    assert kubelet.calls == 0


# -- the enricher ------------------------------------------------------------------------------
ASSIGNED = [
    pod("team-a", "llm-0", ("trainer", "nvidia.com/gpu", (H0,))),
    pod("team-b", "notebook", ("jupyter", "nvidia.com/mig-1g.5gb", (MIG13,))),
    pod("team-c", "old-driver", ("main", "nvidia.com/mig-2g.10gb", (f"MIG-{A100}/5/0",))),
    # H1 time-sliced: replicas of it held by two pods; the first in (ns, pod, container) wins
    pod("team-z", "infer-b", ("server", "nvidia.com/gpu.shared", (f"{H1}::1",))),
    pod("team-y", "infer-a", ("server", "nvidia.com/gpu.shared", (f"{H1}::0",))),
    pod("team-e", "by-index", ("main", "nvidia.com/gpu", ("3",))),
    pod("team-f", "cpu-only", ("main", "example.com/fpga", ("GPU-not-a-gpu-resource",))),
    pod("team-g", "mig-index", ("main", "nvidia.com/mig-1g.5gb", ("2:0",))),
]


def labels(samples: pl.DataFrame | list[GpuSample]) -> dict[tuple[str, str], tuple[str, ...]]:
    rows = (
        samples.to_dicts() if isinstance(samples, pl.DataFrame) else [s._asdict() for s in samples]
    )
    return {
        (r["gpu_uuid"], r["mig_instance"]): (r["namespace"], r["pod"], r["container"]) for r in rows
    }


def node_samples() -> list[GpuSample]:
    return [
        sample(H0, 0),
        sample(H1, 1),
        sample(A100, 2),  # the MIG GPU's parent: nobody holds it whole
        sample(A100, 2, "13"),
        sample(A100, 2, "5"),
        sample("GPU-3", 3),
        sample("GPU-4", 4, pod="already", namespace="kept", container="c"),
    ]


EXPECTED = {
    (H0, ""): ("team-a", "llm-0", "trainer"),
    (H1, ""): ("team-y", "infer-a", "server"),
    (A100, ""): ("", "", ""),
    (A100, "13"): ("team-b", "notebook", "jupyter"),
    (A100, "5"): ("team-c", "old-driver", "main"),
    ("GPU-3", ""): ("team-e", "by-index", "main"),
    ("GPU-4", ""): ("kept", "already", "c"),  # a label the source gave is never overwritten
}


def test_enricher_labels_whole_mig_shared_and_indexed_gpus(
    kubelet: FakeKubelet, sock: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet.pods = ASSIGNED
    enrich = PodResourcesEnricher(
        PodResourcesClient(str(sock)),
        node="n1",
        mig_uuids=lambda: {MIG13: GpuSlot(A100, "13")},
    )
    with caplog.at_level(logging.WARNING, "collector.kubernetes.podresources"):
        out = enrich(Batch(samples=node_samples()))
        frame = pl.DataFrame(node_samples(), schema=SAMPLE_SCHEMA, orient="row")
        out_frame = enrich(Batch(samples=frame))
    assert labels(out.samples) == EXPECTED
    assert labels(out_frame.samples) == EXPECTED  # a sample frame is labelled alike
    assert out_frame.samples.schema == frame.schema and out_frame.samples.height == 7
    unresolved = [r.getMessage() for r in caplog.records if "names no GPU" in r.getMessage()]
    assert len(unresolved) == 1 and "'2:0'" in unresolved[0]  # logged once, not per batch
    assert kubelet.calls == 1  # within refresh_s the answer is reused


def test_index_ids_resolve_through_the_inventory_of_this_node_only(
    kubelet: FakeKubelet, sock: Path
) -> None:
    kubelet.pods = [pod("ns", "p", ("c", "nvidia.com/gpu", ("0",)))]
    enrich = PodResourcesEnricher(PodResourcesClient(str(sock)), node="n1")
    elsewhere = GpuInventory(NOW, "c1", "", "n2", "GPU-other", 0, "H100")
    enrich(Batch(samples=[sample("GPU-x", 0)._replace(node="n2")], gpus=[elsewhere]))
    assert enrich.slots() == {}  # index 0 of another node says nothing about this one
    enrich(Batch(gpus=[GpuInventory(NOW, "c1", "", "n1", H0, 0, "H100")]))
    assert enrich.slots() == {GpuSlot(H0): ("ns", "p", "c")}
    assert labels(enrich(Batch(samples=[sample(H0, 0)])).samples)[(H0, "")] == ("ns", "p", "c")


def test_enricher_refreshes_at_most_every_refresh_s(kubelet: FakeKubelet, sock: Path) -> None:
    clock = Clock()
    enrich = PodResourcesEnricher(PodResourcesClient(str(sock)), refresh_s=30, clock=clock)
    kubelet.pods = [pod("ns", "first", ("c", "nvidia.com/gpu", (H0,)))]
    assert labels(enrich(Batch(samples=[sample(H0, 0)])).samples)[(H0, "")][1] == "first"

    kubelet.pods = [pod("ns", "second", ("c", "nvidia.com/gpu", (H0,)))]
    clock.now += 29
    assert labels(enrich(Batch(samples=[sample(H0, 0)])).samples)[(H0, "")][1] == "first"
    assert kubelet.calls == 1
    clock.now += 1
    assert labels(enrich(Batch(samples=[sample(H0, 0)])).samples)[(H0, "")][1] == "second"
    assert kubelet.calls == 2

    kubelet.pods = []  # the pod ended: its GPU is nobody's
    clock.now += 30
    assert labels(enrich(Batch(samples=[sample(H0, 0)])).samples)[(H0, "")] == ("", "", "")


def test_enricher_without_a_kubelet_passes_samples_unlabelled_and_recovers(
    sock: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    enrich = PodResourcesEnricher(PodResourcesClient(str(sock)), refresh_s=5, clock=clock)
    batch = Batch(samples=[sample(H0, 0)])
    with caplog.at_level(logging.INFO, "collector.kubernetes.podresources"):
        for _ in range(3):
            assert enrich(batch) == batch  # unlabelled, not lost
            clock.now += 5
        assert enrich.errors == 3
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1  # once until it changes, not every interval
        assert f"socket {sock} does not exist" in errors[0].getMessage()

        kubelet = FakeKubelet(sock).start()
        try:
            kubelet.pods = [pod("ns", "p", ("c", "nvidia.com/gpu", (H0,)))]
            assert labels(enrich(batch).samples)[(H0, "")] == ("ns", "p", "c")
            assert "answers again" in caplog.records[-1].getMessage()
        finally:
            kubelet.stop()  # the kubelet goes away: its stale labels are not kept
        clock.now += 5
        assert enrich(batch) == batch
        assert enrich.errors == 4 and "does not exist" in enrich.last_error


def test_settings_choose_the_enricher(tmp_path: Path) -> None:
    settings = load_settings(
        env={
            "GPULEDGER_AGENT__POD_RESOURCES_SOCKET": "/var/lib/kubelet/pod-resources/kubelet.sock"
        },
        overrides={"agent": {"spool_dir": str(tmp_path / "s"), "pod_resources_refresh_s": 3}},
    )
    pipeline = make_pipeline(settings, [], sink=None)  # type: ignore[arg-type]
    (enrich,) = pipeline.enrichers
    assert isinstance(enrich, PodResourcesEnricher) and enrich.refresh_s == 3
    assert enrich.mig_uuids is None  # no NVML source to resolve MIG UUIDs through


class FourGpus:
    """A source that samples four GPUs every step."""

    name = "test"

    def __init__(self) -> None:
        self.now = NOW

    def collect(self, now: dt.datetime) -> Batch:
        self.now += dt.timedelta(seconds=10)
        return Batch(samples=[sample(f"GPU-{i}", i)._replace(ts=self.now) for i in range(4)])


def test_agent_keeps_sampling_while_the_kubelet_is_away(
    wh: Warehouse, tmp_path: Path, sock: Path
) -> None:
    settings = load_settings(
        env={},
        overrides={
            "agent": {
                "pod_resources_socket": str(sock),
                "pod_resources_refresh_s": 0.001,
                "node": "n1",
                "spool_dir": str(tmp_path / "spool"),
            }
        },
    )
    give_inventory(wh, [sample(f"GPU-{i}", i) for i in range(4)])
    pipeline = make_pipeline(settings, [FourGpus()], WarehouseSink(Ingestor(wh, 35)))
    pipeline.step(NOW)  # no socket at all
    kubelet = FakeKubelet(sock).start()
    kubelet.pods = [pod("ns", "p", ("c", "nvidia.com/gpu", ("GPU-1", "2")))]
    time.sleep(0.01)
    pipeline.step(NOW)  # labelled
    kubelet.stop()
    time.sleep(0.01)
    pipeline.step(NOW)  # the kubelet is gone again
    rows = wh.rows(
        f"SELECT toUnixTimestamp(ts) - {int(NOW.timestamp())}, gpu_uuid, pod, namespace, "
        f"container FROM {wh.database}.gpu_samples ORDER BY ts, gpu_uuid"
    )
    assert pipeline.spool.depth == 0 and len(rows) == 12  # every sample, none held back
    held = {(t, g) for t, g, p, n, c in rows if (p, n, c) == ("p", "ns", "c")}
    assert held == {(20, "GPU-1"), (20, "GPU-2")}
    assert all(p == "" for t, g, p, _, _ in rows if (t, g) not in held)


# -- the agent end to end: NVML stand-in, kubelet, warehouse ------------------------------------
@pytest.mark.integration
def test_agent_labels_nvml_samples_with_pods(
    tmp_path: Path, sock: Path, gpuledger_cmd: list[str], cli_env: dict[str, str], sql_rows: SqlRows
) -> None:
    """``gpuledger agent`` on the NVML stand-in: MIG UUIDs resolve through NVML itself."""
    lib = nvml_stub.build(tmp_path)
    if lib is None:
        pytest.skip("no C compiler to build the NVML stand-in")
    kubelet = FakeKubelet(sock).start()
    kubelet.pods = [
        pod("team-a", "llm-0", ("trainer", "nvidia.com/gpu", (H0,))),
        pod("team-b", "notebook", ("jupyter", "nvidia.com/mig-1g.5gb", (MIG13,))),
    ]
    data = tmp_path / "data"
    env = {
        **cli_env,
        "NVML_STUB_CONFIG": str(nvml_stub.default_config().write(tmp_path / "stub.cfg")),
        "GPULEDGER_AGENT__NVML_LIBRARY": str(lib),
        "GPULEDGER_AGENT__INTERVAL_S": "0.5",
        "GPULEDGER_AGENT__SPOOL_DIR": str(tmp_path / "spool"),
        "GPULEDGER_AGENT__STATUS_HOST": "127.0.0.1",
        "GPULEDGER_AGENT__STATUS_PORT": "0",
        "GPULEDGER_AGENT__NODE": "node-1",
        "GPULEDGER_AGENT__POD_RESOURCES_SOCKET": str(sock),
    }
    agent = subprocess.Popen(
        [*gpuledger_cmd, "agent", "--data-dir", str(data)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while kubelet.calls == 0 and time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.2)
        time.sleep(1.5)  # a few more polls
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=60)
        kubelet.stop()
    assert agent.returncode == 0, err[-2000:]
    assert kubelet.calls >= 1
    query = (
        "SELECT gpu_uuid, mig_instance, namespace, pod, container, count() "
        "FROM gpuledger.gpu_samples GROUP BY ALL ORDER BY ALL"
    )
    rows = {tuple(row[:5]) for row in sql_rows(query, data)}
    assert (H0, "", "team-a", "llm-0", "trainer") in rows
    assert (A100, "13", "team-b", "notebook", "jupyter") in rows
    assert (A100, "5", "", "", "") in rows and (H1, "", "", "", "") in rows
    assert (A100, "", "", "", "") in rows  # the MIG GPU's parent is nobody's
    assert len(rows) == 5  # one label per GPU or instance throughout


# -- the wire format: property tests -----------------------------------------------------------
names = st.text(max_size=12)
int64s = st.integers(-(2**63), 2**63 - 1)
devices = st.builds(
    ContainerDevices,
    names,
    st.lists(names, max_size=3).map(tuple),
    st.lists(int64s, max_size=3).map(tuple),
)
containers = st.builds(
    ContainerResources,
    names,
    st.lists(devices, max_size=3).map(tuple),
    st.lists(int64s, max_size=4).map(tuple),
)
pods = st.builds(PodResources, names, names, st.lists(containers, max_size=3).map(tuple))


@given(st.lists(pods, max_size=4))
@settings(max_examples=200, deadline=None)
def test_decode_inverts_encode(answer: list[PodResources]) -> None:
    assert decode_list_response(encode_list_response(answer)) == answer


unknown_fields = st.lists(
    st.one_of(
        st.builds(varint_field, st.integers(6, 2**29 - 1), int64s),
        st.builds(len_field, st.integers(6, 2**29 - 1), st.binary(max_size=8)),
        st.builds(
            lambda n, v: field_key(n, I64) + v.to_bytes(8, "little"),
            st.integers(6, 2**29 - 1),
            st.integers(0, 2**64 - 1),
        ),
        st.builds(
            lambda n, v: field_key(n, I32) + v.to_bytes(4, "little"),
            st.integers(6, 2**29 - 1),
            st.integers(0, 2**32 - 1),
        ),
        st.builds(
            lambda n, inner: field_key(n, SGROUP) + inner + field_key(n, EGROUP),
            st.integers(6, 2**29 - 1),
            st.builds(varint_field, st.integers(1, 5), st.integers(0, 99)),
        ),
    ),
    max_size=3,
).map(b"".join)


@given(st.lists(pods, max_size=3), unknown_fields, unknown_fields)
@settings(max_examples=200, deadline=None)
def test_unknown_fields_anywhere_are_skipped(
    answer: list[PodResources], before: bytes, after: bytes
) -> None:
    noisy = b"".join(before + len_field(1, after + encode_pod(p) + before) for p in answer)
    assert decode_list_response(noisy + after) == answer


@given(st.binary(max_size=64))
@settings(max_examples=500, deadline=None)
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    try:
        decoded = decode_list_response(data)
    except ProtocolError:
        return
    assert all(isinstance(p, PodResources) for p in decoded)


@given(int64s)
def test_varints_round_trip_as_int64(value: int) -> None:
    raw = encode_varint(value)
    assert len(raw) <= 10 and (len(raw) == 10) == (value < 0)
    (decoded,) = decode_list_response(len_field(1, len_field(3, varint_field(3, value))))
    assert decoded.containers[0].cpu_ids == (value,)


def test_lengths_in_the_message_are_checked() -> None:
    assert LEN == 2
    with pytest.raises(ProtocolError):
        decode_list_response(field_key(1, LEN) + encode_varint(2**40))
