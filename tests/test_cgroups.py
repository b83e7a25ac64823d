"""Process → pod / Slurm job mapping from ``/proc/<pid>/cgroup`` (fixture files, no host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.nvml.cgroups import CgroupOwner, owner_of_pid, parse_cgroup

PROC = Path(__file__).parent / "data" / "cgroup" / "proc"

U1 = "8dbc5577-d0e2-4706-8787-57d52c03ddf2"
U2 = "5f2c7a90-1b3e-4c6d-9e8f-0a1b2c3d4e5f"
U3 = "b1e2d3c4-a5f6-4789-8abc-def012345678"
U4 = "0f9e8d7c-6b5a-4493-8271-605f4e3d2c1b"
C1 = "0a3bb1b8d0f1c7b6e2d8b3f9a4c5e6d7f8091a2b3c4d5e6f708192a3b4c5d6e7"
C2 = "c2d4e6f8a0b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d3"
C3 = "e3f5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5"
C4 = "4a6c8e0f2b4d6f8a0c2e4f6a8b0d2f4a6c8e0b2d4f6a8c0e2a4c6e8f0b2d4f6a"


@pytest.mark.parametrize(
    ("pid", "pod_uid", "container_id", "job"),
    [
        (2101, U1, C1, ""),  # v1 hybrid, cgroupfs, burstable: the v2 line is "/" and is skipped
        (2102, U2, C2, ""),  # v1 systemd: underscores in the slice become dashes
        (2103, U3, C3, ""),  # v2 systemd, besteffort, crio-<id>.scope
        (2104, U4, C4, ""),  # v2 cgroupfs, guaranteed (no QoS level)
        (2105, U4, C4, ""),  # v2 systemd, guaranteed
        (2106, U2, "", ""),  # in the pod cgroup, not in a container
        (2107, U3, C3, ""),  # kind: kubelet.slice/kubelet-kubepods-... prefix
        (2108, "3c5f9a1e2b4d6f8091a2b3c4d5e6f708", C1, ""),  # static pod, docker-<id>.scope
        (2201, "", "", "123"),  # Slurm v1
        (2202, "", "", "456"),  # Slurm v2, batch step
        (2203, "", "", "789"),  # Slurm v1, slurm_<node> root, extern step
        (2204, "", "", "123"),  # Slurm v2, a later step of job 123
        (2301, "", "", ""),  # host login session
        (2302, "", "", ""),  # own cgroup namespace: only "/"
        (2303, "", "", ""),  # plain docker: a container, but no pod
        (2304, "", "", ""),  # look-alike "pod<uid>" and "job_<n>" outside kubepods/slurm
    ],
)
def test_owner_from_fixture_files(pid: int, pod_uid: str, container_id: str, job: str) -> None:
    owner = owner_of_pid(pid, proc=PROC)
    assert (owner.pod_uid, owner.container_id, owner.slurm_job_id) == (pod_uid, container_id, job)
    assert bool(owner.cgroup_path) == bool(pod_uid or job)


def test_proc_root_is_a_parameter_and_accepts_str() -> None:
    assert owner_of_pid(2202, proc=str(PROC)).slurm_job_id == "456"


def test_exited_or_unreadable_process_has_unknown_owner(tmp_path: Path) -> None:
    assert owner_of_pid(999_999, proc=PROC) == CgroupOwner()
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").mkdir()  # a directory where a file should be: unreadable
    assert owner_of_pid(77, proc=tmp_path) == CgroupOwner()


def test_unified_hierarchy_wins_over_v1_lines() -> None:
    text = f"4:memory:/slurm/uid_1/job_1/step_0\n0::/kubepods/besteffort/pod{U1}/{C1}\n"
    assert parse_cgroup(text).pod_uid == U1


def test_path_with_colons_and_garbage_lines() -> None:
    text = f"garbage\n\n1:name=systemd:/kubepods/pod{U4}/{C4}:extra\n"
    owner = parse_cgroup(text)
    assert owner.pod_uid == U4 and owner.container_id == ""  # "<id>:extra" is not a bare id
