"""Slurm jobs from ``sacct``, and the per-GPU job mapping files of dcgm-exporter's HPC mode.

:class:`SlurmCollector` polls the accounting database incrementally::

    sacct --parsable2 --noheader --allusers --duplicates --array \\
          --format=JobID,JobIDRaw,JobName,...,NodeList \\
          --starttime=<high-water mark - overlap> --endtime=<now>

Without ``--state``, sacct returns every job that was pending, running or ended inside the
window, so a long job comes back on every poll; the collector emits each lifecycle event once,
keyed by (job id, attempt, event, time), however often and however overlapping the windows.
``--duplicates`` keeps the earlier runs of requeued jobs (their State is ``REQUEUED``);
``--array`` puts each array task on its own line.

Conventions worth knowing downstream:

* ``job_id`` is sacct's ``JobID`` as users see it: ``123``, ``123_4`` (array task), ``123+0``
  (heterogeneous component). It never changes, whereas an array task's ``JobIDRaw`` does when
  the task leaves the pending array record. :attr:`SlurmCollector.job_ids` maps the raw ids
  (``$SLURM_JOB_ID``, what prolog scripts write into the mapping files) back to it.
* ``attempt`` is the ``Restarts`` column (0 for the first run).
* Times without a zone are in the Slurm controller's zone (a parameter); ``Unknown``/``None``
  are missing. A job that never got nodes (``NodeList`` "None assigned") has no ``started``.
* Tenant from the account through :class:`~collector.tenancy.TenantMapper`; ``pool`` is the
  (first) partition, ``queue`` the partition as printed, ``priority_class`` the QOS.
* GPUs from ``AllocTRES`` (``ReqTRES`` while pending): ``gres/gpu=N`` wins, else the typed
  counts ``gres/gpu:<type>=N`` are summed; one type names ``gpu_model``.
* sacct knows no GPU UUIDs, so ``gpu_uuids`` stays empty (no allocation interval is opened)
  unless a ``gpu_uuids_for`` resolver is given (e.g. built from node agents' mapping files).
* Utilisation (``gres/gpuutil``, ``gres/gpumem`` in ``TRESUsageInAve`` of the step rows) comes
  back as one :class:`SlurmJobUsage` per job, frozen (``final``) once the job has ended.

The pure field parsers and the mapping-file readers live in :mod:`collector.slurm.parse`
and are re-exported here.
"""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from collector.records import TERMINAL_EVENTS, Batch, JobEvent, Reject
from collector.slurm.parse import (
    STATE_EVENTS,
    GpuSlot,
    enrich_job_ids,
    expand_hostlist,
    gpus_by_job,
    parse_size_bytes,
    parse_state,
    parse_time,
    parse_tres,
    read_job_mapping,
    tres_gpus,
)
from collector.tenancy import TenantMapper
from gpuledger_errors import SourceError

__all__ = [
    "SACCT_FIELDS",
    "STATE_EVENTS",
    "GpuSlot",
    "SacctRunner",
    "SlurmCollector",
    "SlurmError",
    "SlurmJobUsage",
    "SlurmPoll",
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

log = logging.getLogger("collector.slurm")  # one logger for the Slurm source

UTC = dt.UTC
SOURCE = "slurm"

#: The ``--format`` fields, in the order the parser expects them.
SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "JobName",
    "Account",
    "User",
    "Partition",
    "QOS",
    "Priority",
    "Submit",
    "Start",
    "End",
    "State",
    "Reason",
    "Restarts",
    "ExitCode",
    "ReqTRES",
    "AllocTRES",
    "TRESUsageInAve",
    "NodeList",
)
_F = {name: i for i, name in enumerate(SACCT_FIELDS)}

_INT32_MAX = 2**31 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)  # placeholder ts, replaced per event

SacctRunner = Callable[[Sequence[str]], str]


class SlurmError(SourceError):
    """sacct could not be run or returned an error; the poll window is retried next time."""


class SlurmJobUsage(NamedTuple):
    """GPU usage of one job run, aggregated over its steps (``TRESUsageInAve``).

    ``gpu_util_ratio`` (0-1) is the step-duration-weighted mean of ``gres/gpuutil`` over the
    steps that used a GPU (extern steps and idle launcher steps excluded when another step
    did); ``gpu_mem_bytes`` the largest ``gres/gpumem`` of a step. ``final`` once the job has
    ended: that row is the job's frozen summary.
    """

    cluster: str
    job_id: str
    attempt: int
    gpu_util_ratio: float | None
    gpu_mem_bytes: int | None
    steps: int
    final: bool


