"""The rules about the fleet: whole GPUs of a model that nobody holds while jobs for that model
wait (``waiting``), and GPUs that show bad health (``unhealthy``)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any
from urllib.parse import quote

import polars as pl

from reports.alerts.findings import Finding, lasted, listed, money, total, when
from reports.alerts.idle_rules import gpu_name
from reports.alerts.look import Look
from reports.alerts.rules import duration_text
from warehouse.analytics.watch import unallocated_gpus, unhealthy_gpus, why_waiting
from warehouse.ledger import priced_spans


def waiting_findings(look: Look) -> list[Finding]:
    """One finding per cluster and requested GPU model where a job has waited at least
    ``waiting_for_s`` while whole GPUs it could take (its model, its pool where the inventory
    knows that pool) have been free of any job at least as long."""
    found = []
    old = look.at - dt.timedelta(seconds=look.rules.waiting_for_s)
    for cluster in look.clusters:
        queue = look.waiting(cluster)
        waiting = queue.filter(pl.col("queued_ts") <= old)
        if not waiting.height:
            continue
        free = unallocated_gpus(look.wh, cluster, look.at).filter(
            pl.col("free_since").is_not_null() & (pl.col("free_since") <= old)
        )
        if not free.height:
            continue
        reasons = why_waiting(look.wh, cluster, look.at, queue)  # the whole queue: who is ahead
        for model in sorted(set(waiting["gpu_model"].to_list())):
            jobs = waiting.filter(pl.col("gpu_model") == model)
            finding = _waiting(look, cluster, model, jobs, free, reasons)
            if finding is not None:
                found.append(finding)
    return found


def _candidates(job: dict[str, Any], free: pl.DataFrame) -> pl.DataFrame:
    """The free GPUs ``job`` could take: of its model (any for ''), in its pool when the
    inventory knows that pool (as ``why job`` judges capacity)."""
    units = free.filter(pl.col("gpu_model") == job["gpu_model"]) if job["gpu_model"] else free
    if job["pool"] and job["pool"] in set(units["pool"].to_list()):
        units = units.filter(pl.col("pool") == job["pool"])
    return units


def _waiting(
    look: Look,
    cluster: str,
    model: str,
    jobs: pl.DataFrame,
    free: pl.DataFrame,
    reasons: dict[tuple[str, int], Any],
) -> Finding | None:
    held_back, gpus = [], []
    for job in jobs.sort("queued_ts", "job_id").iter_rows(named=True):
        units = _candidates(job, free)
        if units.height:
            held_back.append(job)
            gpus.append(units)
    if not held_back:
        return None
    units = pl.concat(gpus).unique(["gpu_uuid", "mig_instance"]).sort("node", "gpu_uuid")
    since = max(min(j["queued_ts"] for j in held_back), units["free_since"].min())
    assert isinstance(since, dt.datetime)
    rows = list(units.iter_rows(named=True))
    cost = total(
        priced_spans(
            look.prices,
            [
                (u["gpu_model"], u["pool"], max(u["free_since"], since), look.at, u["capacity"])
                for u in rows
            ],
        )
    )
    codes = Counter(r.code for j in held_back for r in reasons.get((j["job_id"], j["attempt"]), []))
    name = model or "any-model"
    count = float(units["capacity"].sum())
    waits = [f"{j['job_id']} of {j['tenant']} {lasted(j['queued_ts'], look.at)}" for j in held_back]
    subject = f"{name} GPUs in cluster {cluster}"
    summary = (
        f"{count:g} {name} GPU(s) unallocated ({listed([_on(u) for u in rows])}) while "
        f"{len(held_back)} job(s) wait for {name} ({listed(waits)}); both for "
        f"{lasted(since, look.at)} (since {when(since)}; alert from "
        f"{duration_text(look.rules.waiting_for_s)}); why they wait: "
        f"{', '.join(f'{c} x{n}' for c, n in sorted(codes.items())) or 'unknown'}; "
        f"unused cost so far {money(cost, look.currency)}"
    )
    return Finding(
        rule="waiting",
        key="|".join(("waiting", cluster, model or "*")),
        cluster=cluster,
        subject=subject,
        summary=summary,
        at=look.at,
        since=since,
        node=rows[0]["node"],
        gpus=tuple(dict.fromkeys(u["gpu_uuid"] for u in rows)),
        jobs=tuple(j["job_id"] for j in held_back),
        tenant=held_back[0]["tenant"] if len({j["tenant"] for j in held_back}) == 1 else "",
        cost=cost,
        currency=look.currency,
        value=(look.at - since).total_seconds(),
        threshold=float(look.rules.waiting_for_s),
        link=look.rules.link("/queues", cluster=cluster, gpu_model=model),
        facts={
            "gpu_model": model,
            "free_gpus": count,
            "nodes": sorted({u["node"] for u in rows}),
            "tenants": sorted({j["tenant"] for j in held_back}),
            "reasons": dict(codes),
        },
    )


def _on(unit: dict[str, Any]) -> str:
    return f"{gpu_name(unit['gpu_uuid'], unit['mig_instance'])} on {unit['node']}"


def unhealthy_findings(look: Look) -> list[Finding]:
    """One finding per GPU that shows bad health now (see
    :func:`warehouse.analytics.watch.unhealthy_gpus`)."""
    found = []
    for cluster in look.clusters:
        rows = unhealthy_gpus(
            look.wh,
            cluster,
            look.at,
            xids=look.rules.unhealthy_xids,
            xid_window_s=look.rules.unhealthy_xid_window_s,
        )
        found += [_unhealthy(look, cluster, r) for r in rows.iter_rows(named=True)]
    return found


def _causes(r: dict[str, Any]) -> list[tuple[str, dt.datetime | None]]:
    """Each sign of bad health, in words, with since when it has shown."""
    out: list[tuple[str, dt.datetime | None]] = []
    if r["health"] in ("unhealthy", "down"):
        reason = f" ({r['health_reason']})" if r["health_reason"] else ""
        out.append((f"inventory says {r['health']}{reason}", r["health_since"]))
    counters_since = r["counters_since"]
    if r["gpu_lost"]:
        out.append(("lost: it fell off the bus and answers nothing", counters_since))
    if r["ecc_dbe_volatile"]:
        out.append(
            (
                f"{r['ecc_dbe_volatile']} double-bit ECC errors since the driver loaded",
                counters_since,
            )
        )
    if r["remapped_rows_failure"]:
        out.append(("a row remap failed: the GPU needs service", counters_since))
    if r["remapped_rows_pending"]:
        out.append(("a row remap is pending: reset the GPU", counters_since))
    if r["xid"] is not None:
        out.append((f"Xid {r['xid']} (last at {when(r['xid_last'])})", r["xid_first"]))
    return out


def _unhealthy(look: Look, cluster: str, r: dict[str, Any]) -> Finding:
    causes = _causes(r)
    starts = [s for _, s in causes if s is not None]
    since = min(starts) if starts else None
    node, model = r["node"] or "?", r["gpu_model"] or "?"
    jobs, tenants = list(r["job_ids"]), list(r["tenants"])
    held = f"held by job(s) {listed(jobs)} of {listed(tenants)}" if jobs else "no job holds it"
    # what the GPU has cost since it went bad: capacity paid for, whether or not anyone can use it
    (cost,) = (
        priced_spans(look.prices, [(r["gpu_model"] or "", r["pool"] or "", since, look.at, 1.0)])
        if since is not None
        else [None]
    )
    subject = f"GPU {r['gpu_uuid']} on node {node}"
    summary = (
        f"{subject} ({model}) is unhealthy since {when(since)}: "
        f"{'; '.join(text for text, _ in causes)}; {held}; its cost since "
        f"{money(cost, look.currency)}"
    )
    value = r["xid"] if r["xid"] is not None else r["ecc_dbe_volatile"]
    return Finding(
        rule="unhealthy",
        key="|".join(("unhealthy", cluster, r["gpu_uuid"])),
        cluster=cluster,
        subject=subject,
        summary=summary,
        at=look.at,
        since=since,
        node=r["node"] or "",
        gpus=(r["gpu_uuid"],),
        jobs=tuple(jobs),
        tenant=tenants[0] if len(tenants) == 1 else "",
        cost=cost,
        currency=look.currency,
        value=None if value is None else float(value),
        link=look.rules.link(f"/gpu/{quote(r['gpu_uuid'], safe='')}", cluster=cluster),
        facts={
            "gpu_model": r["gpu_model"] or "",
            "pool": r["pool"] or "",
            "causes": [text for text, _ in causes],
            "xid": r["xid"],
            "tenants": tenants,
        },
    )
