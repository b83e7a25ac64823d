"""Replay of public GPU cluster traces as gpuledger records.

Each importer streams a trace's CSV and yields :class:`~collector.records.Batch`\\ es of at
most ``chunk_size`` records, for ``warehouse.ingest.writer.Ingestor.write``. Trace times are seconds
from the trace's start; ``start`` (timezone-aware) anchors them. Rows that cannot become
records come back as :class:`~collector.records.Reject`\\ s, never as an exception.

**Alibaba GPU v2023** (``openb``, the FGD paper's trace; :func:`alibaba_v2023`)

* Nodes -> one ``NodeInventory`` each (pool: the GPU model, "cpu" for CPU-only nodes) and one
  ``GpuInventory`` per GPU with the synthetic uuid ``<sn>-gpu<i>``, all as of ``start``.
* Pods -> job events. ``submitted`` at creation_time; ``started`` at scheduled_time when
  there is one. Every pod in the published file has a deletion_time, the Running and Pending
  ones included; the largest time in the file is the trace's end. So: Succeeded -> finished
  and Failed -> failed at deletion_time; a Running pod deleted before the trace's end ->
  finished (reason "deleted while Running"), one deleted at the trace's end (or without a
  deletion_time) was still running; a Pending pod deleted before the end -> cancelled (reason
  "deleted while Pending"), else it still waits. A pod still running or waiting at the
  trace's end gets a ``censored`` event there: the trace observed nothing after, so what it
  held is counted up to the end and no further (never "held forever").
* GPUs: ``num_gpu``, or ``gpu_milli``/1000 for a pod sharing one GPU (then ``gpu_fraction``
  is that share too). ``gpu_spec`` is the requested model, verbatim: ``V100M16|V100M32``
  means any of them. ``qos`` -> ``priority_class``. The trace names no tenant (the tenant is
  ``__unmapped__``) and no placement: ``gpu_uuids`` and ``node`` stay empty, so allocation
  intervals come from the events only (use :func:`allocation_intervals`).

**Alibaba GPU v2025** (disaggregated DLRM serving; :func:`alibaba_v2025`)

* One job per instance (``instance_sn``), ``workload_type`` "inference", priority class "LS",
  pool = role (``CN`` CPU node, ``HN`` GPU node); ``gpus_requested`` = gpu_request.
* Tenant: each service (``app_name``) is its own tenant, org = project = app_name
  (``app_7/app_7``), so that org and project roll-ups both show the services; pass ``org`` to
  group every service under one org instead (``dlrm/app_7``).
* Window: from ``start`` (offset 0) to the largest time in the file. ``submitted`` at
  creation_time; ``started`` at scheduled_time, or at the window's start when both are empty
  (the instance ran before the window; reason "scheduled before the trace window");
  ``finished`` at deletion_time; ``censored`` at the window's end when it is empty (still
  running or waiting when the trace ends). GPU-hours over a span are therefore the instance's
  held time clipped to that span and to the trace (:func:`gpu_hours`).
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from collector.records import (
    TERMINAL_EVENTS,
    Batch,
    GpuInventory,
    JobEvent,
    NodeInventory,
    Reject,
)
from collector.tenancy import UNMAPPED
from gpuledger_errors import InputError

V2023_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
V2023_POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
V2025_COLUMNS = (
    "instance_sn",
    "role",
    "app_name",
    "gpu_request",
    "creation_time",
    "scheduled_time",
    "deletion_time",
)
_MS = dt.timedelta(milliseconds=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class TraceError(InputError):
    """A trace file that cannot be read at all (missing, or not the expected columns)."""


class _BadRow(Exception):
    def __init__(self, field: str, value: str, reason: str):
        super().__init__(reason)
        self.field, self.value, self.reason = field, value, reason


# -- reading ---------------------------------------------------------------------------------
def _rows(path: str | Path, required: Sequence[str]) -> Iterator[tuple[dict[str, str], str]]:
    """(row, raw line) for each data row; checks the header once. A line that is not CSV
    (a field past the csv module's limit) or not UTF-8 comes back as a bad row (``__bad__``,
    the value, and ``__why__``), so that it is rejected and the rest read."""
    path = Path(path)
    try:
        # surrogateescape: a byte that is not UTF-8 spoils its line, not the whole file
        handle = path.open(newline="", encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise TraceError(f"cannot open trace file {path}: {e.strerror}") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
        except csv.Error:
            header = None
        missing = [c for c in required if c not in (header or [])]
        if header is None or missing:
            raise TraceError(
                f"{path} lacks the columns {', '.join(missing or required)}: is "
                "it the right trace file?"
            )
        while True:
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                yield {"__bad__": f"line {reader.line_num}", "__why__": f"not CSV: {e}"}, ""
                continue
            raw = ",".join(values)
            if not _utf8(raw):
                text = raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                yield {"__bad__": f"line {reader.line_num}", "__why__": "not UTF-8 text"}, text
            elif len(values) != len(header):
                yield {"__bad__": str(len(values))}, raw
            else:
                yield dict(zip(header, values, strict=True)), raw


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int(row: dict[str, str], field: str, lo: int = 0) -> int:
    text = row[field].strip()
    try:
        value = int(text)
    except ValueError:
        raise _BadRow(field, text, f"{field} must be a whole number") from None
    if value < lo:
        raise _BadRow(field, text, f"{field} must be >= {lo}")
    return value


def _offset(row: dict[str, str], field: str) -> int | None:
    """Seconds from trace start (may be fractional) -> whole milliseconds; "" -> None."""
    text = row[field].strip()
    if text in ("", "nan", "NaN"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise _BadRow(field, text, f"{field} must be seconds from the trace start") from None
    if not math.isfinite(value) or value < 0:
        raise _BadRow(field, text, f"{field} must be a non-negative number of seconds")
    return round(value * 1000)


def _check_aware(start: dt.datetime) -> None:
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware, e.g. 2023-01-01T00:00:00+00:00")


def _order(row: dict[str, str], *fields: str) -> None:
    """Reject a row whose named times (those present) go backwards."""
    times = [(f, _offset(row, f)) for f in fields]
    present = [(f, t) for f, t in times if t is not None]
    for (f1, t1), (f2, t2) in itertools.pairwise(present):
        if t2 < t1:  # type: ignore[operator]
            raise _BadRow(f2, row[f2], f"{f2} is before {f1}")


class _Chunker:
    """Collects records of every kind and cuts a Batch each ``size`` records."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.size = size
        self._reset()

    def _reset(self) -> None:
        self.kinds: dict[str, list[Any]] = {
            "gpus": [],
            "nodes": [],
            "job_events": [],
            "rejects": [],
        }
        self.count = 0

    def add(self, kind: str, records: Iterable[Any]) -> Iterator[Batch]:
        for record in records:
            self.kinds[kind].append(record)
            self.count += 1
            if self.count >= self.size:
                yield self.flush()

    def flush(self) -> Batch:
        batch = Batch(**self.kinds)
        self._reset()
        return batch


