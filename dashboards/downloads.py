"""Downloads of the ledger as CSV and XLSX: ``GET /download/ledger.csv?<filters>`` and
``/download/ledger.xlsx?<filters>``, the same filters as the pages' URLs.

The viewer and its tenant are checked here again, on the server, for every request (a link
can be forged as easily as a callback), and every request, served or refused, is written to
the audit log (action ``download``). The CSV's rows (with the unallocated line, when the
idle policy keeps one) add up to the ledger's total to the cent: money is written exactly.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from decimal import Decimal
from typing import Any

import flask
import xlsxwriter

from dashboards import context
from dashboards.answers import ledger as ledger_answers
from dashboards.context import Forbidden
from dashboards.filters import Filters
from gpuledger_errors import InputError
from warehouse.client import WarehouseError
from warehouse.ledger import UNALLOCATED, Ledger

log = logging.getLogger(__name__)

FORMATS = {
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
#: The columns of both files: (header, the row's attribute, kind).
COLUMNS = (
    ("allocated_gpu_hours", "allocated_gpu_hours", "hours"),
    ("used_gpu_hours", "used_gpu_hours", "hours"),
    ("idle_gpu_hours", "idle_gpu_hours", "hours"),
    ("unmeasured_gpu_hours", "unmeasured_gpu_hours", "hours"),
    ("direct_cost", "direct_cost", "money"),
    ("shared_cost", "shared_cost", "money"),
    ("total_cost", "total_cost", "money"),
)


def table(ledger: Ledger) -> tuple[list[str], list[list[Any]]]:
    """The ledger as a header and rows (hours as floats, money as Decimal): its rows, then the
    unallocated line where the idle policy keeps one (its cost; nobody held its hours), so
    the rows add up to the ledger's total."""
    header = [ledger.group_by, *(c[0] for c in COLUMNS), "currency"]
    rows = [
        [r.key, *(getattr(r, attr) for _h, attr, _k in COLUMNS), ledger.currency]
        for r in ledger.rows
    ]
    if ledger.unallocated is not None:
        u = ledger.unallocated
        zero = Decimal(0)
        rows.append([UNALLOCATED, 0.0, None, None, 0.0, zero, u.cost, u.cost, ledger.currency])
    return header, rows


def to_csv(ledger: Ledger) -> bytes:
    header, rows = table(ledger)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else _cell(v) for v in row])
    return out.getvalue().encode("utf-8")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)


def to_xlsx(ledger: Ledger, about: dict[str, str]) -> bytes:
    """A workbook: the ledger (frozen header, number formats, a totals row) and what it is."""
    header, rows = table(ledger)
    out = io.BytesIO()
    book = xlsxwriter.Workbook(out, {"in_memory": True})
    bold = book.add_format({"bold": True, "bottom": 1})
    formats = {
        "hours": book.add_format({"num_format": "#,##0.000"}),
        "money": book.add_format({"num_format": "#,##0.00"}),
    }
    total_formats = {
        k: book.add_format({"num_format": f.num_format, "bold": True, "top": 1})
        for k, f in formats.items()
    }
    sheet = book.add_worksheet("Ledger")
    sheet.write_row(0, 0, header, bold)
    sheet.freeze_panes(1, 0)
    sheet.set_column(0, 0, 28)
    sheet.set_column(1, len(COLUMNS), 16)
    for i, row in enumerate(rows, start=1):
        sheet.write_string(i, 0, str(row[0]))
        for j, (_h, _a, kind) in enumerate(COLUMNS, start=1):
            if row[j] is not None:
                sheet.write_number(i, j, float(row[j]), formats[kind])
        sheet.write_string(i, len(COLUMNS) + 1, str(row[-1]))
    last = len(rows) + 1
    sheet.write_string(last, 0, "total", bold)
    for j, (_h, _a, kind) in enumerate(COLUMNS, start=1):
        column = xlsxwriter.utility.xl_col_to_name(j)
        cached = sum(float(r[j]) for r in rows if r[j] is not None)
        sheet.write_formula(
            last, j, f"=SUM({column}2:{column}{last})", total_formats[kind], round(cached, 6)
        )
    sheet.autofilter(0, 0, max(1, len(rows)), len(COLUMNS) + 1)
    notes = book.add_worksheet("About")
    notes.set_column(0, 0, 22)
    notes.set_column(1, 1, 90)
    for i, (k, v) in enumerate(about.items()):
        notes.write_string(i, 0, k, bold)
        notes.write_string(i, 1, v)
    book.close()
    return out.getvalue()


def _about(ledger: Ledger, filters: Filters, who: context.Viewer) -> dict[str, str]:
    return {
        "window": f"{filters.first} to {filters.last} (UTC, last day included)",
        "computed until": ledger.computed_until.isoformat(timespec="seconds"),
        "grouped by": ledger.group_by,
        "idle policy": ledger.idle_policy.value,
        "tenant": ledger.tenant or "all",
        "cluster": filters.cluster or "all",
        "pool": filters.pool or "all",
        "GPU model": filters.gpu_model or "all",
        "currency": ledger.currency,
        "total cost": str(ledger.totals.total_cost),
        "conservation": ledger.conservation_note(),
        "downloaded by": f"{who.name} ({who.role})",
    }


def _audit(actor: str, name: str, detail: dict[str, Any], outcome: str) -> None:
    try:
        context.get().wh.audit(actor, "download", name, json.dumps(detail), outcome=outcome)
    except WarehouseError as exc:  # the refusal or the file stands; the log says why not
        log.warning("cannot audit the download of %s (%s): %s", name, outcome, exc)


def register(server: flask.Flask) -> None:
    """Add ``/download/ledger.<csv|xlsx>`` to ``server``."""
    downloads = flask.Blueprint("gpuledger_downloads", __name__)

    @downloads.get("/download/ledger.<fmt>")
    def ledger_file(fmt: str) -> flask.typing.ResponseReturnValue:
        name = f"ledger.{fmt}"
        params = flask.request.args.to_dict()
        asked: dict[str, Any] = {"query": params, "from": flask.request.remote_addr or ""}
        if fmt not in FORMATS:
            return flask.jsonify(error=f"{name}: download ledger.csv or ledger.xlsx"), 404
        try:
            who = context.viewer()
        except Forbidden as exc:
            _audit("anonymous", name, asked, "denied")
            return flask.jsonify(error=str(exc)), 403
        asked["role"] = who.role
        try:
            filters = Filters.parse(params, today=context.get().now().date())
            ledger = ledger_answers.ledger(filters, who)
        except Forbidden as exc:
            _audit(who.name, name, {**asked, "why": str(exc)}, "denied")
            return flask.jsonify(error=str(exc)), 403
        except InputError as exc:
            _audit(who.name, name, {**asked, "why": str(exc)}, "invalid")
            return flask.jsonify(error=str(exc)), 400
        body = to_csv(ledger) if fmt == "csv" else to_xlsx(ledger, _about(ledger, filters, who))
        served = {**asked, "tenant": ledger.tenant, "rows": len(ledger.rows)}
        _audit(who.name, name, {**served, "total_cost": str(ledger.totals.total_cost)}, "ok")
        filename = f"gpuledger-ledger-{filters.first}-{filters.last}-by-{ledger.group_by}.{fmt}"
        return flask.Response(
            body,
            mimetype=FORMATS[fmt],
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )

    server.register_blueprint(downloads)
