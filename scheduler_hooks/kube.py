"""The Kubernetes side of the advice, through the official ``kubernetes`` client: read the
ClusterQueues (Kueue) and Queues (Volcano) as they are, turn the ClusterQueues into the quotas
the advice weighs (the cluster's, not the warehouse's, when a kubeconfig is given), and apply
approved advice (merge patches; Kueue Workloads deactivated, other pods evicted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from gpuledger_errors import SourceError
from scheduler_hooks.policy import Names
from scheduler_hooks.render import (
    JOB_UID_LABEL,
    KUEUE_GROUP,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    kueue_resource,
    quantity,
)
from warehouse.analytics.quota import QUOTA_COLUMNS


class KubeError(SourceError):
    """The API server refused or could not be reached; the message says which call."""


def client_from(kubeconfig: str) -> Any:
    """An ``ApiClient`` for the kubeconfig file ``kubeconfig`` (its current context)."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        return config.new_client_from_config(config_file=kubeconfig)
    except (ConfigException, OSError, TypeError) as exc:
        raise KubeError(f"kubeconfig {kubeconfig!r} cannot be used: {exc}") from None


def _call(what: str, fn: Any, *args: Any, **kw: Any) -> Any:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return fn(*args, **kw)
    except ApiException as exc:
        raise KubeError(f"{what}: the API server answered {exc.status} {exc.reason}") from None
    except HTTPError as exc:
        raise KubeError(f"{what}: cannot reach the API server ({exc})") from None


class Cluster:
    """One cluster's API server."""

    def __init__(self, api_client: Any, names: Names):
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.names = names

    def _list(self, group: str, version: str, plural: str) -> dict[str, Any]:
        found = _call(
            f"listing {plural}.{group}/{version}",
            self.custom.list_cluster_custom_object,
            group,
            version,
            plural,
        )
        return {o["metadata"]["name"]: o for o in found.get("items") or []}

    def cluster_queues(self) -> dict[str, Any]:
        return self._list(KUEUE_GROUP, self.names.kueue_version, "clusterqueues")

    def volcano_queues(self) -> dict[str, Any]:
        return self._list(VOLCANO_GROUP, VOLCANO_VERSION, "queues")

    def patch(self, kind: str, name: str, body: Mapping[str, Any]) -> Any:
        """Merge-patch one ClusterQueue or Queue; the object as it is afterwards."""
        group, version, plural = (
            (KUEUE_GROUP, self.names.kueue_version, "clusterqueues")
            if kind == "ClusterQueue"
            else (VOLCANO_GROUP, VOLCANO_VERSION, "queues")
        )
        return _call(
            f"patching {plural}/{name}",
            self.custom.patch_cluster_custom_object,
            group,
            version,
            plural,
            name,
            dict(body),
            _content_type="application/merge-patch+json",
        )

    def workload_of(self, namespace: str, pod: str) -> dict[str, Any] | None:
        """The Kueue Workload that admitted pod ``namespace/pod``: the one owned by (or labelled
        ``kueue.x-k8s.io/job-uid`` with) the pod itself, its controller (a Job, a PyTorchJob),
        or that Job's own owner (a JobSet), the nearest first; None when Kueue does not manage
        the pod."""
        from kubernetes import client

        found = _call(
            f"reading pod {namespace}/{pod}", self.core.read_namespaced_pod, pod, namespace
        )
        levels = [[found.metadata.uid], [o.uid for o in found.metadata.owner_references or ()]]
        for owner in found.metadata.owner_references or ():
            if owner.kind == "Job" and owner.api_version == "batch/v1":
                job = _call(
                    f"reading job {namespace}/{owner.name}",
                    client.BatchV1Api(self.core.api_client).read_namespaced_job,
                    owner.name,
                    namespace,
                )
                levels.append([o.uid for o in job.metadata.owner_references or ()])
        workloads = (
            _call(
                f"listing workloads.{KUEUE_GROUP}/{self.names.kueue_version} in {namespace}",
                self.custom.list_namespaced_custom_object,
                KUEUE_GROUP,
                self.names.kueue_version,
                namespace,
                "workloads",
            ).get("items")
            or []
        )
        for uids in levels:
            for wl in workloads:
                meta = wl.get("metadata") or {}
                owners = {o.get("uid") for o in meta.get("ownerReferences") or ()}
                label = (meta.get("labels") or {}).get(JOB_UID_LABEL)
                if owners.intersection(uids) or label in uids:
                    return dict(wl)
        return None

    def deactivate(self, namespace: str, name: str) -> Any:
        """Set Workload ``namespace/name``'s ``spec.active`` to false (what ``kubectl kueue stop
        workload`` does): Kueue evicts it, its job is suspended and its quota freed at once; the
        Workload as it is afterwards."""
        return _call(
            f"deactivating workload {namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            KUEUE_GROUP,
            self.names.kueue_version,
            namespace,
            "workloads",
            name,
            {"spec": {"active": False}},
            _content_type="application/merge-patch+json",
        )

    def evict(self, namespace: str, name: str) -> None:
        """Evict one pod (``policy/v1``), as preemption does: its disruption budget holds."""
        from kubernetes import client

        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        _call(
            f"evicting pod {namespace}/{name}",
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            body,
        )


def weights_from(
    cluster_queues: Mapping[str, Any], tenants: Iterable[str], names: Names
) -> dict[str, float]:
    """Each tenant's ``spec.fairSharing.weight`` as its ClusterQueue holds it (none: left out,
    the default 1)."""
    out = {}
    for t in tenants:
        obj = cluster_queues.get(names.cluster_queue(t))
        weight = quantity(((obj or {}).get("spec") or {}).get("fairSharing", {}).get("weight"))
        if weight is not None:
            out[t] = weight
    return out


def quotas_from(
    cluster_queues: Mapping[str, Any], known: pl.DataFrame, names: Names
) -> pl.DataFrame:
    """The quotas as the cluster's ClusterQueues set them, for the (tenant, pool, model) keys
    of ``known`` (the warehouse's quotas): nominalQuota, borrowingLimit and lendingLimit of
    the GPU resource under each key's flavor; a key the cluster does not hold keeps the
    warehouse's row."""
    rows = []
    for r in known.iter_rows(named=True):
        obj = cluster_queues.get(names.cluster_queue(r["tenant"]))
        spec = (obj or {}).get("spec") or {}
        res = kueue_resource(spec, names.flavor(r["pool"], r["gpu_model"]), names.gpu_resource)
        if res is not None and quantity(res.get("nominalQuota")) is not None:
            r = r | {
                "guaranteed_gpus": quantity(res.get("nominalQuota")),
                "borrow_limit_gpus": quantity(res.get("borrowingLimit")),
                "lend_limit_gpus": quantity(res.get("lendingLimit")),
            }
        rows.append(r)
    return pl.DataFrame(rows, schema=QUOTA_COLUMNS, orient="row")
