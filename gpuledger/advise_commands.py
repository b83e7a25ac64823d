"""`gpuledger advise`: quota-reclaim advice, idle limits and priority feedback for the
scheduler; proposed into the warehouse, approved by a manager, applied only once approved.

    gpuledger advise [--cluster C] [--at ISO] [--format text|json|kueue|volcano|slurm]
                     [--kubeconfig FILE] [--no-store] [--apply]
    gpuledger advise list [--cluster C] [--format text|json]
    gpuledger advise approve|reject ID --user NAME [--password-stdin]
    gpuledger advise apply ID --format kueue|volcano|slurm [--kubeconfig FILE] --user NAME

Dry-run by default: rendering changes nothing in the scheduler; ``--apply`` (or ``advise
apply ID``) applies approved advice only. Approving, rejecting and applying run as a gpuledger
user of role admin or manager (``--user``, or ``scheduler.user``), whose password is asked for
(:mod:`gpuledger.run_as`); each step, and each refusal, is in the audit log under that name.
Showing and listing the advice needs no user.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from gpuledger.audit_trail import os_user as _who
from gpuledger.commands import _at, idle_rule, utc_now
from gpuledger.run_as import log_in, named
from gpuledger.settings import Settings
from gpuledger_errors import InputError

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from scheduler_hooks.kube import Cluster
    from scheduler_hooks.report import AdviceReport
    from warehouse.client import Warehouse

FORMATS = ("text", "json", "kueue", "volcano", "slurm")
#: The roles that may approve, reject and apply advice.
DECIDERS = ("admin", "manager")
#: The actions that change advice (audited as ``advice.<action>``).
_STEPS = ("approve", "reject", "apply")
_BY_IS_GONE = (
    "--by is gone: approving, rejecting and applying advice run as a gpuledger user of role "
    "admin or manager: give --user NAME (its password is asked for, or read with "
    "--password-stdin)"
)


log = logging.getLogger(__name__)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    adv = sub.add_parser(
        "advise",
        parents=[common],
        help="quota-reclaim advice, idle limits and priority feedback for the scheduler",
    )
    adv.add_argument(
        "action",
        nargs="?",
        default="show",
        choices=("show", "list", "approve", "reject", "apply"),
        help="show (default: work out, propose and render the advice), list (the advice in "
        "force), approve|reject|apply ID",
    )
    adv.add_argument("id", nargs="?", help="the advice's id (approve, reject, apply)")
    adv.add_argument("--cluster", default="", help="one cluster (default: each)")
    adv.add_argument("--at", help="ISO time to advise at (default: now)")
    adv.add_argument("--format", choices=FORMATS, default="text")
    adv.add_argument(
        "--kubeconfig",
        help="read the ClusterQueues (quotas, weights) and Queues from this cluster, and patch "
        "only what differs",
    )
    adv.add_argument("--no-store", action="store_true", help="show the advice without proposing it")
    adv.add_argument(
        "--apply",
        action="store_true",
        help="apply the approved advice in force to the --format's scheduler",
    )
    adv.add_argument(
        "--user",
        help="approve, reject, apply, --apply: the gpuledger user, of role admin or manager, to "
        "run as (default: scheduler.user, GPULEDGER_SCHEDULER__USER); its password is asked for",
    )
    adv.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the user's password from the first line of stdin",
    )
    adv.add_argument("--by", help=argparse.SUPPRESS)  # gone: refused, pointing at --user


def cmd_advise(settings: Settings, args: argparse.Namespace) -> int:
    from gpuledger.app import open_warehouse

    if args.by is not None:
        raise InputError(_BY_IS_GONE)
    if args.action in _STEPS and not args.id:
        raise InputError(f"`gpuledger advise {args.action}` needs the advice's id: advise list")
    step = _step(args)
    name = named(settings.scheduler.user, step, DECIDERS, "scheduler.user") if step else ""
    wh = open_warehouse(settings)
    try:
        who = _logged_in(wh, settings, args, step, name) if step else _who()
        return _run(wh, settings, args, who)
    finally:
        wh.close()


def _step(args: argparse.Namespace) -> str:
    """What this command changes that needs a user (``advise approve``...), or ""."""
    if args.action in _STEPS:
        return f"advise {args.action}"
    return "advise --apply" if args.apply and args.action == "show" else ""


def _logged_in(
    wh: Warehouse, settings: Settings, args: argparse.Namespace, step: str, name: str
) -> str:
    """The name of the user ``name`` once it has logged in as an admin or a manager; a
    refusal is audited as ``advice.approve.denied`` (``.reject``, ``.apply``) on the advice."""
    verb = args.action if args.action in _STEPS else "apply"
    user = log_in(
        settings,
        wh,
        name,
        password_stdin=args.password_stdin,
        what=step,
        roles=DECIDERS,
        action=f"advice.{verb}.denied",
        obj=args.id or "",
        detail=f"gpuledger {step}" + (f" {args.id}" if args.id else ""),
    )
    return user.name


def _run(wh: Warehouse, settings: Settings, args: argparse.Namespace, who: str) -> int:
    from scheduler_hooks import proposals

    if args.action == "approve":
        done = proposals.approve(wh, args.id, actor=who)
    elif args.action == "reject":
        done = proposals.reject(wh, args.id, actor=who)
    elif args.action == "apply":
        done = _apply(wh, settings, args, args.id, who)
    elif args.action == "list":
        return _list(wh, args)
    else:
        return _show(wh, settings, args, who)
    print(f"advice {done.advice_id}: {done.status} by {who}")
    return 0


def decide(wh: Warehouse, advice_id: str, verb: str, actor: str) -> str:
    """Approve or reject ``advice_id`` as ``actor`` (audited under that name): its new status.
    The dashboard's buttons call this once the page has checked that ``actor`` may."""
    from scheduler_hooks import proposals

    step = {"approve": proposals.approve, "reject": proposals.reject}[verb]
    return step(wh, advice_id, actor=actor).status