# -- Alibaba v2023 -----------------------------------------------------------------------------
def alibaba_v2023(
    nodes_csv: str | Path,
    pods_csv: str | Path,
    start: dt.datetime,
    cluster: str = "alibaba-v2023",
    *,
    chunk_size: int = 5000,
) -> Iterator[Batch]:
    """Inventory and pod events of the Alibaba openb trace (see the module docstring)."""
    _check_aware(start)
    source = "alibaba-v2023"
    pods = list(_rows(pods_csv, V2023_POD_COLUMNS))  # two passes: the end comes first
    chunker = _Chunker(chunk_size)
    for row, raw in _rows(nodes_csv, V2023_NODE_COLUMNS):
        try:
            node, gpus = _v2023_node(row, start, cluster, source)
        except _BadRow as bad:
            yield from chunker.add("rejects", [_reject(source, "node_inventory", bad, raw)])
            continue
        yield from chunker.add("nodes", [node])
        yield from chunker.add("gpus", gpus)
    end_ms = max(
        (
            t
            for row, _ in pods
            if "__bad__" not in row
            for t in _safe_offsets(row, ("creation_time", "deletion_time", "scheduled_time"))
        ),
        default=0,
    )
    for row, raw in pods:
        try:
            events = _v2023_pod(row, start, cluster, source, end_ms)
        except _BadRow as bad:
            yield from chunker.add("rejects", [_reject(source, "job_event", bad, raw)])
            continue
        yield from chunker.add("job_events", events)
    if chunker.count:
        yield chunker.flush()


