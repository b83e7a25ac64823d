"""The NVML collector, through the real pynvml bindings against a stand-in libnvidia-ml.so.1.

The stand-in (``tests/nvml_stub/nvml_stub.c``) is compiled once per session and loaded by
absolute path (``PynvmlBackend.open(library_path=...)``); it re-reads its config file (set in
``$NVML_STUB_CONFIG``) at every ``nvmlInit`` and on ``nvmlStubReload()``, so each test gets
its own devices and can change values, inject errors and queue Xids between polls. The
fixture node (``nvml_stub.default_config``)::

    idx  model                  state                         processes (PIDs: data/cgroup)
    0    H100 80GB HBM3         87% util, 412.345 W           2101 pod U1, 2103 pod U3
    1    H100 80GB HBM3         99% util, 698 W               2201 + 2204: Slurm job 123
    2    A100-SXM4-40GB, MIG    GI 13 1g.5gb (1/7)            2202: Slurm job 456
                                GI 5  2g.10gb (2/7)           2102: pod U2
                                unpartitioned: 4/7

A few tests of the logic above the backend use a plain Python fake of the protocol.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.nvml import (
    GpuHealth,
    GpuProcess,
    MigProfile,
    NvmlCallError,
    NvmlCollector,
    NvmlGpuLostError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    ProcessInfo,
    PynvmlBackend,
    mig_profile_name,
)
from collector.records import Batch, GpuSample, samples_frame
from tests import nvml_stub
from tests.nvml_stub import GIB, MIB

ROOT = Path(__file__).resolve().parents[1]
PROC = Path(__file__).parent / "data" / "cgroup" / "proc"
NOW = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
H0, H1, A = (d.uuid for d in nvml_stub.default_config().devices)
U1, U2, U3 = (
    "8dbc5577-d0e2-4706-8787-57d52c03ddf2",
    "5f2c7a90-1b3e-4c6d-9e8f-0a1b2c3d4e5f",
    "b1e2d3c4-a5f6-4789-8abc-def012345678",
)
C2 = "c2d4e6f8a0b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d3"


# -- the stand-in library ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def stub_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lib = nvml_stub.build(tmp_path_factory.mktemp("nvml_stub"))
    if lib is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the NVML stand-in library")
    return lib


class Stub:
    """One test's stand-in: its config, and collectors opened on it (closed at teardown)."""

    def __init__(self, library: Path, path: Path):
        self.library, self.path = library, path
        self.config = nvml_stub.default_config()
        self._open: list[NvmlCollector] = []

    def apply(self) -> None:
        """Write the config and make the loaded library re-read it (between polls)."""
        self.config.write(self.path)
        ctypes.CDLL(str(self.library)).nvmlStubReload()

    def collector(self) -> NvmlCollector:
        self.config.write(self.path)
        backend = PynvmlBackend.open(library_path=self.library)
        col = NvmlCollector(backend, cluster="lab", node="gpu-node-1", pool="train", proc_root=PROC)
        self._open.append(col)
        if col.driver_version != self.config.driver:  # not the stand-in answering
            pytest.fail(
                "pynvml had already loaded another libnvidia-ml.so.1 in this process "
                f"(driver {col.driver_version}); run the NVML tests in their own process"
            )
        return col

    def close(self) -> None:
        for col in self._open:
            col.close()


@pytest.fixture
def stub(stub_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    path = tmp_path / "nvml_stub.conf"
    monkeypatch.setenv("NVML_STUB_CONFIG", str(path))
    s = Stub(stub_library, path)
    yield s
    s.close()


def by_key(samples: Any) -> dict[tuple[str, str], Any]:
    return {(s.gpu_uuid, s.mig_instance): s for s in samples}


def nvml_logs(caplog: pytest.LogCaptureFixture, field: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "collector.nvml" and r.getMessage().startswith(f"NVML {field} ")
    ]


# -- inventory ---------------------------------------------------------------------------------
def test_inventory_fields(stub: Stub) -> None:
    rows = by_key(stub.collector().inventory(NOW))
    assert set(rows) == {(H0, ""), (H1, ""), (A, ""), (A, "5"), (A, "13")}
    h0 = rows[(H0, "")]
    assert (h0.ts, h0.cluster, h0.pool, h0.node, h0.source) == (
        NOW,
        "lab",
        "train",
        "gpu-node-1",
        "nvml",
    )
    assert (h0.gpu_index, h0.gpu_model, h0.pci_bus_id, h0.serial) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "00000000:18:00.0",
        "1654922000001",
    )
    assert h0.memory_total_bytes == 80 * GIB
    assert (h0.driver_version, h0.cuda_version, h0.compute_capability) == (
        "550.54.15",
        "12.4",
        "9.0",
    )
    assert (h0.capacity_fraction, h0.health, h0.mig_profile) == (1.0, "healthy", "")
    assert rows[(H1, "")].gpu_index == 1 and rows[(A, "")].compute_capability == "8.0"


