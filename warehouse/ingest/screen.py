"""What ingest will quarantine in a batch for its schema alone, found as the batch arrives.

``gpuledger serve`` answers an agent's batch with 202 once it is spooled, before it is written;
the rows whose fields do not fit their record's schema
(:func:`warehouse.ingest.checks.field_problem` for the header's records, SAMPLE_SCHEMA for
samples) are quarantined when it is written, and :func:`schema_problems` names them in the
reply, so that an agent's operator learns of them at once. Other reasons to quarantine a row
(too old, a GPU with no inventory, ...) depend on the clock and on the warehouse, and are known
when the batch is written.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from collector.records import Batch
from warehouse.ingest.checks import SCHEMAS, field_problem
from warehouse.ingest.sample_checks import sample_misfits

#: The header's kinds whose records have a schema (a source's rejects are kept as text).
_KINDS = ("gpus", "nodes", "job_events", "processes", "health")


def schema_problems(batch: Batch) -> list[dict[str, Any]]:
    """Each row of ``batch`` with a field that does not fit its schema: its kind (as the batch
    names it), its index there, the field, the value and the reason."""
    found: list[dict[str, Any]] = []
    for kind in _KINDS:
        for index, record in enumerate(getattr(batch, kind)):
            if type(record) in SCHEMAS and (problem := field_problem(record)) is not None:
                found.append(_entry(kind, index, *problem))
    if isinstance(batch.samples, pl.DataFrame) and batch.samples.height:
        found += [_entry("samples", *misfit) for misfit in sample_misfits(batch.samples)]
    return found


def _entry(kind: str, index: int, field: str, value: str, reason: str) -> dict[str, Any]:
    return {"kind": kind, "index": index, "field": field, "value": value, "reason": reason}
