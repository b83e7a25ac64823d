"""Which GPUs have inventory: samples, processes and health rows of the others are quarantined.

A sample of a GPU the warehouse has no inventory for has no capacity, model, pool or price
behind it: the ledger cannot count it, so it is kept back (quarantined with
:func:`~warehouse.ingest.checks.unknown_gpu_reason`) until the inventory arrives and
``gpuledger quarantine replay`` writes it. A GPU is known when ``gpus`` has a row for its
``(cluster, gpu_uuid)`` (MIG instances carry their parent's UUID, in samples and inventory
alike) or when the same batch (or group) brings its inventory.

:class:`KnownGpus` remembers the known pairs for the life of an
:class:`~warehouse.ingest.writer.Ingestor`, so a batch costs at most one small query, for the pairs
it has not seen yet; pairs found unknown are asked about again next time (their inventory may
have arrived meanwhile). A GPU never stops being known: the answer for a pair only ever goes
from unknown to known.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable

import polars as pl

from warehouse import queries
from warehouse.client import Warehouse
from warehouse.ingest.checks import UNKNOWN_GPU, Problem, unknown_gpu_reason

#: (cluster, gpu_uuid)
GpuKey = tuple[str, str]
_QUERY_KEYS = 5000  # pairs per query: the parameter stays small


class KnownGpus:
    """The ``(cluster, gpu_uuid)`` pairs with inventory, remembered; thread-safe."""

    def __init__(self, wh: Warehouse):
        self.wh = wh
        self._known: set[GpuKey] = set()
        self._lock = threading.Lock()

    def add(self, keys: Iterable[GpuKey]) -> None:
        """Remember pairs whose inventory has just been written."""
        with self._lock:
            self._known.update(keys)

    def unknown(self, keys: Iterable[GpuKey]) -> set[GpuKey]:
        """The pairs of ``keys`` with no inventory; asks the warehouse about new ones only.

        Pairs with an empty cluster or UUID are left out: their records fail an earlier check.
        """
        with self._lock:
            wanted = {k for k in keys if k[0] and k[1]} - self._known
        if not wanted:
            return set()
        ordered = sorted(wanted)
        found: set[GpuKey] = set()
        for start in range(0, len(ordered), _QUERY_KEYS):
            rows = self.wh.rows(
                queries.sql("known_gpus"),
                {"db": self.wh.database, "keys": ordered[start : start + _QUERY_KEYS]},
            )
            found.update((str(c), str(u)) for c, u in rows)
        self.add(found)
        return wanted - found


def frame_keys(frame: pl.DataFrame) -> list[GpuKey]:
    """The distinct ``(cluster, gpu_uuid)`` pairs of a sample frame (nulls left out); a few
    milliseconds for 200,000 rows (a group-by on the cluster: most frames hold one)."""
    if not frame.height:
        return []
    grouped = frame.group_by(pl.col("cluster").cast(pl.String, strict=False)).agg(
        pl.col("gpu_uuid").cast(pl.String, strict=False).unique()
    )
    return [
        (cluster, uuid)
        for cluster, uuids in grouped.iter_rows()
        if cluster is not None
        for uuid in uuids
        if uuid is not None
    ]


def record_keys(records: Iterable[object]) -> set[GpuKey]:
    """The ``(cluster, gpu_uuid)`` pairs of records that have both fields as strings."""
    keys: set[GpuKey] = set()
    for r in records:
        cluster, uuid = getattr(r, "cluster", None), getattr(r, "gpu_uuid", None)
        if isinstance(cluster, str) and isinstance(uuid, str):
            keys.add((cluster, uuid))
    return keys


def by_cluster(unknown: Iterable[GpuKey]) -> dict[str, list[str]]:
    """``{cluster: [gpu_uuid, ...]}``, sorted, for one check (one reason) per cluster."""
    out: dict[str, list[str]] = {}
    for cluster, uuid in sorted(unknown):
        out.setdefault(cluster, []).append(uuid)
    return out


def frame_checks(unknown: Iterable[GpuKey]) -> list[tuple[str, pl.Expr, str]]:
    """Sample-frame checks (field, failing rows, reason) for the unknown pairs."""
    return [
        (
            "gpu_uuid",
            (pl.col("cluster") == cluster) & pl.col("gpu_uuid").is_in(uuids),
            unknown_gpu_reason(cluster),
        )
        for cluster, uuids in by_cluster(unknown).items()
    ]


def record_problem(record: object, unknown: Collection[GpuKey]) -> Problem | None:
    """The unknown-GPU problem of one process or health record, or None."""
    cluster, uuid = getattr(record, "cluster", ""), getattr(record, "gpu_uuid", "")
    if (cluster, uuid) in unknown:
        return ("gpu_uuid", str(uuid), unknown_gpu_reason(str(cluster)))
    return None


def is_unknown_gpu(reason: str) -> bool:
    """Whether a quarantine reason is an unknown-GPU one (the GPU's inventory may come)."""
    return reason.startswith(UNKNOWN_GPU + ":")