def test_mig_instances_have_profiles_and_slice_fractions(stub: Stub) -> None:
    col = stub.collector()
    rows = by_key(col.inventory(NOW))
    parent, small, medium = rows[(A, "")], rows[(A, "13")], rows[(A, "5")]
    assert (small.mig_profile, small.capacity_fraction) == ("1g.5gb", pytest.approx(1 / 7))
    assert (medium.mig_profile, medium.capacity_fraction) == ("2g.10gb", pytest.approx(2 / 7))
    assert parent.capacity_fraction == pytest.approx(4 / 7)  # the unpartitioned slices
    assert sum(r.capacity_fraction for (u, _), r in rows.items() if u == A) == pytest.approx(1)
    assert small.memory_total_bytes == 4864 * MIB and parent.memory_total_bytes == 40 * GIB
    assert small.gpu_model == parent.gpu_model == "NVIDIA A100-SXM4-40GB"
    assert small.serial == parent.serial and small.gpu_index == 2

    samples = by_key(col.collect(NOW).samples)
    mig = samples[(A, "13")]
    assert (mig.mig_profile, mig.memory_used_bytes, mig.memory_total_bytes) == (
        "1g.5gb",
        1 * GIB,
        4864 * MIB,
    )
    assert mig.power_watts is None and mig.gpu_util_ratio is None  # per-GPU only
    assert samples[(A, "")].power_watts == 88.5


def test_fully_partitioned_gpu_has_no_parent_row(stub: Stub) -> None:
    a100 = stub.config.devices[2]
    a100.migs.append(
        nvml_stub.StubMig(uuid="MIG-x", gi=1, slices=4, mem_mb=19968, mem_total=19968 * MIB)
    )
    rows = by_key(stub.collector().inventory(NOW))
    assert (A, "") not in rows
    assert rows[(A, "1")].mig_profile == "4g.20gb"
    assert sum(r.capacity_fraction for (u, _), r in rows.items() if u == A) == pytest.approx(1)


# -- samples -----------------------------------------------------------------------------------
def test_samples_convert_units_and_follow_changes(stub: Stub) -> None:
    stub.config.devices[0].mem_reserved = 1 * GIB  # reserved memory is not "used"
    col = stub.collector()
    poll = col.collect(NOW)
    s = by_key(poll.samples)[(H0, "")]
    assert (s.gpu_util_ratio, s.mem_util_ratio) == (0.87, 0.43)
    assert s.power_watts == pytest.approx(412.345)
    assert (s.energy_millijoules, s.temperature_celsius, s.sm_clock_mhz) == (
        9_876_543_210,
        61.0,
        1980,
    )
    assert (s.memory_used_bytes, s.memory_total_bytes) == (30 * GIB, 80 * GIB)
    assert (s.ts, s.cluster, s.node, s.gpu_index, s.source) == (NOW, "lab", "gpu-node-1", 0, "nvml")
    assert s.xid is None
    assert samples_frame(poll.samples).height == 5  # the five fit SAMPLE_SCHEMA

    dev = stub.config.devices[0]
    dev.util, dev.power_mw, dev.energy_mj = (3, 0), 70_250, 9_876_600_000
    stub.apply()
    s = by_key(col.collect(NOW + dt.timedelta(seconds=10)).samples)[(H0, "")]
    assert (s.gpu_util_ratio, s.mem_util_ratio, s.power_watts) == (0.03, 0.0, 70.25)
    assert s.energy_millijoules == 9_876_600_000


