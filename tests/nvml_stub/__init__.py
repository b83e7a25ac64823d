"""Build and configure the stand-in ``libnvidia-ml.so.1`` (``nvml_stub.c``).

``build(dir)`` compiles it with the machine's C compiler (``None`` when there is none, so
callers can skip); :class:`StubConfig` describes the devices it serves and writes the text
file that the library reads from ``$NVML_STUB_CONFIG`` at ``nvmlInit`` and on
``nvmlStubReload()``. :func:`default_config` is the fixture node: two whole H100s and an
A100-40GB in MIG mode with two GPU instances (1g.5gb and 2g.10gb).

The library is built with the soname ``libnvidia-ml.so.1``: once loaded by absolute path
(``collector.nvml.PynvmlBackend.open(library_path=...)``), pynvml's own
``CDLL("libnvidia-ml.so.1")`` gets the same, already-loaded library.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("nvml_stub.c")
SONAME = "libnvidia-ml.so.1"
GIB = 2**30
MIB = 2**20

# NVML return codes the tests inject.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
UNKNOWN = 999


def compiler() -> str | None:
    """The C compiler to build the stub with, or ``None`` if this machine has none."""
    for name in ("cc", "gcc", "clang"):
        if path := shutil.which(name):
            return path
    return None


def build(out_dir: Path) -> Path | None:
    """Compile the stub into ``out_dir/libnvidia-ml.so.1``; ``None`` without a C compiler."""
    cc = compiler()
    if cc is None:
        return None
    out = Path(out_dir) / SONAME
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", f"-Wl,-soname,{SONAME}", "-o", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@dataclasses.dataclass
class StubMig:
    """A MIG device (one GPU instance with one compute instance)."""

    uuid: str
    gi: int
    slices: int
    mem_mb: int
    mem_total: int
    mem_used: int = 0
    ci: int = 0
    procs: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (pid, bytes)
    xids: list[int] = dataclasses.field(default_factory=list)
    errors: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StubDevice:
    """A physical GPU and what each NVML call returns for it."""

    name: str
    uuid: str
    pci: str
    serial: str
    cc: tuple[int, int]
    mem_total: int
    mem_used: int = 0
    mem_reserved: int = 0
    util: tuple[int, int] = (0, 0)  # (gpu %, memory %)
    power_mw: int = 0
    energy_mj: int = 0
    temp: int = 30
    sm_clock: int = 0
    clock_reasons: int = 0
    ecc_dbe: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    mig_mode: tuple[int, int] = (0, 0)
    profiles: list[tuple[int, int, int, str]] = dataclasses.field(default_factory=list)
    migs: list[StubMig] = dataclasses.field(default_factory=list)
    procs: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (pid, bytes)
    procutil: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)  # pid,sm,mem
    xids: list[int] = dataclasses.field(default_factory=list)
    errors: dict[str, int] = dataclasses.field(default_factory=dict)  # C symbol -> rc
    lost: bool = False


@dataclasses.dataclass
class StubConfig:
    """The whole stand-in: driver, init result, global errors, devices."""

    devices: list[StubDevice]
    driver: str = "550.54.15"
    cuda: int = 12040
    init_rc: int = 0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)

    def render(self) -> str:
        """The config file's text (format documented at the top of ``nvml_stub.c``)."""
        lines = [f"init {self.init_rc}", f"driver {self.driver}", f"cuda {self.cuda}"]
        lines += [f"error {sym} {rc}" for sym, rc in self.errors.items()]
        for d in self.devices:
            lines += [
                "device",
                f"name {d.name}",
                f"uuid {d.uuid}",
                f"pci {d.pci}",
                f"serial {d.serial}",
                f"cc {d.cc[0]} {d.cc[1]}",
                f"mem {d.mem_total} {d.mem_used} {d.mem_reserved}",
                f"util {d.util[0]} {d.util[1]}",
                f"power_mw {d.power_mw}",
                f"energy_mj {d.energy_mj}",
                f"temp {d.temp}",
                f"sm_clock {d.sm_clock}",
                f"clock_reasons {d.clock_reasons}",
                f"ecc_dbe {d.ecc_dbe}",
                "remapped {} {} {} {}".format(*d.remapped),
                f"mig_mode {d.mig_mode[0]} {d.mig_mode[1]}",
                f"lost {int(d.lost)}",
            ]
            lines += [f"profile {i} {s} {mb} {name}" for i, s, mb, name in d.profiles]
            lines += [f"proc {pid} {used}" for pid, used in d.procs]
            lines += [f"procutil {pid} {sm} {mem}" for pid, sm, mem in d.procutil]
            lines += [f"xid {x}" for x in d.xids]
            lines += [f"error {sym} {rc}" for sym, rc in d.errors.items()]
            for m in d.migs:
                lines += [
                    "mig",
                    f"uuid {m.uuid}",
                    f"gi {m.gi}",
                    f"ci {m.ci}",
                    f"slices {m.slices}",
                    f"mem_mb {m.mem_mb}",
                    f"mem {m.mem_total} {m.mem_used} 0",
                ]
                lines += [f"proc {pid} {used}" for pid, used in m.procs]
                lines += [f"xid {x}" for x in m.xids]
                lines += [f"error {sym} {rc}" for sym, rc in m.errors.items()]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> Path:
        path.write_text(self.render())
        return path


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
#: A100-40GB GPU-instance profiles: (profile id, slices, memory MiB, name), as NVML lists them.
A100_40GB_PROFILES = [
    (0, 1, 4864, "MIG 1g.5gb"),
    (1, 2, 9984, "MIG 2g.10gb"),
    (2, 3, 19968, "MIG 3g.20gb"),
    (3, 4, 19968, "MIG 4g.20gb"),
    (4, 7, 40192, "MIG 7g.40gb"),
    (7, 1, 4864, "MIG 1g.5gb+me"),
]


