"""``gpuledger quarantine list | replay | rejected``: what ingest kept back, and writing it again.

    gpuledger quarantine list [--kind K] [--reason TEXT] [--since ISO] [--examples N]
                              [--format table|csv|json]
    gpuledger quarantine replay [--kind K] [--reason TEXT] [--since ISO] [--dry-run]
    gpuledger quarantine rejected [--format table|csv|json]

``rejected`` lists whole batches set aside instead of rows: in the server's ingest spool, those
that could not be read or written (with the error; the rest of their group was written), and in
the agent's spool, those the server refused. It reads the folders only, so it runs beside
``gpuledger serve``.

``--reason`` keeps the rows whose reason contains TEXT (case-insensitive): every reason of a
sample from a GPU with no inventory starts with ``unknown_gpu:``. The warehouse side, and how
a replayed row is written exactly once, is :mod:`warehouse.ingest.quarantine`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from gpuledger.inputs import instant
from gpuledger.output import format_rows
from gpuledger.settings import Settings
from gpuledger_errors import InputError

if TYPE_CHECKING:
    from warehouse.client import Warehouse

_REASON_CHARS = 60  # of a reason in the examples table; the counts table shows it whole


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``quarantine`` command and its two actions, on the CLI's subparsers."""
    quarantine = sub.add_parser(
        "quarantine", parents=[common], help="rows refused at ingest: list them, replay them"
    )
    actions = quarantine.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", parents=[common], help="quarantined rows by kind and reason, and the newest"
    )
    replay = actions.add_parser(
        "replay",
        parents=[common],
        help="write quarantined rows again through ingest's checks (those that pass now)",
    )
    rejected = actions.add_parser(
        "rejected",
        parents=[common],
        help="whole batches set aside in the server's and the agent's spools, and why",
    )
    rejected.add_argument("--format", choices=("table", "csv", "json"), default="table")
    for action in (listing, replay):
        action.add_argument(
            "--kind", default="", help="one kind: gpu_sample, gpu_inventory, job_event, ..."
        )
        action.add_argument(
            "--reason", default="", help="rows whose reason contains TEXT, e.g. unknown_gpu"
        )
        action.add_argument("--since", help="rows quarantined at or after this ISO time")
    listing.add_argument(
        "--examples", type=int, default=10, help="newest rows shown (default 10; 0: none)"
    )
    listing.add_argument("--format", choices=("table", "csv", "json"), default="table")
    replay.add_argument(
        "--dry-run", action="store_true", help="say what would be written; write nothing"
    )


def cmd_quarantine(
    settings: Settings,
    args: argparse.Namespace,
    *,
    wh: Warehouse | None = None,
    out: TextIO | None = None,
) -> int:
    """``list`` answers from ``wh`` when handed one and writes to ``out`` (default: stdout);
    ``replay`` opens the configured warehouse and prints."""
    from warehouse.ingest.quarantine import Filters
    from warehouse.ingest.writer import QUARANTINE_KINDS

    if args.action == "rejected":
        return _rejected(settings, args.format)

    if args.kind and args.kind not in QUARANTINE_KINDS:
        raise InputError(
            f"--kind {args.kind!r} is not a kind of record: "
            f"use one of {', '.join(QUARANTINE_KINDS)}"
        )
    filters = Filters(kind=args.kind, reason=args.reason, since=_since(args.since))
    if args.action == "list":
        return _list(settings, filters, args, wh, sys.stdout if out is None else out)
    return _replay(settings, filters, args.dry_run)


def _since(text: str | None) -> dt.datetime | None:
    return instant(text, "--since", "2026-11-30T12:00:00+00:00") if text else None