def test_health_counters(stub: Stub) -> None:
    stub.config.devices[0].ecc_dbe = 2
    stub.config.devices[1].remapped = (3, 1, 1, 0)
    health = {h.gpu_uuid: h for h in stub.collector().collect(NOW).health}
    assert health[H0] == GpuHealth(
        NOW,
        H0,
        clock_event_reasons=0x1,
        ecc_dbe_volatile=2,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remapped_rows_pending=False,
        remapped_rows_failure=False,
        cluster="lab",
        node="gpu-node-1",
    )
    h1 = health[H1]
    assert (
        h1.clock_event_reasons,
        h1.remapped_rows_correctable,
        h1.remapped_rows_uncorrectable,
        h1.remapped_rows_pending,
    ) == (0x4, 3, 1, True)


def test_older_drivers_fall_back_to_older_functions(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="collector.nvml")
    for symbol in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    ):
        stub.config.errors[symbol] = nvml_stub.FUNCTION_NOT_FOUND
    stub.config.devices[0].mem_reserved = 1 * GIB
    poll = stub.collector().collect(NOW)
    assert {h.gpu_uuid: h for h in poll.health}[H1].clock_event_reasons == 0x4  # "throttle"
    assert by_key(poll.samples)[(H0, "")].memory_used_bytes == 31 * GIB  # v1: with reserved
    assert {p.pid for p in poll.processes} == {2101, 2103, 2201, 2204, 2202, 2102}  # _v2
    for field in ("clock_event_reasons", "memory_used_bytes", "processes"):
        assert not nvml_logs(caplog, field)


def test_not_supported_becomes_null_logged_once_per_field(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="collector.nvml")
    h0, h1 = stub.config.devices[:2]
    h0.errors["nvmlDeviceGetPowerUsage"] = nvml_stub.NOT_SUPPORTED
    h1.errors["nvmlDeviceGetPowerUsage"] = nvml_stub.NOT_SUPPORTED
    h1.errors["nvmlDeviceGetTotalEnergyConsumption"] = nvml_stub.FUNCTION_NOT_FOUND
    h0.errors["nvmlDeviceGetTotalEccErrors"] = nvml_stub.NO_PERMISSION
    h0.errors["nvmlDeviceGetSerial"] = nvml_stub.NOT_SUPPORTED
    col = stub.collector()
    assert by_key(col.inventory(NOW))[(H0, "")].serial == ""
    for i in range(3):
        poll = col.collect(NOW + dt.timedelta(seconds=10 * i))
        s = by_key(poll.samples)
        assert s[(H0, "")].power_watts is None and s[(H1, "")].power_watts is None
        assert s[(H1, "")].energy_millijoules is None
        assert s[(H0, "")].energy_millijoules == 9_876_543_210  # other fields unaffected
        assert s[(H0, "")].gpu_util_ratio == 0.87
        assert {h.gpu_uuid: h for h in poll.health}[H0].ecc_dbe_volatile is None
    for field in (
        "power_watts",
        "energy_millijoules",
        "ecc_dbe_volatile",
        "serial",
        "gpu_util_ratio",
    ):  # the last: the MIG A100 has no utilisation
        records = nvml_logs(caplog, field)
        assert len(records) == 1, field
        assert "550.54.15" in records[0].getMessage()
    assert not nvml_logs(caplog, "temperature_celsius")


def test_other_errors_become_null_with_a_warning(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    stub.config.devices[0].errors["nvmlDeviceGetTemperature"] = nvml_stub.UNKNOWN
    col = stub.collector()
    for _ in range(2):
        assert by_key(col.collect(NOW).samples)[(H0, "")].temperature_celsius is None
    (record,) = nvml_logs(caplog, "temperature_celsius")
    assert record.levelno == logging.WARNING


# -- start-up errors ---------------------------------------------------------------------------
def test_missing_library_raises_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NvmlUnavailableError) as err:
        PynvmlBackend.open(library_path=tmp_path / "lib" / "libnvidia-ml.so.1")
    assert "libnvidia-ml.so.1 not found" in str(err.value)
    assert "install the NVIDIA driver" in str(err.value) and "dcgm" in str(err.value)
    assert err.value.code == 12