def _safe_offsets(row: dict[str, str], fields: Sequence[str]) -> Iterator[int]:
    for f in fields:
        try:
            if (t := _offset(row, f)) is not None:
                yield t
        except _BadRow:
            continue


def _reject(source: str, kind: str, bad: _BadRow, raw: str) -> Reject:
    return Reject(source, kind, bad.field, bad.value, bad.reason, raw)


def _bad_shape(row: dict[str, str]) -> None:
    if "__bad__" in row:
        why = row.get("__why__", "wrong number of columns for the header")
        raise _BadRow("line", row["__bad__"], why)


def _v2023_node(
    row: dict[str, str], start: dt.datetime, cluster: str, source: str
) -> tuple[NodeInventory, list[GpuInventory]]:
    _bad_shape(row)
    sn = row["sn"].strip()
    if not sn:
        raise _BadRow("sn", "", "sn (the node name) is empty")
    gpus = _int(row, "gpu")
    cpu_milli = _int(row, "cpu_milli")
    memory_mib = _int(row, "memory_mib")
    model = row["model"].strip()
    if gpus and not model:
        raise _BadRow("model", "", "a node with GPUs must name their model")
    pool = model or "cpu"
    node = NodeInventory(
        ts=start,
        cluster=cluster,
        pool=pool,
        node=sn,
        gpu_model=model,
        gpu_count=gpus,
        cpu_milli=cpu_milli,
        memory_bytes=memory_mib * 2**20,
        source=source,
    )
    return node, [
        GpuInventory(
            ts=start,
            cluster=cluster,
            pool=pool,
            node=sn,
            gpu_uuid=f"{sn}-gpu{i}",
            gpu_index=i,
            gpu_model=model,
            source=source,
        )
        for i in range(gpus)
    ]


_V2023_END = {
    "Succeeded": ("finished", ""),
    "Failed": ("failed", "Failed"),
    "Running": ("finished", "deleted while Running"),
    "Pending": ("cancelled", "deleted while Pending"),
}


def _v2023_pod(
    row: dict[str, str], start: dt.datetime, cluster: str, source: str, end_ms: int
) -> list[JobEvent]:
    _bad_shape(row)
    name = row["name"].strip()
    if not name:
        raise _BadRow("name", "", "name (the pod) is empty")
    phase = row["pod_phase"].strip()
    if phase not in _V2023_END:
        raise _BadRow("pod_phase", phase, f"pod_phase must be one of {', '.join(_V2023_END)}")
    num_gpu = _int(row, "num_gpu")
    gpu_milli = _int(row, "gpu_milli")
    if num_gpu == 1 and not 0 < gpu_milli <= 1000:
        raise _BadRow("gpu_milli", row["gpu_milli"], "gpu_milli must be 1-1000 for a 1-GPU pod")
    share = gpu_milli / 1000 if num_gpu == 1 else 1.0
    created, scheduled, deleted = (
        _offset(row, f) for f in ("creation_time", "scheduled_time", "deletion_time")
    )
    if created is None:
        raise _BadRow("creation_time", "", "creation_time is empty")
    _order(row, "creation_time", "scheduled_time", "deletion_time")
    if phase in ("Succeeded", "Failed") and deleted is None:
        raise _BadRow("deletion_time", "", f"a {phase} pod must have a deletion_time")
    base = JobEvent(
        ts=start,
        cluster=cluster,
        job_id=name,
        event="submitted",
        name=name,
        tenant=UNMAPPED,
        org=UNMAPPED,
        priority_class=row["qos"].strip(),
        gpu_model=row["gpu_spec"].strip(),
        gpus_requested=num_gpu * share,
        gpu_fraction=share,
        source=source,
    )
    events = [base._replace(ts=_at(start, created))]
    started = _at(start, scheduled) if scheduled is not None else None
    if started is not None:
        events.append(base._replace(ts=started, event="started"))
    still_there = phase in ("Running", "Pending") and (deleted is None or deleted >= end_ms)
    if still_there:
        events.append(_censored(base, start, end_ms, started, f"still {phase}"))
    elif deleted is not None:
        event, reason = _V2023_END[phase]
        if started is None and event != "cancelled":
            event, reason = "cancelled", f"deleted before being scheduled ({phase})"
        events.append(
            base._replace(ts=_at(start, deleted), event=event, started_at=started, reason=reason)
        )
    return events


