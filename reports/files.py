"""Writing a chargeback's files, and saying what changed since they were last written.

Each run writes ``chargeback-<month>[-<tenant>].<format>`` into the output folder, and a
manifest beside them (``…manifest.json``) with each tenant's total and each file's SHA-256.
Writing a month again — after late data arrived — compares with that manifest and names what
moved, so nobody re-sends a month's invoices without knowing why.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from reports import tables
from reports.chargeback import Chargeback
from reports.formats import FormatError


@dataclasses.dataclass(frozen=True)
class Written:
    path: Path
    bytes: int
    seconds: float
    sha256: str


@dataclasses.dataclass(frozen=True)
class ReportRun:
    files: tuple[Written, ...]
    manifest: Path
    changes: tuple[str, ...]  # what moved since the last run of this month (and tenant)
    first: bool  # no earlier run to compare with


def stem(cb: Chargeback) -> str:
    tenant = "" if cb.tenant is None else "-" + re.sub(r"[^A-Za-z0-9._-]+", "_", cb.tenant)
    return f"chargeback-{cb.month}{tenant}"


def render_csv(cb: Chargeback) -> bytes:
    """The lines (tenant × user × GPU model), money to the cent, with the currency named."""
    table = tables.lines(cb)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([*table.header, "currency"])
    for row in table.rows:
        w.writerow([tables.text(v, table.kind(i)) for i, v in enumerate(row)] + [cb.currency])
    return out.getvalue().encode()


def _renderers(focus: Callable[[Chargeback], bytes] | None) -> dict[str, Callable[..., bytes]]:
    from reports.document import render_html, render_pdf
    from reports.workbook import render_xlsx

    out: dict[str, Callable[[Chargeback], bytes]] = {
        "csv": render_csv,
        "xlsx": render_xlsx,
        "html": lambda cb: render_html(cb).encode(),
        "pdf": render_pdf,
    }
    if focus is not None:
        out["focus"] = focus
    return out


def write_reports(
    cb: Chargeback,
    out_dir: Path,
    kinds: Sequence[str],
    *,
    focus: Callable[[Chargeback], bytes] | None = None,
) -> ReportRun:
    """Write ``kinds`` of ``cb`` into ``out_dir`` and its manifest; ``focus`` renders the
    FOCUS export (it needs settings the command has)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    render = _renderers(focus)
    written = []
    for kind in kinds:
        if kind not in render:
            raise FormatError(f"the {kind} format cannot be written here")
        started = time.perf_counter()
        data = render[kind](cb)
        name = f"{stem(cb)}.{kind}" if kind != "focus" else f"{stem(cb)}.focus.csv"
        path = out_dir / name
        _replace(path, data)
        written.append(
            Written(
                path, len(data), time.perf_counter() - started, hashlib.sha256(data).hexdigest()
            )
        )
    manifest = out_dir / f"{stem(cb)}.manifest.json"
    doc = _manifest(cb, written)
    changes, first = _changes(manifest, doc)
    _replace(manifest, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
    return ReportRun(tuple(written), manifest, tuple(changes), first)


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a reader never sees half a report)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _manifest(cb: Chargeback, written: Sequence[Written]) -> dict[str, Any]:
    led = cb.by_tenant
    return {
        "month": cb.month,
        "tenant": cb.tenant,
        "idle_policy": led.idle_policy.value,
        "currency": cb.currency,
        "computed_until": led.computed_until.isoformat(),
        "total_cost": str(led.totals.total_cost),
        "tenants": {r.key: str(r.total_cost) for r in led.rows},
        "allocated_gpu_hours": round(led.totals.allocated_gpu_hours, 6),
        "files": {w.path.name: w.sha256 for w in written},
    }


def _changes(path: Path, now: dict[str, Any]) -> tuple[list[str], bool]:
    """What differs between the manifest at ``path`` (the last run) and ``now``."""
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return [], True
    out: list[str] = []
    cur = now["currency"]
    if before.get("idle_policy") != now["idle_policy"]:
        out.append(f"idle policy {before.get('idle_policy')} → {now['idle_policy']}")
    old, new = before.get("tenants", {}), now["tenants"]
    for tenant in sorted(set(old) | set(new)):
        a, b = old.get(tenant), new.get(tenant)
        if a == b:
            continue
        if a is None:
            out.append(f"tenant {tenant} is new: {b} {cur}")
        elif b is None:
            out.append(f"tenant {tenant} is gone (was {a} {cur})")
        else:
            delta = Decimal(b) - Decimal(a)
            out.append(f"tenant {tenant}: {a} → {b} {cur} ({delta:+})")
    if before.get("total_cost") != now["total_cost"]:
        out.append(f"total: {before.get('total_cost')} → {now['total_cost']} {cur}")
    hours = (before.get("allocated_gpu_hours"), now["allocated_gpu_hours"])
    if hours[0] != hours[1]:
        out.append(f"allocated GPU-hours: {hours[0]} → {hours[1]}")
    return out, False