def _list(
    settings: Settings,
    filters: Any,
    args: argparse.Namespace,
    wh: Warehouse | None,
    out: TextIO,
) -> int:
    from gpuledger.app import reading_warehouse
    from warehouse.ingest.quarantine import summary

    if args.examples < 0:
        raise InputError(f"--examples {args.examples} must be 0 or more")
    wh = reading_warehouse(settings, wh)
    counts, newest = summary(wh, filters, examples=args.examples)
    if args.format == "json":
        doc = {"filters": filters.describe(), "counts": counts.to_dicts()}
        doc["examples"] = newest.to_dicts()
        print(json.dumps(doc, indent=1, default=str), file=out)
        return 0
    if args.format == "csv":  # one table: the counts
        out.write(format_rows(counts.columns, counts.rows(), "csv"))
        return 0
    print(f"quarantined rows ({filters.describe()}), by kind and reason:", file=out)
    out.write(format_rows(counts.columns, counts.rows(), "table"))
    if args.examples and newest.height:
        print("\nthe newest still quarantined:", file=out)
        columns = ["received_at", "kind", "batch_id", "field", "value", "reason"]
        rows = [
            [*r[:4], _cut(str(r[4]), 40), _cut(str(r[5]), _REASON_CHARS)]
            for r in newest.select(columns).rows()
        ]
        out.write(format_rows(columns, rows, "table"))
    if counts.height and "unknown_gpu" in " ".join(counts["reason"].to_list()):
        print(
            "\nrows of GPUs with no inventory: once the source has sent it, "
            "`gpuledger quarantine replay --reason unknown_gpu` writes them",
            file=out,
        )
    return 0


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _replay(settings: Settings, filters: Any, dry_run: bool) -> int:
    from gpuledger.app import open_warehouse
    from warehouse.ingest.quarantine import REPLAYABLE, replay
    from warehouse.ingest.writer import Ingestor

    if filters.kind and filters.kind not in REPLAYABLE:
        raise InputError(
            f"--kind {filters.kind!r} cannot be replayed: use one of {', '.join(REPLAYABLE)} "
            "(configuration kinds: send them again)"
        )
    wh = open_warehouse(settings)
    started = dt.datetime.now(dt.UTC)  # one clock for the checks before and during the write
    ingestor = Ingestor(wh, settings.warehouse.raw_retention_days, now=lambda: started)
    report = replay(wh, ingestor, filters, dry_run=dry_run)
    verb = "would write" if dry_run else "wrote"
    note = " — dry run, nothing written" if dry_run else ""
    print(f"quarantine replay ({filters.describe()}){note}:")
    done = report.written, report.already_written, report.still_quarantined
    if not any(done) and not report.not_replayable:
        print("  nothing to replay")
    for table, rows in sorted(report.written.items()):
        print(f"  {verb:<18} {rows:>10,}  into {table}")
    for kind, rows in sorted(report.already_written.items()):
        if rows:
            print(f"  {'already written':<18} {rows:>10,}  {kind} rows found in place: marked")
    if report.batch_ids:
        print(
            f"  batch ids: {', '.join(report.batch_ids[:5])}"
            + (f" (+{len(report.batch_ids) - 5} more)" if len(report.batch_ids) > 5 else "")
        )
    _reasons("still quarantined", report.still_quarantined)
    _reasons("not replayable", report.not_replayable)
    return 0


def _reasons(title: str, counts: Any) -> None:
    if not counts:
        return
    print(f"  {title:<18} {sum(counts.values()):>10,}")
    for (kind, reason), rows in counts.most_common():
        print(f"    {rows:,} {kind} × {reason}")


def _rejected(settings: Settings, fmt: str) -> int:
    from collector.spool import rejected_batches

    columns = ["spool", "kept_at", "batch_id", "bytes", "reason", "file"]
    rows = [
        [spool, r.kept_at.isoformat(timespec="seconds"), r.batch_id, r.size_bytes, r.reason, r.path]
        for spool, folder in (
            ("server", settings.server_spool_dir),
            ("agent", settings.agent_spool_dir),
        )
        for r in rejected_batches(folder)
    ]
    if fmt == "json":
        print(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], indent=1, default=str))
        return 0
    if fmt == "csv":
        sys.stdout.write(format_rows(columns, rows, "csv"))
        return 0
    if not rows:
        print("no batches set aside in the server's or the agent's spool")
        return 0
    print("batches set aside (not written; their rows are not in the warehouse):")
    shown = [[*r[:4], _cut(str(r[4]), _REASON_CHARS), r[5]] for r in rows]
    sys.stdout.write(format_rows(columns, shown, "table"))
    print(
        "\nonce the cause is fixed, send a batch again with its id, e.g. "
        "`curl --data-binary @FILE -H 'X-Batch-Id: ID' URL/api/v1/ingest`"
    )
    return 0
