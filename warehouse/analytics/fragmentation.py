"""Fragmentation: free GPU capacity that the typical job cannot use (the FGD measure).

The measure is the one of "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC'23), as coded in
hkust-adsl/kubernetes-scheduler-simulator ``pkg/utils/frag.go`` (see tests/data/README.md):

    for node n and each typical task m with popularity p_m:
        frag_n(m) = every free GPU share on n            if m cannot run on n at all
                  = the free shares of the GPUs on n     if it can
                    whose free share is below m's per-GPU request
    F_n = sum_m p_m * frag_n(m)            cluster fragmentation = sum_n F_n  (in GPUs)

Definitions used here (each one a choice the paper leaves to the reader):

- Free state at an instant t: the healthy GPUs (or MIG slices, by ``capacity_fraction``) whose
  latest inventory row at or before t says healthy, on nodes whose latest state at or before t
  is ready, minus the shares held by the allocations open at t (start <= t < end). Unhealthy,
  down and retired capacity is not free and never counts as fragment: the ledger calls it
  unhealthy capacity. Allocations whose source named no GPU cannot be placed on a node; the
  GPUs they hold are reported as ``unplaced_held_gpus`` so the reader knows what is missing.
- Typical tasks: the request shapes (GPU model, GPUs on one node, share of each GPU) of the job
  attempts that *started* in the trailing ``window`` (t - window, t]; popularity = the share of
  attempts with that shape. A task can run on n when n has at least ``gpus`` GPUs whose free
  share is at least the task's share, and n has its GPU model (a task with model "" runs on
  any). A task asking for more GPUs than n has schedulable ones (a multi-node gang) is taken to
  need every schedulable GPU of n whole.
- ``scope``: ``"model"`` (default) measures each node only against the tasks that ask for its
  GPU model or for any model, popularity renormalised among them, so that a pool is not called
  fragmented because jobs for another model cannot use it (a node no typical task targets has
  F_n = 0). ``"cluster"`` is the paper's literal form: a task for another model cannot run on
  n, so all of n's free capacity is fragment for it.
- Stranded GPU-hours over [start, end): F(t_i) sampled at t_i = start + i * step and held for
  the step (the last one clipped at ``end``), i.e. sum_i F(t_i) * min(step, end - t_i) / 1 h.
- Attribution: each node's F_n is split among the tenants in proportion to the shares they
  hold on that node's schedulable GPUs; the fragment of a node nobody holds anything on goes to
  ``__unallocated__``. The tenant rows therefore sum to the cluster's FGD.

ClickHouse computes the free state and the task mix (``sql/frag_*.sql``); the measure itself is
the pure functions :func:`task_fragment`, :func:`node_fgd` and :func:`evaluate`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import polars as pl

from gpuledger_errors import InputError
from warehouse import queries
from warehouse.analytics.tenancy import in_tenant
from warehouse.client import Warehouse
from warehouse.times import FIRST_INSTANT

UNALLOCATED = "__unallocated__"
SCOPES = ("model", "cluster")
MIX_EVENTS = ("started", "submitted")
EPS = 1e-6
DEFAULT_WINDOW = dt.timedelta(days=7)
_HOUR = dt.timedelta(hours=1)


class FragmentationError(InputError):
    """A fragmentation request that cannot be answered as asked (bad scope, window, time)."""


@dataclasses.dataclass(frozen=True)
class Task:
    """A typical task: ``gpus`` GPUs on one node, ``share`` of each, of ``gpu_model``."""

    gpus: int
    share: float
    gpu_model: str  # "" runs on any model
    popularity: float


# -- the measure (pure) -----------------------------------------------------------------------
def task_fits(free: Sequence[float], node_model: str, task: Task) -> bool:
    """Whether ``task`` can run on a node with per-GPU free shares ``free`` of ``node_model``."""
    if task.gpu_model not in ("", node_model) or not free:
        return False
    need = min(task.gpus, len(free))
    return sum(1 for f in free if f >= task.share - EPS) >= need


def task_fragment(free: Sequence[float], node_model: str, task: Task) -> float:
    """frag_n(m): the free GPU share on the node that ``task`` cannot use (in GPUs)."""
    if not task_fits(free, node_model, task):
        return float(sum(free))
    return float(sum(f for f in free if f < task.share - EPS))


def relevant_tasks(mix: Sequence[Task], node_model: str, scope: str = "model") -> list[Task]:
    """The tasks a node of ``node_model`` is measured against, popularity summing to 1 (or 0)."""
    if scope not in SCOPES:
        raise FragmentationError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    tasks = [t for t in mix if t.popularity > 0]
    if scope == "model":
        tasks = [t for t in tasks if t.gpu_model in ("", node_model)]
    total = sum(t.popularity for t in tasks)
    if total <= 0:
        return []
    return [dataclasses.replace(t, popularity=t.popularity / total) for t in tasks]


def node_fgd(
    free: Sequence[float], node_model: str, mix: Sequence[Task], scope: str = "model"
) -> float:
    """F_n = sum_m p_m * frag_n(m) for one node (GPUs); 0 when no typical task applies."""
    return float(
        sum(
            t.popularity * task_fragment(free, node_model, t)
            for t in relevant_tasks(mix, node_model, scope)
        )
    )


def mix_from_counts(rows: Iterable[Mapping[str, Any]]) -> tuple[Task, ...]:
    """Typical tasks from (gpu_model, gpus, share, attempts) rows; popularity = share of count."""
    rows = [r for r in rows if r["attempts"] > 0]
    total = sum(r["attempts"] for r in rows)
    return tuple(
        Task(int(r["gpus"]), float(r["share"]), str(r["gpu_model"]), r["attempts"] / total)
        for r in rows
    )


def free_shares(capacity: Sequence[float], held: Sequence[float | None]) -> list[float]:
    """Each GPU's free share: capacity minus held, clamped to [0, capacity], to 1e-6."""
    return [round(min(max(c - (h or 0.0), 0.0), c), 6) for c, h in zip(capacity, held, strict=True)]


