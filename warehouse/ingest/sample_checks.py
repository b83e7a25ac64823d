"""Vectorised validation of GPU samples (polars), for :mod:`warehouse.ingest.writer`.

Samples arrive by the hundred thousand, so they are checked column by column rather than one
record at a time (the other kinds' checks are in :mod:`warehouse.ingest.checks`): first every value
is brought to :data:`~collector.records.SAMPLE_SCHEMA` (a value that does not fit rejects its row),
then each rule is an expression over the frame, and a row's first failing rule is its reason.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from collector.records import SAMPLE_SCHEMA, GpuSample
from warehouse.ingest.checks import (
    FUTURE_REASON,
    MAX_FUTURE_SKEW,
    MAX_LABEL_CHARS,
    RATIO_REASON,
    Problem,
    aware,
    too_old_reason,
)

_RATIO_FIELDS = (
    "gpu_util_ratio",
    "gr_engine_active_ratio",
    "mem_util_ratio",
    "tensor_active_ratio",
)
_NONNEG_FLOAT_FIELDS = ("power_watts",)
_LABEL_FIELDS = (
    "cluster",
    "node",
    "gpu_uuid",
    "gpu_model",
    "vendor",
    "mig_instance",
    "mig_profile",
    "pod",
    "namespace",
    "container",
    "job_id",
    "source",
)
_REQUIRED_FIELDS = ("cluster", "node", "gpu_uuid")
Rejects = list[tuple[str, str, str, str]]  # (field, value, reason, payload)


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value)


def record_payload(row: Mapping[str, Any] | Sequence[Any]) -> str:
    data = row._asdict() if hasattr(row, "_asdict") else row
    return json.dumps(data, default=_json_default)[:65536]


#: A sample-frame check: (field, the rows it fails, reason).
FrameCheck = tuple[str, pl.Expr, str]


def coerce_samples(
    samples: pl.DataFrame | Sequence[GpuSample],
) -> tuple[pl.DataFrame, list[tuple[str, str, str, str]]]:
    """Bring ``samples`` to SAMPLE_SCHEMA; a row with a value that does not fit is rejected."""
    frame, bad, rejects = _coerce(samples)
    if bad is None:
        return frame, []
    return frame.filter(~bad), [reject for _row, reject in rejects]


def sample_misfits(samples: pl.DataFrame) -> list[tuple[int, str, str, str]]:
    """(row, field, value, reason) of each sample with a value that does not fit
    SAMPLE_SCHEMA (what :func:`coerce_samples` rejects), without writing anything."""
    return [(row, f, v, r) for row, (f, v, r, _payload) in _coerce(samples)[2]]


def _coerce(
    samples: pl.DataFrame | Sequence[GpuSample],
) -> tuple[pl.DataFrame, pl.Series | None, list[tuple[int, tuple[str, str, str, str]]]]:
    """(every row in SAMPLE_SCHEMA, misfits null; a mask of the rows with a misfit, or None
    when there is none; (row, reject) of each such row)."""
    if isinstance(samples, pl.DataFrame):
        missing = [c for c in SAMPLE_SCHEMA if c not in samples.columns]
        if missing:
            raise ValueError(
                f"sample frame lacks columns {missing}: build it with "
                "collector.records.SAMPLE_SCHEMA"
            )
        raw = samples.select(list(SAMPLE_SCHEMA))
        if raw.schema == pl.Schema(SAMPLE_SCHEMA):
            return raw, None, []
        pairs = {
            name: (raw[name], _cast(raw[name], dtype)) for name, dtype in SAMPLE_SCHEMA.items()
        }
    else:
        rows = list(samples)
        pairs = {name: _convert(name, [r[i] for r in rows]) for i, name in enumerate(SAMPLE_SCHEMA)}
    height = len(pairs["ts"][1])
    bad = pl.Series([False] * height)
    rejects: list[tuple[int, tuple[str, str, str, str]]] = []
    for name, (original, converted) in pairs.items():
        lost = converted.is_null() & original.is_not_null() & ~bad
        for idx in lost.arg_true().to_list():
            value = original[idx]
            reject = (
                name,
                str(value),
                f"{name} {value!r} is not a valid {SAMPLE_SCHEMA[name]}",
                record_payload({k: str(o[idx]) for k, (o, _c) in pairs.items()}),
            )
            rejects.append((idx, reject))
        bad = bad | lost
    return pl.DataFrame([converted for _o, converted in pairs.values()]), bad, rejects


def _cast(series: pl.Series, dtype: pl.DataType) -> pl.Series:
    try:
        return series.cast(dtype, strict=False)
    except pl.exceptions.PolarsError:
        return pl.Series(series.name, [None] * len(series), dtype=dtype)


def _convert(name: str, values: list[Any]) -> tuple[pl.Series, pl.Series]:
    """(the values as given, the values in the schema's type with misfits as null)."""
    dtype = SAMPLE_SCHEMA[name]
    if name == "ts":
        given = pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)
        return given, pl.Series(name, [v if aware(v) else None for v in values], dtype=dtype)
    try:
        series = pl.Series(name, values, dtype=dtype, strict=True)
        return series, series
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        given = pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)
        return given, pl.Series(name, [_one(v, dtype) for v in values], dtype=dtype)


