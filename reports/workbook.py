"""The chargeback as an Excel workbook (xlsxwriter): a sheet per table, numbers as numbers
with formats (money in the report's currency, hours, percentages), frozen headers and
filters, and fixed document properties so the same data writes the same file."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from typing import Any

import xlsxwriter

from reports import tables
from reports.chargeback import Chargeback
from reports.tables import Table

_FORMATS = {
    "hours": "#,##0.000",
    "kwh": "#,##0.000",
    "ratio": "0.0%",
}


def render_xlsx(cb: Chargeback) -> bytes:
    out = io.BytesIO()
    book = xlsxwriter.Workbook(out, {"in_memory": True})
    # the properties' date is the report's (not the clock's): same data, same bytes
    book.set_properties(
        {
            "title": f"GPU chargeback {cb.month}",
            "author": "gpuledger",
            "created": cb.by_tenant.computed_until.replace(tzinfo=None),
        }
    )
    header = book.add_format({"bold": True, "bg_color": "#F5F7FA", "bottom": 1})
    formats = {k: book.add_format({"num_format": v}) for k, v in _FORMATS.items()}
    formats["money"] = book.add_format({"num_format": f'#,##0.00 "{cb.currency}"'})
    summary = book.add_worksheet("Summary")
    summary.write(0, 0, f"GPU chargeback {cb.month}", book.add_format({"bold": True}))
    summary.write(1, 0, f"tenant {cb.tenant}" if cb.tenant else "all tenants")
    summary.write(2, 0, f"figures as of {cb.by_tenant.computed_until:%Y-%m-%d %H:%M} UTC")
    summary.write(3, 0, "reconciled" if cb.reconciled else "NOT reconciled")
    _sheet(summary, tables.reconciliation(cb), header, formats, first_row=5)
    _sheet(summary, tables.change(cb), header, formats, first_row=12)
    for table in (tables.tenants(cb), tables.lines(cb), tables.trend(cb)):
        _sheet(book.add_worksheet(table.name), table, header, formats, freeze=True)
    book.close()
    return out.getvalue()


def _sheet(
    sheet: Any,
    table: Table,
    header: Any,
    formats: dict[str, Any],
    *,
    first_row: int = 0,
    freeze: bool = False,
) -> None:
    for c, name in enumerate(table.header):
        sheet.write_string(first_row, c, name, header)
        sheet.set_column(c, c, max(12, len(name) + 2))
    for r, row in enumerate(table.rows, start=first_row + 1):
        for c, value in enumerate(row):
            _write(sheet, r, c, value, formats.get(table.kind(c)))
    if freeze:
        sheet.freeze_panes(first_row + 1, 0)
        if table.rows:
            sheet.autofilter(first_row, 0, first_row + len(table.rows), len(table.header) - 1)


def _write(sheet: Any, r: int, c: int, value: Any, fmt: Any) -> None:
    if value is None:
        sheet.write_blank(r, c, None)
    elif isinstance(value, Decimal):
        sheet.write_number(r, c, float(value), fmt)
    elif isinstance(value, int | float):
        # to a millionth: sums of floats differ in their last bits from one run to the next
        sheet.write_number(r, c, round(value, 6), fmt)
    elif isinstance(value, dt.date):
        sheet.write_string(r, c, value.isoformat())
    else:
        sheet.write_string(r, c, str(value))
