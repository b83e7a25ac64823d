"""The pure readers of Kubernetes objects (``collector.k8s_objects``): quantities, MIG shares
and workload types. What whole pods, nodes and Workloads turn into is tested through the
collector, against a fake API server, in ``test_kubernetes.py``.
"""

from __future__ import annotations

import pytest

from collector.k8s_objects import mig_fraction, parse_quantity, workload_type


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