def _censored(
    base: JobEvent, start: dt.datetime, end_ms: int, started: dt.datetime | None, state: str
) -> JobEvent:
    """The trace's end for a job it leaves open: what the job held or waited is known up to
    there only, so its interval ends there, marked as cut short rather than finished."""
    return base._replace(
        ts=_at(start, end_ms),
        event="censored",
        started_at=started,
        reason=f"{state} when the trace ends (its observation end): nothing is known after",
    )


def _at(start: dt.datetime, ms: int) -> dt.datetime:
    return start + ms * _MS


# -- Alibaba v2025 -----------------------------------------------------------------------------
def alibaba_v2025(
    csv_path: str | Path,
    start: dt.datetime,
    cluster: str = "alibaba-v2025",
    *,
    chunk_size: int = 5000,
    org: str | None = None,
) -> Iterator[Batch]:
    """Instance events of the Alibaba GPU-disaggregated DLRM trace (see the module docstring)."""
    _check_aware(start)
    source = "alibaba-v2025"
    rows = list(_rows(csv_path, V2025_COLUMNS))  # two passes: the end comes first
    end_ms = _v2025_end_ms(rows)
    chunker = _Chunker(chunk_size)
    seen: set[str] = set()
    for row, raw in rows:
        try:
            events = _v2025_instance(row, start, cluster, source, org, seen, end_ms)
        except _BadRow as bad:
            yield from chunker.add("rejects", [_reject(source, "job_event", bad, raw)])
            continue
        yield from chunker.add("job_events", events)
    if chunker.count:
        yield chunker.flush()


def alibaba_v2025_window(
    csv_path: str | Path, start: dt.datetime
) -> tuple[dt.datetime, dt.datetime]:
    """The trace's window: ``start`` to ``start`` + the largest time in the file."""
    _check_aware(start)
    return start, _at(start, _v2025_end_ms(_rows(csv_path, V2025_COLUMNS)))


def _v2025_end_ms(rows: Iterable[tuple[dict[str, str], str]]) -> int:
    """The largest time in the file: the trace's observation end."""
    return max(
        (
            t
            for row, _ in rows
            if "__bad__" not in row
            for t in _safe_offsets(row, ("creation_time", "scheduled_time", "deletion_time"))
        ),
        default=0,
    )


