"""Enrichers chosen from settings: the Slurm job mapping files label samples with jobs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from collector.records import Batch, GpuSample
from gpuledger.agent import make_pipeline
from gpuledger.settings import load_settings

MAPPING = Path(__file__).parent / "data" / "slurm" / "gpujobmap"
NOW = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def test_slurm_mapping_labels_unlabelled_samples(tmp_path: Path) -> None:
    settings = load_settings(
        env={},
        overrides={
            "agent": {
                "slurm_job_map_dir": str(MAPPING),
                "node": "n1",
                "spool_dir": str(tmp_path / "s"),
            }
        },
    )
    pipeline = make_pipeline(settings, [], sink=None)  # type: ignore[arg-type]
    assert len(pipeline.enrichers) == 1
    samples = [GpuSample(NOW, "c1", "n1", f"GPU-{i}", i, "H100") for i in range(3)]
    samples.append(GpuSample(NOW, "c1", "n1", "GPU-9", 9, "H100", job_id="kept"))
    out = pipeline.enrichers[0](Batch(samples=samples)).samples
    expected = {i: (MAPPING / str(i)).read_text().split()[0] for i in range(3)}
    assert {s.gpu_index: s.job_id for s in out[:3]} == expected
    assert out[3].job_id == "kept"  # a label the source gave is never overwritten


def test_no_enricher_without_the_setting(tmp_path: Path) -> None:
    settings = load_settings(env={}, overrides={"agent": {"spool_dir": str(tmp_path / "s")}})
    assert make_pipeline(settings, [], sink=None).enrichers == []  # type: ignore[arg-type]
