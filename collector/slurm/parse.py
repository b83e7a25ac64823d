"""Slurm's text formats, read without running anything: sacct fields and job mapping files.

The field parsers (TRES lists, sizes, host lists, job states, times) are pure and raise
``ValueError`` on malformed input; :class:`~collector.slurm.collector.SlurmCollector` turns that
into a Reject naming the sacct column. The mapping-file readers are for dcgm-exporter's HPC mode:
the per-GPU files that Slurm prolog scripts write (:func:`read_job_mapping`) and the enrichment of
GPU samples with the job ids they name (:func:`enrich_job_ids`). :mod:`collector.slurm.collector`
re-exports every public name here.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import polars as pl

from collector.records import GpuSample

__all__ = [
    "STATE_EVENTS",
    "GpuSlot",
    "enrich_job_ids",
    "expand_hostlist",
    "gpus_by_job",
    "parse_size_bytes",
    "parse_state",
    "parse_time",
    "parse_tres",
    "read_job_mapping",
    "tres_gpus",
]

log = logging.getLogger("collector.slurm")  # the Slurm source's logger

UTC = dt.UTC

#: Slurm job state -> (our event, reason). None: no terminal event (pending or still running).
STATE_EVENTS: dict[str, tuple[str, str] | None] = {
    "PENDING": None,
    "RUNNING": None,
    "SUSPENDED": None,
    "RESIZING": None,
    "REQUEUED": ("preempted", "REQUEUED"),  # an earlier run of a requeued job (--duplicates)
    "COMPLETED": ("finished", ""),
    "FAILED": ("failed", "FAILED"),
    "TIMEOUT": ("failed", "TIMEOUT"),
    "OUT_OF_MEMORY": ("failed", "OUT_OF_MEMORY"),
    "NODE_FAIL": ("failed", "NODE_FAIL"),
    "BOOT_FAIL": ("failed", "BOOT_FAIL"),
    "CANCELLED": ("cancelled", "CANCELLED"),
    "DEADLINE": ("cancelled", "DEADLINE"),
    "REVOKED": ("cancelled", "REVOKED"),  # a federation sibling that another cluster started
    "PREEMPTED": ("preempted", "PREEMPTED"),
}
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$")
_GPU_TYPED = re.compile(r"^gres/gpu:([^=]+)$")
_MAPPING_NAME = re.compile(r"^(\d+)(?:\.(\d+))?$")


class GpuSlot(NamedTuple):
    """A GPU, or one MIG instance of it (``mig_instance`` "" for the whole GPU)."""

    gpu_index: int
    mig_instance: str = ""


# -- field parsers (pure; raise ValueError on malformed input) ----------------------------------
def parse_tres(text: str) -> dict[str, str]:
    """``billing=8,cpu=8,gres/gpu:a100=2,mem=64G`` -> {"billing": "8", ...}; "" -> {}."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"TRES item {item!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def tres_gpus(tres: Mapping[str, str]) -> tuple[float, str]:
    """(GPU count, GPU type) of a parsed TRES list.

    ``gres/gpu`` is the total when present (sites are told to track it next to typed
    entries); otherwise the typed counts are summed. The type is named only when it is unique.
    """
    typed = {}
    for key, value in tres.items():
        if (m := _GPU_TYPED.match(key)) is not None:
            typed[m.group(1)] = _count(value, key)
    total = _count(tres["gres/gpu"], "gres/gpu") if "gres/gpu" in tres else sum(typed.values())
    model = next(iter(typed)) if len(typed) == 1 else ""
    return float(total), model


def _count(value: str, key: str) -> int:
    if not value.isdigit():
        raise ValueError(f"{key}={value!r} is not a whole number")
    return int(value)


def parse_size_bytes(text: str) -> int:
    """Slurm's converted sizes (powers of 1024): ``21794M`` -> 22852468736; ``512`` bytes."""
    m = _SIZE.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a size such as 1200M")
    return round(float(m.group(1)) * _UNITS[m.group(2)])


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list: ``gpu[01-03,07],cpu5`` -> gpu01 gpu02 gpu03 gpu07 cpu5.

    Several bracket groups in one name expand as a product (``r[1-2]n[1-2]``); zero padding
    follows the range's first number. ``None assigned`` and "" are no hosts.
    """
    text = text.strip()
    if not text or text == "None assigned":
        return []
    hosts: list[str] = []
    for name in _split_top(text):
        hosts.extend(_expand_name(name))
    return hosts


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' in host list {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(cur))
    if any(not p for p in parts):
        raise ValueError(f"empty host name in host list {text!r}")
    return parts


def _expand_name(name: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", name)
    if m is None:
        return [name]
    values: list[str] = []
    for rng in m.group(1).split(","):
        lo, sep, hi = rng.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {rng!r} in host name {name!r}")
        width = len(lo)
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"descending range {rng!r} in host name {name!r}")
        values.extend(str(n).zfill(width) for n in range(first, last + 1))
    head, tail = name[: m.start()], name[m.end() :]
    return [h for v in values for h in _expand_name(head + v + tail)]


def parse_state(text: str) -> tuple[str, str]:
    """(state, detail): ``CANCELLED by 1234`` -> ("CANCELLED", "by 1234"); ``CANCELLED+``."""
    state, _, detail = text.strip().partition(" ")
    state = state.rstrip("+").upper()
    if state not in STATE_EVENTS:
        raise ValueError(f"unknown job state {text!r}")
    return state, detail.strip()


def parse_time(text: str, tz: dt.tzinfo = UTC) -> dt.datetime | None:
    """A sacct time: ``2024-03-01T10:00:00`` in zone ``tz``, or epoch seconds (when
    ``SLURM_TIME_FORMAT=%s``); ``Unknown``, ``None`` and "" are missing (None)."""
    text = text.strip()
    if text in ("", "Unknown", "None"):
        return None
    if text.isdigit():
        return dt.datetime.fromtimestamp(int(text), UTC)
    try:
        value = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise ValueError(f"{text!r} is not a time of the form YYYY-MM-DDTHH:MM:SS") from None
    return value.replace(tzinfo=tz).astimezone(UTC)


# -- dcgm-exporter HPC job mapping files ---------------------------------------------------------
def read_job_mapping(root: str | Path) -> dict[GpuSlot, tuple[str, ...]]:
    """Read the directory that dcgm-exporter's HPC mode (``--hpc-job-mapping-dir``) watches.

    One file per GPU, named by its index (``0``, ``1``) or ``<gpu>.<gpu instance>`` for a MIG
    instance (``3.0``), holding the ids of the jobs on it, one per line, as Slurm prolog
    scripts write them. Other names (``foo``, ``1e5``, ``-2``) and directories are ignored,
    as dcgm-exporter does; blank lines and repeats are dropped, order kept (the first job is
    the one that has held the GPU longest). Best effort: a missing directory is an empty
    mapping, and a file that cannot be read is skipped with a warning.
    """
    root = Path(root)
    mapping: dict[GpuSlot, tuple[str, ...]] = {}
    if not root.is_dir():
        return mapping
    for path in sorted(root.iterdir()):
        m = _MAPPING_NAME.match(path.name)
        if m is None or not path.is_file():
            continue
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            log.warning("skipping unreadable job mapping file %s: %s", path, e)
            continue
        jobs = tuple(dict.fromkeys(s for s in (line.strip() for line in lines) if s))
        if jobs:
            mapping[GpuSlot(int(m.group(1)), m.group(2) or "")] = jobs
    return mapping


def gpus_by_job(mapping: Mapping[GpuSlot, Sequence[str]]) -> dict[str, tuple[GpuSlot, ...]]:
    """Invert a job mapping: job id -> the GPUs (slots) it runs on, in index order."""
    out: dict[str, list[GpuSlot]] = {}
    for slot in sorted(mapping):
        for job in mapping[slot]:
            out.setdefault(job, []).append(slot)
    return {job: tuple(slots) for job, slots in out.items()}


def _job_for(
    mapping: Mapping[GpuSlot, Sequence[str]],
    index: int,
    mig: str,
    job_id_for_raw: Mapping[str, str],
) -> str:
    jobs = mapping.get(GpuSlot(index, mig)) or (mapping.get(GpuSlot(index)) if mig else None)
    if not jobs:
        return ""
    return job_id_for_raw.get(jobs[0], jobs[0])


def enrich_job_ids(
    samples: pl.DataFrame | Iterable[GpuSample],
    mapping: Mapping[GpuSlot, Sequence[str]],
    *,
    node: str | None = None,
    job_id_for_raw: Mapping[str, str] | None = None,
) -> pl.DataFrame | list[GpuSample]:
    """Fill the empty ``job_id`` of samples from a node's job mapping.

    Only samples of ``node`` (all, when None) whose ``job_id`` is empty are changed. A MIG
    sample without a file of its own takes its GPU's. Several jobs on one GPU: the first
    listed (the longest holder) labels the sample, so that utilisation is not counted twice.
    ``job_id_for_raw`` (e.g. :attr:`SlurmCollector.job_ids`) turns raw ids into JobIDs.
    """
    raw = job_id_for_raw or {}
    if not isinstance(samples, pl.DataFrame):
        out = []
        for s in samples:
            job = (
                ""
                if s.job_id or (node is not None and s.node != node)
                else _job_for(mapping, s.gpu_index, s.mig_instance, raw)
            )
            out.append(s._replace(job_id=job) if job else s)
        return out
    keys = samples.select("gpu_index", "mig_instance").unique().rows()
    found = [(i, m, j) for i, m in keys if (j := _job_for(mapping, i, m, raw))]
    if not found:
        return samples
    table = pl.DataFrame(
        found,
        schema={
            "gpu_index": samples.schema["gpu_index"],
            "mig_instance": pl.String(),
            "_job": pl.String(),
        },
        orient="row",
    )
    joined = samples.join(
        table, on=["gpu_index", "mig_instance"], how="left", maintain_order="left"
    )
    take = (pl.col("job_id") == "") & pl.col("_job").is_not_null()
    if node is not None:
        take = take & (pl.col("node") == node)
    return joined.with_columns(
        pl.when(take).then(pl.col("_job")).otherwise(pl.col("job_id")).alias("job_id")
    ).drop("_job")