def _h100(**fields: Any) -> StubDevice:
    return StubDevice(name=H100, cc=(9, 0), mem_total=80 * GIB, sm_clock=1980, **fields)


def default_config() -> StubConfig:
    """Two busy H100s and a MIG A100; processes use the PIDs of ``tests/data/cgroup/proc``."""
    return StubConfig(
        devices=[
            _h100(
                uuid="GPU-11111111-2222-3333-4444-555555555555",
                pci="00000000:18:00.0",
                serial="1654922000001",
                mem_used=30 * GIB,
                util=(87, 43),
                power_mw=412_345,
                energy_mj=9_876_543_210,
                temp=61,
                clock_reasons=0x1,
                procs=[(2101, 20 * GIB), (2103, 10 * GIB)],
                procutil=[(2101, 80, 40), (2101, 60, 30), (2103, 5, 1)],
            ),
            _h100(
                uuid="GPU-66666666-7777-8888-9999-000000000000",
                pci="00000000:2A:00.0",
                serial="1654922000002",
                mem_used=70 * GIB,
                util=(99, 71),
                power_mw=698_000,
                energy_mj=12_000_000_000,
                temp=74,
                clock_reasons=0x4,
                remapped=(2, 0, 0, 0),
                procs=[(2201, 40 * GIB), (2204, 30 * GIB)],
            ),
            StubDevice(
                name=A100,
                uuid="GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
                pci="00000000:B7:00.0",
                serial="1323120012345",
                cc=(8, 0),
                mem_total=40 * GIB,
                mem_used=3 * GIB,
                power_mw=88_500,
                energy_mj=555_000,
                temp=35,
                sm_clock=1410,
                mig_mode=(1, 1),
                profiles=A100_40GB_PROFILES,
                migs=[
                    StubMig(
                        uuid="MIG-0e1d2c3b-4a59-6877-8695-a4b3c2d1e0f9",
                        gi=13,
                        slices=1,
                        mem_mb=4864,
                        mem_total=4864 * MIB,
                        mem_used=1 * GIB,
                        procs=[(2202, 1 * GIB)],
                    ),
                    StubMig(
                        uuid="MIG-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0",
                        gi=5,
                        slices=2,
                        mem_mb=9984,
                        mem_total=9984 * MIB,
                        mem_used=2 * GIB,
                        procs=[(2102, 2 * GIB)],
                    ),
                ],
            ),
        ]
    )