_NODE_SCHEMA: dict[str, Any] = {
    "ts": pl.Datetime("ms", "UTC"),
    "node": pl.String,
    "pool": pl.String,
    "gpu_model": pl.String,
    "gpus": pl.Int64,
    "capacity_gpus": pl.Float64,
    "held_gpus": pl.Float64,
    "free_gpus": pl.Float64,
    "whole_free_gpus": pl.Int64,
    "fgd_gpus": pl.Float64,
}
_TENANT_SCHEMA: dict[str, Any] = {
    "ts": pl.Datetime("ms", "UTC"),
    "tenant": pl.String,
    "pool": pl.String,
    "gpu_model": pl.String,
    "stranded_gpus": pl.Float64,
}


def evaluate(
    units: pl.DataFrame, mix: pl.DataFrame, scope: str = "model"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """FGD per node and instant, and its split among tenants, from the rows of the SQL.

    ``units``: ts, node, pool, gpu_model, capacity, held, holders (list of (tenant, share));
    ``mix``: ts, gpu_model, gpus, share, attempts. Returns (per node: ts, node, pool, gpu_model,
    gpus, capacity_gpus, held_gpus, free_gpus, whole_free_gpus, fgd_gpus; per tenant: ts, tenant,
    pool, gpu_model, stranded_gpus).
    """
    mixes = (
        {
            ts: mix_from_counts(group.iter_rows(named=True))
            for (ts,), group in mix.partition_by("ts", as_dict=True).items()
        }
        if mix.height
        else {}
    )
    cache: dict[tuple[Any, ...], float] = {}
    nodes: list[tuple[Any, ...]] = []
    tenants: list[tuple[Any, ...]] = []
    for (ts, node, pool, model), rows in _by_node(units):
        capacity = [r[4] for r in rows]
        held = [r[5] or 0.0 for r in rows]
        free = free_shares(capacity, held)
        tasks = mixes.get(ts, ())
        key = (model, tuple(sorted(free)), tasks)
        if key not in cache:
            cache[key] = node_fgd(free, model, tasks, scope)
        fgd = cache[key]
        whole = sum(1 for f, c in zip(free, capacity, strict=True) if c >= 1 - EPS and f >= 1 - EPS)
        nodes.append(
            (ts, node, pool, model, len(rows), sum(capacity), sum(held), sum(free), whole, fgd)
        )
        if fgd > 0:
            split = split_by_holders(fgd, _holders(r[6] for r in rows))
            tenants.extend((ts, tenant, pool, model, share) for tenant, share in split.items())
    per_node = pl.DataFrame(nodes, schema=_NODE_SCHEMA, orient="row")
    per_tenant = (
        pl.DataFrame(tenants, schema=_TENANT_SCHEMA, orient="row")
        .group_by("ts", "tenant", "pool", "gpu_model")
        .agg(pl.col("stranded_gpus").sum())
        .sort("ts", "pool", "gpu_model", "tenant")
    )
    return per_node, per_tenant


def _by_node(units: pl.DataFrame) -> Iterator[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]:
    """Rows (ts, node, pool, gpu_model, capacity, held, holders) grouped by (ts, node)."""
    ordered = units.select("ts", "node", "pool", "gpu_model", "capacity", "held", "holders").sort(
        "ts", "node", maintain_order=True
    )
    for _, group in itertools.groupby(ordered.iter_rows(), key=lambda r: (r[0], r[1])):
        rows = list(group)
        yield rows[0][:4], rows


def _holders(lists: Iterable[Sequence[Any] | None]) -> dict[str, float]:
    """Shares held per tenant, from the GPUs' lists of (tenant, share)."""
    held: dict[str, float] = {}
    for holders in lists:
        for holder in holders or ():
            tenant, share = _pair(holder)
            held[tenant] = held.get(tenant, 0.0) + share
    return held


def _pair(holder: Any) -> tuple[str, float]:
    if isinstance(holder, Mapping):
        values = list(holder.values())
        return str(values[0]), float(values[1])
    return str(holder[0]), float(holder[1])


def split_by_holders(amount: float, held: Mapping[str, float]) -> dict[str, float]:
    """Split ``amount`` in proportion to ``held``; all of it to ``__unallocated__`` if none."""
    total = sum(v for v in held.values() if v > 0)
    if total <= 0:
        return {UNALLOCATED: amount}
    return {t: amount * v / total for t, v in held.items() if v > 0}


def largest_startable(per_node: pl.DataFrame, units: pl.DataFrame) -> pl.DataFrame:
    """Per GPU model, the largest job that could start now, ignoring quotas.

    ``one_node_gpus``: whole free GPUs on the best node; ``total_gpus``: whole free GPUs on all
    nodes (a multi-node job); ``largest_free_share``: the largest free share of one GPU (the
    largest shared-GPU request that fits); ``free_gpus``: all free shares together.
    """
    if not per_node.height:
        return pl.DataFrame(
            schema={
                "gpu_model": pl.String,
                "one_node_gpus": pl.Int64,
                "total_gpus": pl.Int64,
                "largest_free_share": pl.Float64,
                "free_gpus": pl.Float64,
            }
        )
    share = (
        units.with_columns(
            pl.max_horizontal(
                pl.lit(0.0), pl.col("capacity") - pl.col("held").fill_null(0.0)
            ).alias("free")
        )
        .group_by("gpu_model")
        .agg(pl.col("free").max().round(6).alias("largest_free_share"))
    )
    return (
        per_node.group_by("gpu_model")
        .agg(
            pl.col("whole_free_gpus").max().alias("one_node_gpus"),
            pl.col("whole_free_gpus").sum().alias("total_gpus"),
            pl.col("free_gpus").sum().alias("free_gpus"),
        )
        .join(share, on="gpu_model", how="left")
        .select("gpu_model", "one_node_gpus", "total_gpus", "largest_free_share", "free_gpus")
        .sort("gpu_model")
    )


# -- the warehouse side -----------------------------------------------------------------------
def _utc(ts: dt.datetime, name: str) -> dt.datetime:
    if not isinstance(ts, dt.datetime) or ts.tzinfo is None:
        raise FragmentationError(f"{name} {ts!r} must be a timezone-aware datetime (UTC)")
    return ts.astimezone(dt.UTC)


def trailing_days(days: float, at: dt.datetime, name: str = "window_days") -> dt.timedelta:
    """The task mix's window of ``days`` before ``at``: more than 0 and reaching back no
    further than the warehouse's first instant (NaN and infinity refused, naming ``name``)."""
    most = (_utc(at, "at") - FIRST_INSTANT) / dt.timedelta(days=1)
    if not 0 < days <= most:  # NaN too
        raise FragmentationError(
            f"{name} {days:g} must be more than 0 and reach back no further than "
            f"{FIRST_INSTANT:%Y-%m-%d} ({most:.0f} days before the time asked)"
        )
    return dt.timedelta(days=days)


def _check(scope: str, window: dt.timedelta, mix_event: str) -> None:
    if scope not in SCOPES:
        raise FragmentationError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    if window <= dt.timedelta(0):
        raise FragmentationError(f"window {window} must be positive (e.g. 7 days)")
    if mix_event not in MIX_EVENTS:
        raise FragmentationError(f"mix_event {mix_event!r} is not one of {', '.join(MIX_EVENTS)}")


def _series(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    step: dt.timedelta,
    n: int,
    window: dt.timedelta,
    mix_event: str,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(units, task mix, unplaced) at the n instants start + i * step."""
    step_ms = step // dt.timedelta(milliseconds=1)
    params = {
        "cluster": cluster,
        "start": start,
        "step_ms": step_ms,
        "n": n,
        "last": start + (n - 1) * step,
    }
    units = queries.run(wh, "frag_free_units", **params)
    mix = queries.run(
        wh,
        "frag_task_mix",
        **params,
        event=mix_event,
        window_ms=window // dt.timedelta(milliseconds=1),
    )
    unplaced = queries.run(wh, "frag_unplaced", **params)
    return units, mix, unplaced


def free_state(wh: Warehouse, cluster: str, at: dt.datetime) -> pl.DataFrame:
    """Every schedulable GPU (or MIG slice) at ``at`` with the share free on it.

    Columns: node, pool, gpu_model, gpu_uuid, mig_instance, capacity, held, free (see the
    module docstring for what counts as schedulable and held).
    """
    at = _utc(at, "at")
    units = queries.run(wh, "frag_free_units", cluster=cluster, start=at, step_ms=0, n=1, last=at)
    free = free_shares(units["capacity"].to_list(), units["held"].to_list())
    return units.drop("ts", "holders").with_columns(
        pl.col("held").fill_null(0.0), pl.Series("free", free, dtype=pl.Float64)
    )


@dataclasses.dataclass(frozen=True)
class FragmentationReport:
    """The cluster's fragmentation at one instant (see the module docstring for definitions).

    ``per_node``: node, pool, gpu_model, gpus, capacity_gpus, held_gpus, free_gpus,
    whole_free_gpus, fgd_gpus. ``per_tenant_stranded``: tenant, pool, gpu_model, stranded_gpus (sums
    to ``cluster_fgd_gpus``). ``largest_startable``: see :func:`largest_startable`.
    ``task_mix``: gpu_model, gpus, share, attempts, popularity. ``tenant`` set: one tenant's
    view (:meth:`for_tenant`).
    """

    cluster: str
    at: dt.datetime
    scope: str
    window: dt.timedelta
    cluster_fgd_gpus: float
    free_gpus: float
    unplaced_held_gpus: float
    per_node: pl.DataFrame
    per_tenant_stranded: pl.DataFrame
    largest_startable: pl.DataFrame
    task_mix: pl.DataFrame
    tenant: str | None = None

    def for_tenant(self, tenant: str) -> FragmentationReport:
        """What a tenant may see: the cluster's free and stranded capacity (facts of the
        nodes, naming nobody) and of the stranded attribution its own rows alone (an org's:
        all of its projects'); other tenants' shares and the unallocated share are left out."""
        mine = self.per_tenant_stranded.filter(in_tenant(tenant))
        return dataclasses.replace(self, per_tenant_stranded=mine, tenant=tenant)

    @property
    def stranded_ratio(self) -> float | None:
        """FGD as a share of the free capacity, or None when nothing is free."""
        return self.cluster_fgd_gpus / self.free_gpus if self.free_gpus > EPS else None

    def to_dict(self) -> dict[str, Any]:
        """Plain types for JSON (times in ISO 8601 UTC, GPUs rounded to 1e-4)."""

        def rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
            return [
                {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
                for r in frame.drop("ts", strict=False).iter_rows(named=True)
            ]

        ratio = self.stranded_ratio
        return {
            "cluster": self.cluster,
            "tenant": self.tenant,
            "at": self.at.isoformat(),
            "scope": self.scope,
            "window_s": int(self.window.total_seconds()),
            "cluster_fgd_gpus": round(self.cluster_fgd_gpus, 4),
            "free_gpus": round(self.free_gpus, 4),
            "stranded_ratio": None if ratio is None else round(ratio, 4),
            "unplaced_held_gpus": round(self.unplaced_held_gpus, 4),
            "nodes": rows(self.per_node),
            "tenants": rows(self.per_tenant_stranded),
            "largest_startable": rows(self.largest_startable),
            "task_mix": rows(self.task_mix),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        """A short report for a terminal."""
        attempts = int(self.task_mix["attempts"].sum()) if self.task_mix.height else 0
        ratio = self.stranded_ratio
        lines = [
            f"Fragmentation of cluster {self.cluster} at {self.at:%Y-%m-%d %H:%M:%S} UTC "
            f"(scope {self.scope}; task mix: {attempts} attempts started in the "
            f"{_span(self.window)} before)",
            f"  free {self.free_gpus:.2f} GPUs, of which {self.cluster_fgd_gpus:.2f} "
            "stranded (FGD)" + ("" if ratio is None else f", {ratio:.0%}"),
        ]
        if self.unplaced_held_gpus > EPS:
            lines.append(
                f"  ({self.unplaced_held_gpus:.2f} GPUs held by jobs with no known GPU "
                "are not in the free state)"
            )
        if not attempts:
            lines.append("  no job started in the window: no typical task, FGD is 0")
        lines.append(
            f"  {'node':<24} {'model':<24} {'GPUs':>4} {'free':>7} {'whole':>5} {'FGD':>7}"
        )
        for r in self.per_node.iter_rows(named=True):
            lines.append(
                f"  {r['node']:<24} {r['gpu_model']:<24} {r['gpus']:>4} "
                f"{r['free_gpus']:>7.2f} {r['whole_free_gpus']:>5} {r['fgd_gpus']:>7.2f}"
            )
        if self.per_tenant_stranded.height:
            lines.append("  stranded GPUs by tenant (by their share of the partly used nodes):")
            for r in self.per_tenant_stranded.iter_rows(named=True):
                lines.append(
                    f"    {r['tenant']:<28} {r['gpu_model']:<24} {r['stranded_gpus']:>7.2f}"
                )
        lines.append("  largest job that could start now (quotas aside):")
        for r in self.largest_startable.iter_rows(named=True):
            lines.append(
                f"    {r['gpu_model']:<24} {r['one_node_gpus']} GPUs on one node, "
                f"{r['total_gpus']} in total; largest free share of one GPU "
                f"{r['largest_free_share']:.2f}"
            )
        return "\n".join(lines)


def _span(window: dt.timedelta) -> str:
    if window % dt.timedelta(days=1) == dt.timedelta(0):
        return f"{window.days} days"
    return f"{window.total_seconds() / 3600:g} hours"


def fragmentation_at(
    wh: Warehouse,
    cluster: str,
    at: dt.datetime,
    *,
    window: dt.timedelta = DEFAULT_WINDOW,
    scope: str = "model",
    mix_event: str = "started",
) -> FragmentationReport:
    """The cluster's FGD at ``at``, per node and tenant, with the startable job sizes."""
    at = _utc(at, "at")
    _check(scope, window, mix_event)
    units, mix, unplaced = _series(wh, cluster, at, _HOUR, 1, window, mix_event)
    per_node, per_tenant = evaluate(units, mix, scope)
    tasks = mix_from_counts(mix.iter_rows(named=True))
    task_mix = mix.drop("ts").with_columns(
        pl.Series("popularity", [t.popularity for t in tasks], dtype=pl.Float64)
    )
    return FragmentationReport(
        cluster=cluster,
        at=at,
        scope=scope,
        window=window,
        cluster_fgd_gpus=float(per_node["fgd_gpus"].sum()),
        free_gpus=float(per_node["free_gpus"].sum()),
        unplaced_held_gpus=float(unplaced["held_gpus"].sum()) if unplaced.height else 0.0,
        per_node=per_node.drop("ts"),
        per_tenant_stranded=per_tenant.drop("ts"),
        largest_startable=largest_startable(per_node, units),
        task_mix=task_mix,
    )


def _steps(start: dt.datetime, end: dt.datetime, step: dt.timedelta) -> int:
    if step <= dt.timedelta(0):
        raise FragmentationError(f"step {step} must be positive (e.g. 1 hour)")
    if end <= start:
        raise FragmentationError(
            f"end ({end.isoformat()}) must be after start ({start.isoformat()})"
        )
    return -(-(end - start) // step)


def stranded_instants(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta = _HOUR,
    *,
    window: dt.timedelta = DEFAULT_WINDOW,
    scope: str = "model",
    mix_event: str = "started",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The stranded capacity at each instant t_i = start + i * step in [start, end): (per pool
    and GPU model: ts, pool, gpu_model, capacity_gpus, free_gpus, stranded_gpus; per tenant:
    ts, tenant, pool, gpu_model, stranded_gpus). :func:`over_range` weighs them."""
    start, end = _utc(start, "start"), _utc(end, "end")
    _check(scope, window, mix_event)
    n = _steps(start, end, step)
    units, mix, _ = _series(wh, cluster, start, step, n, window, mix_event)
    per_node, per_tenant = evaluate(units, mix, scope)
    series = per_node.group_by("ts", "pool", "gpu_model").agg(
        pl.col("capacity_gpus").sum(),
        pl.col("free_gpus").sum(),
        pl.col("fgd_gpus").sum().alias("stranded_gpus"),
    )
    return series, per_tenant


def over_range(
    series: pl.DataFrame, tenants: pl.DataFrame, end: dt.datetime, step: dt.timedelta = _HOUR
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`stranded_instants`' rows held for their step, the last clipped at ``end``:
    (the series with stranded_gpu_hours, sorted; stranded GPU-hours per tenant, pool and
    model, most first)."""
    weight = pl.min_horizontal(pl.lit(step), pl.lit(end) - pl.col("ts")).dt.total_milliseconds()
    hours = weight / 3_600_000
    series = series.with_columns(
        (pl.col("stranded_gpus") * hours).alias("stranded_gpu_hours")
    ).sort("ts", "pool", "gpu_model")
    tenants = (
        tenants.group_by("tenant", "pool", "gpu_model")
        .agg((pl.col("stranded_gpus") * hours).sum().alias("stranded_gpu_hours"))
        .sort("stranded_gpu_hours", "tenant", descending=[True, False])
    )
    return series, tenants


def stranded_over(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta = _HOUR,
    *,
    window: dt.timedelta = DEFAULT_WINDOW,
    scope: str = "model",
    mix_event: str = "started",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(:func:`stranded_gpu_hours`, :func:`stranded_by_tenant`) from one sampling, computed
    live (:mod:`warehouse.analytics.stranded` reads sealed hours where they hold)."""
    series, tenants = stranded_instants(
        wh, cluster, start, end, step, window=window, scope=scope, mix_event=mix_event
    )
    return over_range(series, tenants, _utc(end, "end"), step)


def stranded_gpu_hours(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta = _HOUR,
    *,
    window: dt.timedelta = DEFAULT_WINDOW,
    scope: str = "model",
    mix_event: str = "started",
) -> pl.DataFrame:
    """Per instant t_i = start + i * step in [start, end), pool and GPU model: the free and the
    stranded (FGD) GPUs at t_i, and stranded GPU-hours = stranded GPUs x min(step, end - t_i).

    Columns: ts, pool, gpu_model, capacity_gpus (schedulable), free_gpus, stranded_gpus,
    stranded_gpu_hours. A pool with no schedulable GPU at t_i has no row there.
    """
    sampled = stranded_over(
        wh, cluster, start, end, step, window=window, scope=scope, mix_event=mix_event
    )
    return sampled[0]


def stranded_by_tenant(
    wh: Warehouse,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    step: dt.timedelta = _HOUR,
    *,
    window: dt.timedelta = DEFAULT_WINDOW,
    scope: str = "model",
    mix_event: str = "started",
) -> pl.DataFrame:
    """Stranded GPU-hours over [start, end) per tenant and GPU model (same sampling as
    :func:`stranded_gpu_hours`, whose total it matches). Columns: tenant, pool, gpu_model,
    stranded_gpu_hours; ``__unallocated__`` holds the fragment of nodes nobody used.
    """
    sampled = stranded_over(
        wh, cluster, start, end, step, window=window, scope=scope, mix_event=mix_event
    )
    return sampled[1]
