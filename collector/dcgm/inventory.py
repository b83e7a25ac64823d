"""GPU inventory from what dcgm-exporter's labels say, for deployments without the NVML agent.

A dcgm-exporter body names each GPU (``UUID``, ``gpu``, ``modelName``, ``Hostname``,
``pci_bus_id``, ``DCGM_FI_DRIVER_VERSION``) and each MIG GPU instance (``GPU_I_ID``,
``GPU_I_PROFILE``) on every series; the frame-buffer fields give the memory size
(``FB_USED + FB_FREE + FB_RESERVED``). That is enough for a
:class:`~collector.records.GpuInventory` row per GPU and per GPU instance, so that samples from
a dcgm-only deployment are not quarantined as coming from GPUs with no inventory.

:func:`inventory_rows` is pure (samples and labels in, rows out). :class:`InventoryChanges`
keeps what a collector has reported and lets through only rows that are new or whose
attributes changed: the first scrape of a GPU, a driver update, a MIG re-layout.

MIG shares: a GPU instance of profile ``Ng.*`` holds N of the GPU's slices: 7 on A100, H100,
H200 and Blackwell, 4 on A30 (an unreadable profile counts as one slice). The whole-GPU row
carries what no instance covers, as the NVML collector's does, and is left out when the
instances cover the whole GPU; the exporter does not tell a GPU's health, so rows say
"healthy".
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence

from collector.records import GpuInventory, GpuSample

_SLICES = re.compile(r"^(\d+)g\.")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class GpuLabels:
    """What a body's series say about one GPU besides the sample fields."""

    pci_bus_id: str = ""
    driver_version: str = ""


def mig_fraction(profile: str, model: str) -> float:
    """The share of its GPU a GPU instance of ``profile`` ("3g.20gb") holds."""
    match = _SLICES.match(profile)
    slices = int(match[1]) if match else 1
    total = 4 if "A30" in model.upper() else 7
    return min(1.0, slices / total)


def inventory_rows(
    samples: Sequence[GpuSample], labels: Mapping[str, GpuLabels], pool: str = ""
) -> list[GpuInventory]:
    """One inventory row per whole GPU and per MIG GPU instance that ``samples`` (one scrape's,
    as :func:`collector.dcgm.collector.parse_detailed` makes them) show; ``labels`` by GPU UUID."""
    by_uuid: dict[str, list[GpuSample]] = {}
    for s in samples:
        by_uuid.setdefault(s.gpu_uuid, []).append(s)
    rows: list[GpuInventory] = []
    for uuid, members in by_uuid.items():
        whole = [s for s in members if not s.mig_instance]
        instances = [s for s in members if s.mig_instance]
        model = next((s.gpu_model for s in members if s.gpu_model), "")
        extra = labels.get(uuid, GpuLabels())
        shares = {s.mig_instance: mig_fraction(s.mig_profile, model) for s in instances}
        covered = sum(shares.values())
        if covered > 1:  # more slices than the model has: shares relative to each other
            shares = {k: v / covered for k, v in shares.items()}
            covered = 1.0
        for s in whole[:1]:
            if not instances or 1 - covered > 1e-9:
                rows.append(_row(s, model, extra, pool, 1 - covered if instances else 1.0))
        rows += [_row(s, model, extra, pool, shares[s.mig_instance]) for s in instances]
    return rows


def _row(s: GpuSample, model: str, extra: GpuLabels, pool: str, share: float) -> GpuInventory:
    return GpuInventory(
        ts=s.ts,
        cluster=s.cluster,
        pool=pool,
        node=s.node,
        gpu_uuid=s.gpu_uuid,
        gpu_index=s.gpu_index,
        gpu_model=model,
        vendor=s.vendor,
        mig_instance=s.mig_instance,
        mig_profile=s.mig_profile,
        capacity_fraction=share,
        memory_total_bytes=s.memory_total_bytes,
        driver_version=extra.driver_version,
        pci_bus_id=extra.pci_bus_id,
        source=s.source,
    )


class InventoryChanges:
    """What a collector has reported, per (cluster, GPU UUID, MIG instance); not thread-safe
    (the collector calls it from one thread)."""

    def __init__(self) -> None:
        self._reported: dict[tuple[str, str, str], GpuInventory] = {}

    def changed(self, rows: Iterable[GpuInventory]) -> list[GpuInventory]:
        """The rows that are new or differ (``ts`` aside) from the last one reported, which
        they replace. A memory size missing from one scrape (its FB fields blank) keeps the
        size known before: not reporting a value is no change."""
        out = []
        for row in rows:
            key = (row.cluster, row.gpu_uuid, row.mig_instance)
            last = self._reported.get(key)
            if last is not None and row.memory_total_bytes is None:
                row = row._replace(memory_total_bytes=last.memory_total_bytes)
            if last is None or last._replace(ts=_EPOCH) != row._replace(ts=_EPOCH):
                self._reported[key] = row
                out.append(row)
        return out