def _cluster_api(settings: Settings, args: argparse.Namespace) -> Cluster | None:
    if not args.kubeconfig:
        return None
    from scheduler_hooks.kube import Cluster, client_from

    return Cluster(client_from(args.kubeconfig), settings.scheduler.policy().names)


def _apply(
    wh: Warehouse, settings: Settings, args: argparse.Namespace, advice_id: str, who: str
) -> Any:
    from scheduler_hooks.apply import apply_advice

    if args.format not in ("kueue", "volcano", "slurm"):
        raise InputError(
            f"--format {args.format} is not a scheduler to apply advice to: give --format "
            "kueue, volcano or slurm"
        )
    return apply_advice(
        wh,
        advice_id,
        target=args.format,
        actor=who,
        names=settings.scheduler.policy().names,
        cluster=_cluster_api(settings, args),
        slurm_bin_dir=settings.scheduler.slurm_bin_dir,
    )


def _list(wh: Warehouse, args: argparse.Namespace) -> int:
    from scheduler_hooks import proposals
    from warehouse.analytics import fleet

    cluster = fleet.pick_cluster(wh, args.cluster, name="--cluster", one=False)
    stored = proposals.in_force(wh, _at(args.at, utc_now()), cluster=cluster)
    if args.format == "json":
        print(json.dumps([s.to_json() for s in stored], indent=1))
        return 0
    if args.format != "text":
        raise InputError(f"advise list --format {args.format}: give text or json")
    if not stored:
        print("no advice in force: `gpuledger advise` works it out and proposes it")
    for s in stored:
        print(_line(s.advice))
    return 0


def _line(a: dict[str, Any]) -> str:
    ident = a.get("advice_id") or "-"
    status = a.get("status") or "not stored"
    recovers = (
        f"; recovers {a['recovers_gpu_hours']:g} GPU-hours"
        + (f" ({a['recovers_cost']} {a.get('currency', '')})" if a.get("recovers_cost") else "")
        if a.get("recovers_gpu_hours")
        else ""
    )
    return f"{ident:<12} {status:<9} {a['kind']:<18} {a['reason']}{recovers}"


