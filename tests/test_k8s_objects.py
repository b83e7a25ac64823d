"""The pure readers of Kubernetes objects (``collector.kubernetes.objects``): quantities, MIG
shares, workload types and what a Workload's pod sets ask for. What whole pods, nodes and Workloads
turn into is tested through the collector, against a fake API server, in
``test_kubernetes.py``, ``test_k8s_queue.py`` and ``test_k8s_state.py``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from collector.kubernetes.objects import (
    _Bad,
    mig_fraction,
    parse_quantity,
    parse_workload,
    workload_type,
)

WORKLOAD = json.loads((Path(__file__).parent / "data/k8s/workload_pytorchjob.json").read_text())


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("8", 8),
        ("500m", 0.5),
        ("16Gi", 2**34),
        ("1e3", 1000),
        ("2k", 2000),
        (".5", 0.5),
        (4, 4),
    ],
)
def test_quantities(text: object, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "", "1.2.3", "5 Gi", None, "1x"])
def test_bad_quantities_raise(text: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_mig_fractions() -> None:
    assert mig_fraction("1g.10gb") == pytest.approx(1 / 7)
    assert mig_fraction("3g.40gb") == pytest.approx(3 / 7)
    assert mig_fraction("7g.80gb") == 1.0
    assert mig_fraction("1g.6gb") == 0.25  # A30: four slices
    assert mig_fraction("2g.12gb") == 0.5
    assert mig_fraction("1c.3g.40gb") == pytest.approx(3 / 7)  # compute-instance profile
    with pytest.raises(ValueError):
        mig_fraction("9g.1tb")


@pytest.mark.parametrize(
    ("labels", "owner", "expected"),
    [
        ({}, "Job", "training"),
        ({}, "PyTorchJob", "training"),
        ({}, "MPIJob", "training"),
        ({}, "RayJob", "training"),
        ({"ray.io/originated-from-crd": "RayJob"}, "RayCluster", "training"),
        ({"ray.io/originated-from-crd": "RayService"}, "RayCluster", "inference"),
        ({"pod-template-hash": "5d8f7c9b6"}, "ReplicaSet", "inference"),  # a Deployment's
        ({}, "ReplicaSet", "other"),
        ({"serving.kserve.io/inferenceservice": "llm"}, "ReplicaSet", "inference"),
        ({"notebook-name": "alice-nb"}, "StatefulSet", "notebook"),
        ({}, "StatefulSet", "other"),
        ({"app.kubernetes.io/component": "inference"}, "Job", "inference"),  # batch inference
        ({"app.kubernetes.io/component": "notebook"}, "", "notebook"),
        ({"gpuledger.io/workload-type": "training"}, "Deployment", "training"),
        ({}, "", "other"),
    ],
)
def test_workload_type(labels: dict[str, str], owner: str, expected: str) -> None:
    assert workload_type(labels, owner) == expected


def test_workload_pod_sets() -> None:
    wl = copy.deepcopy(WORKLOAD)
    wl["spec"]["podSets"].append(
        {
            "name": "slices",
            "count": 2,
            "template": {
                "metadata": {
                    "labels": {"team": "search"},
                    "annotations": {"gpuledger.io/user": "bob"},
                },
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                    "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}
                    ],
                },
            },
        }
    )
    wl["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Failed",
            "lastTransitionTime": "2025-03-03T11:00:00Z",
        }
    )
    v = parse_workload(wl)
    assert (v.uid, v.owner_kind, v.owner_name, v.finished) == (
        "c3d1e2f0-2222-4b5c-8d9e-0f1a2b3c4d5e",
        "PyTorchJob",
        "llama-ft",
        "Failed",
    )
    assert [(ps.name, ps.pods, ps.shape.whole_gpus, ps.workload_type) for ps in v.pod_sets] == [
        ("master", 1, 8, "training"),
        ("worker", 3, 8, "training"),
        ("slices", 2, 0, "training"),
    ]
    slices = v.pod_sets[2]
    assert (slices.shape.mig, slices.shape.gpu_model, slices.user, slices.labels) == (
        (("1g.10gb", 1),),
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "bob",
        {"team": "search"},
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"count": -1}, "spec.podSets[1].count"),
        ({"count": "3"}, "spec.podSets[1].count"),
        (
            {
                "template": {
                    "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "x"}}}]}
                }
            },
            "spec.podSets[1].template.spec.containers[0].resources[nvidia.com/gpu]",
        ),
    ],
)
def test_bad_pod_sets_name_the_field(change: dict[str, object], field: str) -> None:
    wl = copy.deepcopy(WORKLOAD)
    wl["spec"]["podSets"][1].update(change)
    with pytest.raises(_Bad) as bad:
        parse_workload(wl)
    assert bad.value.field == field