def _one(value: Any, dtype: pl.DataType) -> Any:
    try:
        return pl.Series([value], dtype=dtype, strict=True)[0]
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return None


def validate_samples(
    frame: pl.DataFrame,
    now: dt.datetime,
    retention: dt.timedelta,
    extra: Sequence[FrameCheck] = (),
) -> tuple[pl.DataFrame, list[tuple[str, str, str, str]]]:
    """Split ``frame`` into valid rows and rejects (field, value, reason, payload)."""
    bad, rejects = sample_problems(frame, now, retention, extra)
    return (frame if bad is None else frame.filter(~bad)), rejects


def sample_verdicts(
    samples: Sequence[GpuSample],
    now: dt.datetime,
    retention: dt.timedelta,
    extra: Sequence[FrameCheck] = (),
) -> list[Problem | None]:
    """For each sample, in order, what ingest makes of it: None (written) or its problem.

    The same checks as :func:`coerce_samples` then :func:`validate_samples`, row by row
    (``gpuledger quarantine replay`` needs to know which record passed, not only how many).
    """
    frame, bad, lost = _coerce(samples)
    verdicts: list[Problem | None] = [None] * frame.height
    for row, (field, value, reason, _payload) in lost:
        verdicts[row] = (field, value, reason)
    kept = list(range(frame.height))
    if bad is not None:
        kept = (~bad).arg_true().to_list()
        frame = frame.filter(~bad)
    mask, rejects = sample_problems(frame, now, retention, extra)
    if mask is not None:
        for pos, (field, value, reason, _p) in zip(mask.arg_true().to_list(), rejects, strict=True):
            verdicts[kept[pos]] = (field, value, reason)
    return verdicts


def sample_problems(
    frame: pl.DataFrame,
    now: dt.datetime,
    retention: dt.timedelta,
    extra: Sequence[FrameCheck] = (),
) -> tuple[pl.Series | None, Rejects]:
    """(a mask of the invalid rows, or None when all are valid; their rejects in row order).

    A row's reason is the first check it fails; ``extra`` checks come last (the unknown-GPU
    ones: a sample that is bad anyway should say why, not only that its GPU is unknown).
    """
    oldest = now - retention
    newest = now + MAX_FUTURE_SKEW
    checks: list[FrameCheck] = [
        ("ts", pl.col("ts").is_null(), "ts is missing"),
        (
            "ts",
            pl.col("ts") < oldest,
            too_old_reason(
                retention, "the sample would be dropped from gpu_samples but kept in rollups"
            ),
        ),
        (
            "ts",
            pl.col("ts") > newest,
            FUTURE_REASON,
        ),
    ]
    for name in _REQUIRED_FIELDS:
        checks.append((name, pl.col(name).fill_null("") == "", f"{name} is empty"))
    checks.append(("gpu_index", pl.col("gpu_index").is_null(), "gpu_index is missing"))
    for name in _LABEL_FIELDS:
        checks.append(
            (
                name,
                pl.col(name).str.len_chars() > MAX_LABEL_CHARS,
                f"{name} is longer than {MAX_LABEL_CHARS} characters",
            )
        )
    for name in _RATIO_FIELDS:
        col = pl.col(name)
        checks.append(
            (
                name,
                col.is_nan() | (col < 0) | (col > 1),
                f"{name} {RATIO_REASON}",
            )
        )
    for name in (*_NONNEG_FLOAT_FIELDS, "temperature_celsius"):
        col = pl.col(name)
        checks.append((name, col.is_nan() | col.is_infinite(), f"{name} is NaN or infinite"))
    for name in _NONNEG_FLOAT_FIELDS:
        checks.append((name, pl.col(name) < 0, f"{name} must not be negative"))
    checks.append(
        (
            "memory_used_bytes",
            pl.col("memory_used_bytes") > pl.col("memory_total_bytes"),
            "memory_used_bytes exceeds memory_total_bytes",
        )
    )

    checks.extend(extra)
    flags = frame.select(
        [expr.fill_null(False).alias(f"_{i}") for i, (_, expr, _) in enumerate(checks)]
    )
    any_bad = flags.select(pl.any_horizontal(pl.all()).alias("bad"))["bad"]
    if not any_bad.any():
        return None, []
    rejects = []
    bad_rows = frame.filter(any_bad)
    bad_flags = flags.filter(any_bad)
    for row, flag_row in zip(bad_rows.iter_rows(named=True), bad_flags.iter_rows(), strict=True):
        first = next(i for i, f in enumerate(flag_row) if f)
        field, _, reason = checks[first]
        rejects.append((field, str(row[field]), reason, record_payload(row)))
    return any_bad, rejects