def build_reports(
    wh: Warehouse, settings: Settings, at: dt.datetime, cluster: str, kube: Cluster | None
) -> list[tuple[AdviceReport, dict[str, Any]]]:
    """Each cluster's advice at ``at``, with the scheduler objects as they are (read through
    ``kube``; without it, ClusterQueues made from the warehouse's quotas)."""
    from scheduler_hooks import kube as k8s
    from scheduler_hooks.render import cluster_queues_from
    from scheduler_hooks.report import build_advice
    from warehouse.analytics import fleet, quota
    from warehouse.ledger import load_price_book

    policy = settings.scheduler.policy()
    prices = load_price_book(wh, settings.ledger.currency)
    # one cluster when a kubeconfig names one; an empty warehouse is refused with what to do
    picked = fleet.pick_cluster(wh, cluster, name="--cluster", one=kube is not None)
    chosen = [picked] if picked else fleet.known_clusters(wh)
    if not chosen:
        fleet.pick_cluster(wh, "", name="--cluster")  # raises, saying how to fill it
    out = []
    for c in chosen:
        objects: dict[str, Any] = {}
        quotas, weights = None, None
        if kube is not None:
            objects["kueue"] = kube.cluster_queues()
            quotas = k8s.quotas_from(objects["kueue"], quota.quotas_at(wh, c, at), policy.names)
        report = build_advice(wh, c, at, policy, idle=idle_rule(settings), prices=prices,
                              quotas=quotas)  # fmt: skip
        if kube is not None:
            weights = k8s.weights_from(objects["kueue"], report.priorities, policy.names)
            report = build_advice(wh, c, at, policy, idle=idle_rule(settings), prices=prices,
                                  quotas=quotas, weights=weights)  # fmt: skip
            objects["volcano"] = kube.volcano_queues()
        else:
            standings = [s.to_json() for s in report.standings]
            objects["kueue"] = cluster_queues_from(standings, policy.names)
        out.append((report, objects))
    return out


def live_report(wh: Warehouse, settings: Settings, cluster: str, at: dt.datetime) -> AdviceReport:
    """One cluster's advice at ``at`` from the warehouse alone (for ``GET /api/advice``)."""
    from scheduler_hooks.report import build_advice
    from warehouse.ledger import load_price_book

    return build_advice(
        wh,
        cluster,
        at,
        settings.scheduler.policy(),
        idle=idle_rule(settings),
        prices=load_price_book(wh, settings.ledger.currency),
    )


def _show(wh: Warehouse, settings: Settings, args: argparse.Namespace, who: str) -> int:
    from scheduler_hooks import proposals

    kube = _cluster_api(settings, args)
    at = _at(args.at, utc_now())
    shown: list[dict[str, Any]] = []
    for report, objects in build_reports(wh, settings, at, args.cluster, kube):
        doc = report.to_json()
        if args.no_store:
            advice = doc["recommendations"]
        else:
            run = proposals.propose(wh, report, actor=who)
            stored = proposals.in_force(wh, max(at, utc_now()), cluster=report.cluster)
            doc["proposals"] = run.to_json()
            advice = [s.to_json() for s in stored]
        doc["advice"] = advice
        if args.apply:
            doc["applied"] = _apply_approved(wh, settings, args, advice, who)
        shown.append(_rendered(doc, objects, settings, args.format, kube is not None))
    _print(shown, args.format)
    return 0


def _apply_approved(
    wh: Warehouse, settings: Settings, args: argparse.Namespace, advice: list[Any], who: str
) -> list[str]:
    approved = [a["advice_id"] for a in advice if a.get("status") == "approved"]
    for advice_id in approved:
        _apply(wh, settings, args, advice_id, who)
    return approved


def _rendered(
    doc: dict[str, Any], objects: dict[str, Any], settings: Settings, fmt: str, read: bool
) -> dict[str, Any]:
    from scheduler_hooks import render

    names = settings.scheduler.policy().names
    advice = doc["advice"]
    if fmt == "kueue":
        doc["kueue"] = render.kueue(advice, objects["kueue"], names)
        if not read:
            doc["note"] = (
                "made from the warehouse's quotas (the GPU resource only): a merge patch "
                "replaces spec.resourceGroups whole, so give --kubeconfig to keep the "
                "ClusterQueues' other resources"
            )
    elif fmt == "volcano":
        doc["volcano"] = render.volcano(advice, objects.get("volcano"), names)
    elif fmt == "slurm":
        doc["slurm"] = render.slurm(advice, names)
    return doc