class SlurmPoll(NamedTuple):
    """What one poll produced: new records, the usage summaries, and the window it asked for."""

    batch: Batch
    usage: tuple[SlurmJobUsage, ...]
    window_start: dt.datetime
    window_end: dt.datetime


# -- one sacct line ------------------------------------------------------------------------------
class _Job(NamedTuple):
    job_id: str
    attempt: int
    events: list[JobEvent]
    final: bool


class _Step(NamedTuple):
    job_id: str
    name: str
    util_percent: float | None
    mem_bytes: int | None
    seconds: float


class SlurmCollector:
    """Slurm job lifecycle events and GPU usage summaries from ``sacct``.

    ``sacct`` is the command's argv prefix (``["sacct"]``, ``["ssh", "head", "sacct"]``) or a
    callable that takes the argument list and returns sacct's standard output (tests pass
    recorded output). ``since`` is the high-water mark to resume from (e.g. persisted by the
    caller); without it the first poll looks back ``lookback``. Each poll asks for
    [high-water mark - ``overlap``, now] so that records slurmdbd writes late are not missed.
    Emitted events are remembered (to emit each once) until their run ended ``forget_after``
    before the window.
    """

    def __init__(
        self,
        cluster: str,
        tenant_mapper: TenantMapper,
        sacct: Sequence[str] | SacctRunner = ("sacct",),
        *,
        since: dt.datetime | None = None,
        lookback: dt.timedelta = dt.timedelta(days=1),
        overlap: dt.timedelta = dt.timedelta(minutes=10),
        timezone: dt.tzinfo = UTC,
        extra_args: Sequence[str] = (),
        timeout_s: float = 120.0,
        forget_after: dt.timedelta = dt.timedelta(days=1),
        gpu_uuids_for: Callable[[str, str], Sequence[str]] | None = None,
    ):
        if since is not None and since.tzinfo is None:
            raise ValueError("since must be timezone-aware (e.g. 2024-03-01T00:00:00+00:00)")
        self.cluster = cluster
        self.tenants = tenant_mapper
        self.sacct = sacct
        self.high_water_mark = since
        self.lookback = lookback
        self.overlap = overlap
        self.tz = timezone
        self.extra_args = tuple(extra_args)
        self.timeout_s = timeout_s
        self.gpu_uuids_for = gpu_uuids_for
        self.forget_after = forget_after
        #: raw job id ($SLURM_JOB_ID) -> JobID as emitted, for mapping-file enrichment.
        self.job_ids: dict[str, str] = {}
        self._seen: dict[tuple[str, int], set[tuple[str, dt.datetime]]] = {}
        self._ended: dict[tuple[str, int], dt.datetime] = {}
        self._final_usage: set[tuple[str, int]] = set()
        self._raw_of: dict[tuple[str, int], str] = {}

    # -- the poll --------------------------------------------------------------------------
    def sacct_args(self, start: dt.datetime, end: dt.datetime) -> list[str]:
        """The sacct arguments for the window [start, end] (times in the cluster's zone)."""

        def fmt(t: dt.datetime) -> str:
            return t.astimezone(self.tz).strftime("%Y-%m-%dT%H:%M:%S")

        return [
            "--parsable2",
            "--noheader",
            "--allusers",
            "--duplicates",
            "--array",
            f"--format={','.join(SACCT_FIELDS)}",
            f"--starttime={fmt(start)}",
            f"--endtime={fmt(end)}",
            *self.extra_args,
        ]

    def _run(self, args: list[str]) -> str:
        if callable(self.sacct):
            return self.sacct(args)
        argv = [*self.sacct, *args]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, check=False, timeout=self.timeout_s
            )
        except FileNotFoundError:
            raise SlurmError(
                f"{argv[0]!r} not found: install the Slurm client on this host or "
                "pass the full path of sacct"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(
                f"sacct did not answer within {self.timeout_s} s; is slurmdbd reachable?"
            ) from None
        if done.returncode != 0:
            raise SlurmError(f"sacct exited with {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def poll(self, now: dt.datetime) -> SlurmPoll:
        """Run sacct over the window since the last poll; return only what is new.

        The high-water mark advances only after sacct answered, so a failed poll (SlurmError)
        is retried over the same window.
        """
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        hwm = self.high_water_mark or now - self.lookback
        start = min(hwm - self.overlap, now)
        text = self._run(self.sacct_args(start, now))
        events, usage, rejects = self.parse(text, now)
        self.high_water_mark = max(hwm, now)
        self._prune(start)
        return SlurmPoll(Batch(job_events=events, rejects=rejects), tuple(usage), start, now)

    def collect(self, now: dt.datetime) -> Batch:
        """The records of :meth:`poll` (usage summaries are in ``poll(now).usage``)."""
        return self.poll(now).batch

    def _prune(self, window_start: dt.datetime) -> None:
        """Forget runs that ended ``forget_after`` before the window: sacct, which returns
        the jobs active in the window, will not return them again."""
        horizon = window_start - self.forget_after
        for key in [k for k, end in self._ended.items() if end < horizon]:
            self._seen.pop(key, None)
            self._ended.pop(key, None)
            self._final_usage.discard(key)
            if self.job_ids.get(raw := self._raw_of.pop(key, "")) == key[0]:
                del self.job_ids[raw]

    # -- parsing ---------------------------------------------------------------------------
    def parse(
        self, text: str, now: dt.datetime
    ) -> tuple[list[JobEvent], list[SlurmJobUsage], list[Reject]]:
        """New events, usage summaries and rejects from sacct's ``--parsable2`` output.

        Events already emitted by an earlier call are left out. Step lines belong to the job
        line before them with the same JobID (sacct prints a job, then its steps).
        """
        events: list[JobEvent] = []
        rejects: list[Reject] = []
        jobs: dict[tuple[str, int], _Job] = {}
        latest: dict[str, _Job] = {}
        steps: dict[tuple[str, int], list[_Step]] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                cols = line.split("|")
                if len(cols) != len(SACCT_FIELDS):
                    raise _Bad(
                        "line",
                        str(len(cols)),
                        f"expected {len(SACCT_FIELDS)} '|'-separated fields "
                        f"({','.join(SACCT_FIELDS)})",
                    )
                job_id, _, step = cols[_F["JobID"]].partition(".")
                if not job_id:
                    raise _Bad("JobID", cols[_F["JobID"]], "JobID is empty")
                if step:
                    parent = latest.get(job_id)
                    attempt = parent.attempt if parent else 0
                    steps.setdefault((job_id, attempt), []).append(
                        self._step(cols, job_id, step, now)
                    )
                else:
                    job = self._job(cols, job_id)
                    jobs[(job_id, job.attempt)] = latest[job_id] = job
                    events.extend(self._new(job))
            except _Bad as bad:
                rejects.append(Reject(SOURCE, "job_event", bad.field, bad.value, bad.reason, line))
        usage = self._usage(jobs, steps)
        return events, usage, rejects

    def _job(self, cols: list[str], job_id: str) -> _Job:
        get = cols.__getitem__
        state_text = get(_F["State"])
        try:
            state, detail = parse_state(state_text)
        except ValueError as e:
            raise _Bad("State", state_text, str(e)) from None
        times = {}
        for name in ("Submit", "Start", "End"):
            try:
                times[name] = parse_time(get(_F[name]), self.tz)
            except ValueError as e:
                raise _Bad(name, get(_F[name]), str(e)) from None
        tres_field = "AllocTRES" if get(_F["AllocTRES"]).strip() else "ReqTRES"
        try:
            gpus, model = tres_gpus(parse_tres(get(_F[tres_field])))
        except ValueError as e:
            raise _Bad(tres_field, get(_F[tres_field]), str(e)) from None
        try:
            hosts = expand_hostlist(get(_F["NodeList"]))
        except ValueError as e:
            raise _Bad("NodeList", get(_F["NodeList"]), str(e)) from None
        priority = _int_or_zero(get(_F["Priority"]), "Priority")
        attempt = _int_or_zero(get(_F["Restarts"]), "Restarts")
        terminal = STATE_EVENTS[state]
        if terminal is not None and times["End"] is None:
            raise _Bad("End", get(_F["End"]), f"a {state} job must have an End time")

        account = get(_F["Account"]).strip()
        tenant = self.tenants.resolve(slurm_account=account)
        org, project = TenantMapper.split(tenant)
        partition = get(_F["Partition"]).strip()
        node = hosts[0] if hosts else ""
        started = times["Start"] if hosts and state != "PENDING" else None
        uuids = tuple(self.gpu_uuids_for(job_id, node)) if self.gpu_uuids_for and started else ()
        base = JobEvent(
            ts=_EPOCH,
            cluster=self.cluster,
            job_id=job_id,
            event="submitted",
            attempt=attempt,
            name=get(_F["JobName"]),
            tenant=tenant,
            org=org,
            project=project,
            user=get(_F["User"]).strip(),
            pool=partition.split(",")[0],
            queue=partition,
            priority=min(priority, _INT32_MAX),
            priority_class=get(_F["QOS"]).strip(),
            gpu_model=model,
            gpus_requested=gpus,
            node=node,
            source=SOURCE,
        )
        out = []
        reason = get(_F["Reason"]).strip()
        if times["Submit"] is not None:
            out.append(base._replace(ts=times["Submit"], reason="" if reason == "None" else reason))
        if started is not None:
            out.append(base._replace(ts=started, event="started", gpu_uuids=uuids))
        if terminal is not None and times["End"] is not None:
            event, why = terminal
            if state == "CANCELLED" and detail.startswith("by "):
                why = f"cancelled by uid {detail[3:].strip()}"
            elif event == "failed" and state == "FAILED":
                why = f"FAILED (exit code {get(_F['ExitCode']).strip()})"
            out.append(
                base._replace(
                    ts=times["End"], event=event, gpu_uuids=uuids, started_at=started, reason=why
                )
            )
        raw = get(_F["JobIDRaw"]).strip()
        if raw and started is not None:  # only jobs on GPUs appear in mapping files
            self.job_ids[raw] = job_id
            self._raw_of[(job_id, attempt)] = raw
        return _Job(job_id, attempt, out, terminal is not None)

    def _new(self, job: _Job) -> list[JobEvent]:
        key = (job.job_id, job.attempt)
        seen = self._seen.setdefault(key, set())
        new = []
        for e in job.events:
            if (e.event, e.ts) not in seen:
                seen.add((e.event, e.ts))
                new.append(e)
            if e.event in TERMINAL_EVENTS:
                self._ended[key] = e.ts
        return new

    def _step(self, cols: list[str], job_id: str, step: str, now: dt.datetime) -> _Step:
        text = cols[_F["TRESUsageInAve"]]
        try:
            tres = parse_tres(text)
            util = float(tres["gres/gpuutil"]) if "gres/gpuutil" in tres else None
            mem = parse_size_bytes(tres["gres/gpumem"]) if "gres/gpumem" in tres else None
        except ValueError as e:
            raise _Bad("TRESUsageInAve", text, str(e)) from None
        try:
            start = parse_time(cols[_F["Start"]], self.tz)
            end = parse_time(cols[_F["End"]], self.tz) or now
        except ValueError as e:
            raise _Bad("Start/End", f"{cols[_F['Start']]}|{cols[_F['End']]}", str(e)) from None
        seconds = max((end - start).total_seconds(), 0.0) if start else 0.0
        return _Step(job_id, step, util, mem, seconds)

    def _usage(
        self, jobs: Mapping[tuple[str, int], _Job], steps: Mapping[tuple[str, int], list[_Step]]
    ) -> list[SlurmJobUsage]:
        out = []
        for (job_id, attempt), job_steps in steps.items():
            job = jobs.get((job_id, attempt))
            final = bool(job and job.final)
            if (job_id, attempt) in self._final_usage:
                continue
            gpu_steps = [
                s
                for s in job_steps
                if s.name != "extern" and (s.util_percent is not None or s.mem_bytes is not None)
            ]
            if not gpu_steps:
                continue
            active = [s for s in gpu_steps if (s.util_percent or 0) > 0 or (s.mem_bytes or 0) > 0]
            chosen = active or gpu_steps
            with_util = [s for s in chosen if s.util_percent is not None]
            ratio = None
            if with_util:
                weights = [s.seconds for s in with_util]
                if sum(weights) <= 0:
                    weights = [1.0] * len(with_util)
                mean = sum(
                    w * (s.util_percent or 0.0) for w, s in zip(weights, with_util, strict=True)
                )
                ratio = min(max(mean / sum(weights) / 100.0, 0.0), 1.0)
            mems = [s.mem_bytes for s in chosen if s.mem_bytes is not None]
            out.append(
                SlurmJobUsage(
                    self.cluster,
                    job_id,
                    attempt,
                    ratio,
                    max(mems) if mems else None,
                    len(chosen),
                    final,
                )
            )
            if final:
                self._final_usage.add((job_id, attempt))
        return out


class _Bad(Exception):
    def __init__(self, field: str, value: str, reason: str):
        super().__init__(reason)
        self.field, self.value, self.reason = field, value, reason


def _int_or_zero(text: str, field: str) -> int:
    text = text.strip()
    if not text:
        return 0
    if not text.isdigit():
        raise _Bad(field, text, f"{field} must be a whole number")
    return int(text)