def test_missing_library_without_a_path(tmp_path: Path) -> None:
    """In a fresh process with no stand-in: the loader's search, as in production."""
    code = (
        "from collector.nvml import PynvmlBackend, NvmlUnavailableError\n"
        "try:\n    PynvmlBackend.open().close()\nexcept NvmlUnavailableError as e:\n"
        "    print(e.code, e)\nelse:\n    print('available')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    if out == "available" or out.startswith(("9 ", "18 ")):
        pytest.skip(f"this machine has an NVIDIA library: {out}")
    assert out.startswith("12 NVML library libnvidia-ml.so.1 not found"), out


def test_unconfigured_stand_in_behaves_like_a_machine_without_nvml(
    stub_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NVML_STUB_CONFIG", raising=False)
    with pytest.raises(NvmlUnavailableError, match=r"libnvidia-ml\.so\.1 not found"):
        PynvmlBackend.open(library_path=stub_library)


def test_driver_not_loaded_raises_a_clear_error(stub: Stub) -> None:
    stub.config.init_rc = nvml_stub.DRIVER_NOT_LOADED
    with pytest.raises(NvmlUnavailableError, match="driver is not loaded") as err:
        stub.collector()
    assert err.value.code == nvml_stub.DRIVER_NOT_LOADED


# -- a lost GPU --------------------------------------------------------------------------------
def test_gpu_lost_on_one_device_others_still_sampled(stub: Stub) -> None:
    col = stub.collector()
    col.inventory(NOW)
    stub.config.devices[1].lost = True
    stub.apply()
    poll = col.collect(NOW)
    assert set(by_key(poll.samples)) == {(H0, ""), (A, ""), (A, "5"), (A, "13")}
    (reject,) = poll.rejects
    assert (reject.kind, reject.field, reject.value) == ("gpu_sample", "gpu_uuid", H1)
    assert "GPU is lost" in reject.reason and "reset the GPU" in reject.reason
    assert reject.source == "nvml:gpu-node-1" and json.loads(reject.payload)["gpu_index"] == 1
    assert {h.gpu_uuid: h.gpu_lost for h in poll.health} == {H0: False, H1: True, A: False}
    assert {p.gpu_uuid for p in poll.processes} == {H0, A}
    assert len(poll.batch().rejects) == 1

    rows = by_key(col.inventory(NOW))  # known from before: reported, unhealthy
    assert rows[(H1, "")].health == "unhealthy" and "GPU is lost" in rows[(H1, "")].health_reason
    assert rows[(H0, "")].health == "healthy"


def test_gpu_lost_before_it_was_ever_identified(stub: Stub) -> None:
    stub.config.devices[0].lost = True
    col = stub.collector()
    assert (H0, "") not in by_key(col.inventory(NOW))
    poll = col.collect(NOW)
    assert [r.value for r in poll.rejects] == ["index 0"]
    assert (H1, "") in by_key(poll.samples)


# -- Xid events --------------------------------------------------------------------------------
def test_xid_event_lands_in_the_sample_of_its_interval(stub: Stub) -> None:
    col = stub.collector()
    assert all(s.xid is None for s in col.collect(NOW).samples)
    stub.config.devices[0].xids = [31, 43]  # the last one of the interval wins
    stub.config.devices[2].migs[0].xids = [94]  # names MIG instance 13
    stub.apply()
    samples = by_key(col.collect(NOW).samples)
    assert samples[(H0, "")].xid == 43 and samples[(H1, "")].xid is None
    assert samples[(A, "13")].xid == 94 and samples[(A, "")].xid == 94
    assert samples[(A, "5")].xid is None
    assert all(s.xid is None for s in col.collect(NOW).samples)  # drained


# -- processes ---------------------------------------------------------------------------------
def test_processes_map_to_pods_and_slurm_jobs(stub: Stub) -> None:
    col = stub.collector()
    poll = col.collect(NOW)
    procs = {p.pid: p for p in poll.processes}
    assert procs[2101] == GpuProcess(
        NOW, H0, "", 2101, 20 * GIB, 0.7, U1, procs[2101].container_id, "", "lab", "gpu-node-1"
    )
    assert procs[2101].container_id.startswith("0a3bb1b8")
    assert (procs[2103].pod_uid, procs[2103].sm_util_ratio) == (U3, 0.05)
    assert (procs[2201].slurm_job_id, procs[2204].slurm_job_id) == ("123", "123")
    assert procs[2201].sm_util_ratio is None  # no per-process samples on that GPU
    assert (procs[2102].mig_instance, procs[2102].pod_uid, procs[2102].container_id) == (
        "5",
        U2,
        C2,
    )
    assert (procs[2202].mig_instance, procs[2202].slurm_job_id) == ("13", "456")
    samples = by_key(poll.samples)
    assert samples[(H1, "")].job_id == "123"  # one job owns all of GPU 1's processes
    assert samples[(A, "13")].job_id == "456"
    assert samples[(H0, "")].job_id == "" and samples[(A, "5")].job_id == ""  # pods

    again = {p.pid: p for p in col.collect(NOW).processes}  # no new utilisation samples
    assert again[2101].sm_util_ratio is None and again[2101].used_memory_bytes == 20 * GIB


# -- logic above the backend, with a plain fake ------------------------------------------------
class FakeBackend:
    """The protocol in plain Python: two GPUs; ``fail`` maps (method, handle) to an error."""

    def __init__(self, procs: dict[int, list[int]] | None = None):
        self.procs = procs or {0: [], 1: []}
        self.fail: dict[tuple[str, int], NvmlCallError] = {}

    def _get(self, method: str, h: int, value: Any) -> Any:
        if (err := self.fail.get((method, h))) is not None:
            raise err
        return value

    def driver_version(self) -> str:
        return "560.35.03"

    def cuda_driver_version(self) -> int:
        return 12060

    def device_count(self) -> int:
        return 2

    def device_handle(self, index: int) -> int:
        return index

    def name(self, h: int) -> str:
        return "NVIDIA L40S"

    def uuid(self, h: int) -> str:
        return f"GPU-{h}"

    def serial(self, h: int) -> str:
        return str(h)

    def pci_bus_id(self, h: int) -> str:
        return f"00000000:0{h}:00.0"

    def compute_capability(self, h: int) -> tuple[int, int]:
        return (8, 9)

    def memory(self, h: int) -> tuple[int, int]:
        return (GIB, 48 * GIB)

    def mig_enabled(self, h: int) -> bool:
        raise NvmlNotSupportedError(3, "mig")

    def mig_devices(self, h: int) -> list[Any]:
        return []

    def gpu_instance_profiles(self, h: int) -> list[MigProfile]:
        return []

    def utilization(self, h: int) -> tuple[int, int]:
        return self._get("utilization", h, (50, 5))

    def power_mw(self, h: int) -> int:
        return 100_000

    def energy_mj(self, h: int) -> int:
        return 1

    def temperature_c(self, h: int) -> float:
        return self._get("temperature_c", h, 40)

    def sm_clock_mhz(self, h: int) -> int:
        return 2520

    def clock_event_reasons(self, h: int) -> int:
        return 0

    def ecc_dbe_volatile(self, h: int) -> int:
        return 0

    def remapped_rows(self, h: int) -> tuple[int, int, bool, bool]:
        return (0, 0, False, False)

    def compute_processes(self, h: int) -> list[ProcessInfo]:
        return [ProcessInfo(pid, GIB) for pid in self.procs[h]]

    def process_utilization(self, h: int, since_us: int) -> list[Any]:
        return []

    def watch_xid(self, h: int) -> None:
        return None

    def xid_events(self) -> list[Any]:
        return []

    def close(self) -> None:
        return None


def fake_collector(backend: FakeBackend) -> NvmlCollector:
    return NvmlCollector(backend, cluster="lab", node="n", proc_root=PROC)


def test_job_id_only_when_exactly_one_job_owns_every_process() -> None:
    # GPU 0: job 123 and a host process; GPU 1: jobs 123 and 456
    backend = FakeBackend({0: [2201, 2301], 1: [2201, 2202]})
    samples = by_key(fake_collector(backend).collect(NOW).samples)
    assert samples[("GPU-0", "")].job_id == "" and samples[("GPU-1", "")].job_id == ""
    backend.procs = {0: [2201, 2204], 1: []}
    samples = by_key(fake_collector(backend).collect(NOW).samples)
    assert samples[("GPU-0", "")].job_id == "123" and samples[("GPU-1", "")].job_id == ""


def test_gpu_lost_mid_sample_leaves_no_partial_records() -> None:
    backend = FakeBackend({0: [2101], 1: [2202]})
    backend.fail[("temperature_c", 1)] = NvmlGpuLostError(15, "nvmlDeviceGetTemperature")
    poll = fake_collector(backend).collect(NOW)
    assert [s.gpu_uuid for s in poll.samples] == ["GPU-0"]
    assert [p.gpu_uuid for p in poll.processes] == ["GPU-0"]
    assert [(h.gpu_uuid, h.gpu_lost) for h in poll.health] == [("GPU-0", False), ("GPU-1", True)]
    assert [r.value for r in poll.rejects] == ["GPU-1"]
    batch = poll.batch()
    # 1 sample, 1 process, 2 health notes, 1 reject
    assert isinstance(batch, Batch) and len(batch) == 5
    assert {(h.cluster, h.node) for h in batch.health} == {("lab", "n")}
    assert {(p.cluster, p.node) for p in batch.processes} == {("lab", "n")}
    assert all(isinstance(s, GpuSample) for s in batch.samples)


def test_collect_needs_an_aware_timestamp() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        fake_collector(FakeBackend()).collect(dt.datetime(2025, 1, 1))


def testmig_profile_name_from_attributes() -> None:
    profiles = [
        MigProfile(0, "MIG 1g.10gb", 1, 9856),
        MigProfile(7, "MIG 1g.10gb+me", 1, 9856),
        MigProfile(9, "MIG 1g.20gb", 1, 19968),
        MigProfile(4, "MIG 7g.80gb", 7, 80896),
    ]
    assert mig_profile_name(1, 9856, profiles) == "1g.10gb"  # the plain one before "+me"
    assert mig_profile_name(1, 19968, profiles) == "1g.20gb"
    assert mig_profile_name(7, 80896, profiles) == "7g.80gb"
    assert mig_profile_name(2, 9984, []) == "2g.10gb"  # no profile table: from the memory size


# -- a real GPU --------------------------------------------------------------------------------
@pytest.mark.gpu
def test_real_nvml_when_a_gpu_is_present() -> None:
    """The real collector against the machine's NVML, in a fresh process (the stand-in may be
    loaded in this one). Skipped, not failed, where NVML cannot start."""
    code = """
import datetime as dt, json
from collector.nvml import NvmlCollector, NvmlUnavailableError, PynvmlBackend
try:
    backend = PynvmlBackend.open()
except NvmlUnavailableError as e:
    print(json.dumps({"unavailable": str(e)})); raise SystemExit
with NvmlCollector(backend, cluster="gpu-test", node="here", proc_root="/proc") as col:
    now = dt.datetime.now(dt.UTC)
    inv, poll = col.inventory(now), col.collect(now)
    print(json.dumps({"inventory": [r._asdict() for r in inv],
                      "samples": [s._asdict() for s in poll.samples],
                      "rejects": len(poll.rejects)}, default=str))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NVML_STUB_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    result = json.loads(out)
    if "unavailable" in result:
        pytest.skip(f"no usable NVML here: {result['unavailable']}")
    assert result["inventory"] and result["rejects"] == 0
    for row in result["inventory"]:
        assert row["gpu_uuid"].startswith("GPU-") and row["driver_version"]
        assert 0 < row["capacity_fraction"] <= 1
    whole = [s for s in result["samples"] if not s["mig_instance"]]
    assert whole and all(s["memory_total_bytes"] > 0 for s in whole)
    for s in whole:
        assert s["gpu_util_ratio"] is None or 0 <= s["gpu_util_ratio"] <= 1
        assert s["power_watts"] is None or 0 < s["power_watts"] < 2000