def _print(docs: list[dict[str, Any]], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps({"clusters": docs}, indent=1))
    elif fmt in ("kueue", "volcano"):
        print(json.dumps([item for d in docs for item in d[fmt]], indent=1))
    elif fmt == "slurm":
        for d in docs:
            for item in d["slurm"]:
                ids = ", ".join(item["advice"])
                print(
                    f"# {item['comment']}" if "comment" in item else f"{item['command']}  # {ids}"
                )
    else:
        for d in docs:
            _text(d, sys.stdout)


def _text(doc: dict[str, Any], out: Any) -> None:
    print(f"cluster {doc['cluster']} at {doc['at']}:", file=out)
    runs = doc.get("proposals")
    if runs:
        print("  " + ", ".join(f"{k} {len(v)}" for k, v in runs.items()), file=out)
    if not doc["advice"]:
        print("  no advice: nothing to reclaim, lend or limit", file=out)
    for a in doc["advice"]:
        print("  " + _line(a), file=out)
    for s in doc["standings"]:
        since = f" since {s['idle_since'][11:16]}" if s["idle_since"] else ""
        print(
            f"  {s['tenant']:<16} {s['pool']}/{s['gpu_model'] or '*'}: guaranteed "
            f"{s['guaranteed_gpus']:g}, holds {s['held_gpus']:g}, borrows {s['borrowed_gpus']:g}, "
            f"idle {s['idle_gpus']:g}{since}, waiting {s['waiting_gpus']:g}, waiting under "
            f"others' guarantees {s['waiting_elsewhere_gpus']:g}",
            file=out,
        )
    for p in doc["priorities"]:
        score = "-" if p["score"] is None else f"{p['score']:.0%}"
        print(f"  {p['tenant']:<16} efficiency {score}: {p['priority_class']}", file=out)
    for lim in doc["limits"]:
        print(
            f"  {lim['tenant']:<16} {lim['kind']} would have saved {lim['saved_gpu_hours']:g} "
            f"GPU-hours ({lim['saved_cost']} {doc['currency']}) over the last 30 days",
            file=out,
        )


def propose_all(
    wh: Warehouse, settings: Settings, at: dt.datetime, *, actor: str = "gpuledger serve"
) -> dict[str, Any]:
    """Work out every cluster's advice at ``at`` from the warehouse alone and propose it (what
    `gpuledger advise` does, without a kubeconfig): cluster -> what was proposed, kept,
    superseded and withdrawn."""
    from scheduler_hooks import proposals
    from warehouse.analytics import fleet

    return {
        c: proposals.propose(wh, live_report(wh, settings, c, at), actor=actor).to_json()
        for c in fleet.known_clusters(wh)
    }


def schedule_advice(scheduler: BackgroundScheduler, wh: Warehouse, settings: Settings) -> None:
    """Add the advice to ``scheduler``: proposed every ``scheduler.propose_interval_s`` (the
    hysteresis keeps what still holds), for a manager to approve."""
    from apscheduler.triggers.interval import IntervalTrigger

    interval = settings.scheduler.propose_interval_s
    if not interval:
        return

    def job() -> None:
        try:
            done = propose_all(wh, settings, utc_now())
        except Exception:  # logged; the next run proposes again
            log.exception("scheduler advice could not be proposed")
            return
        changed = {
            c: r
            for c, r in done.items()
            if any(r.get(k) for k in ("proposed", "superseded", "withdrawn"))
        }
        if changed:
            log.info("scheduler advice: %s", changed)

    scheduler.add_job(
        job,
        IntervalTrigger(seconds=interval, timezone="UTC"),
        id="advice-propose",
        max_instances=1,
        coalesce=True,
    )