def _v2025_instance(
    row: dict[str, str],
    start: dt.datetime,
    cluster: str,
    source: str,
    org: str | None,
    seen: set[str],
    end_ms: int,
) -> list[JobEvent]:
    _bad_shape(row)
    sn, role, app = (row[f].strip() for f in ("instance_sn", "role", "app_name"))
    if not sn:
        raise _BadRow("instance_sn", "", "instance_sn is empty")
    if sn in seen:
        raise _BadRow("instance_sn", sn, "instance_sn appears twice")
    if role not in ("CN", "HN"):
        raise _BadRow("role", role, "role must be CN or HN")
    if not app:
        raise _BadRow("app_name", "", "app_name is empty")
    gpus = _int(row, "gpu_request")
    created, scheduled, deleted = (
        _offset(row, f) for f in ("creation_time", "scheduled_time", "deletion_time")
    )
    _order(row, "creation_time", "scheduled_time", "deletion_time")
    seen.add(sn)
    org_name = org or app
    base = JobEvent(
        ts=start,
        cluster=cluster,
        job_id=sn,
        event="submitted",
        name=sn,
        tenant=f"{org_name}/{app}",
        org=org_name,
        project=app,
        pool=role,
        queue=app,
        priority_class="LS",
        workload_type="inference",
        gpus_requested=float(gpus),
        source=source,
    )
    events = []
    if created is not None:
        events.append(base._replace(ts=_at(start, created)))
    started: dt.datetime | None = None
    if scheduled is not None:
        started = _at(start, scheduled)
        events.append(base._replace(ts=started, event="started"))
    elif created is None:
        started = start
        events.append(
            base._replace(ts=start, event="started", reason="scheduled before the trace window")
        )
    if deleted is not None:
        event = "finished" if started is not None else "cancelled"
        events.append(
            base._replace(ts=_at(start, deleted), event=event, started_at=started, reason="deleted")
        )
    else:
        state = "still running" if started is not None else "still waiting"
        events.append(_censored(base, start, end_ms, started, state))
    return events


# -- GPU-hours from job events (pure) ----------------------------------------------------------
class GpuInterval(NamedTuple):
    """One job run's hold on GPUs: [start, end) (end None: still held), ``gpus`` GPUs."""

    key: str
    start: dt.datetime
    end: dt.datetime | None
    gpus: float


def allocation_intervals(
    events: Iterable[JobEvent], key: Callable[[JobEvent], str] = lambda e: e.tenant
) -> list[GpuInterval]:
    """The GPU-holding intervals that job events imply, one per (cluster, job, attempt).

    A run holds ``gpus_requested`` GPUs (already fractional for shared GPUs) from its
    ``started`` event (or a terminal event's ``started_at``) to its terminal event. Runs that
    never started hold nothing.
    """
    starts: dict[tuple[str, str, int], JobEvent] = {}
    ends: dict[tuple[str, str, int], JobEvent] = {}
    for e in events:
        k = (e.cluster, e.job_id, e.attempt)
        if e.event == "started":
            starts[k] = e
        elif e.event in TERMINAL_EVENTS:
            ends[k] = e
    out = []
    for k in starts.keys() | {k for k, e in ends.items() if e.started_at is not None}:
        opener, closer = starts.get(k), ends.get(k)
        first = opener or closer
        assert first is not None
        begin = opener.ts if opener else closer.started_at  # type: ignore[union-attr]
        assert begin is not None
        if first.gpus_requested > 0:
            out.append(
                GpuInterval(key(first), begin, closer.ts if closer else None, first.gpus_requested)
            )
    out.sort(key=lambda iv: (iv.key, iv.start))
    return out


def gpu_hours(intervals: Iterable[GpuInterval], a: dt.datetime, b: dt.datetime) -> dict[str, float]:
    """GPU-hours per key over [a, b): each interval clipped to the span (open ones run to b).

    Sums are kept in whole milli-GPU-milliseconds, so splitting a span into pieces adds up to
    the same integers as the whole span; only the final division to hours rounds.
    """
    lo_ms, hi_ms = _ms(a), _ms(b)
    acc: dict[str, int] = defaultdict(int)
    for iv in intervals:
        lo = max(_ms(iv.start), lo_ms)
        hi = min(_ms(iv.end), hi_ms) if iv.end is not None else hi_ms
        if hi > lo:
            acc[iv.key] += (hi - lo) * round(iv.gpus * 1000)
    return {k: v / 3_600_000_000 for k, v in sorted(acc.items())}


def gpu_hours_by_tenant(
    events: Iterable[JobEvent], a: dt.datetime, b: dt.datetime
) -> dict[str, float]:
    """GPU-hours per tenant over [a, b) from job events (for v2025: per app)."""
    return gpu_hours(allocation_intervals(events), a, b)


def _ms(t: dt.datetime) -> int:
    return (t - _EPOCH) // _MS
