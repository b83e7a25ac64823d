"""The chargeback as a document: HTML with interactive charts, and the same as a PDF (through
WeasyPrint) with the charts as images. Both say what the month is, whose it is, whether it was
over, and show the reconciliation."""

from __future__ import annotations

import base64
import html
from decimal import Decimal
from typing import Any

from reports import charts, tables
from reports.chargeback import Chargeback
from reports.tables import Table

_CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; font-size: 10pt; color: #1f2933;
       margin: 2em; }
h1 { font-size: 18pt; margin-bottom: 0.2em; }
h2 { font-size: 13pt; margin-top: 1.6em; border-bottom: 1px solid #cbd2d9; }
.meta { color: #52606d; }
.note { background: #fff8e1; padding: 0.5em; border-left: 3px solid #f0b429; }
.ok { color: #1f7a1f; } .bad { color: #b42318; font-weight: bold; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #e4e7eb; padding: 2px 6px; }
th { background: #f5f7fa; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.sub td { font-weight: bold; background: #f5f7fa; }
@page { size: A4 landscape; margin: 1.2cm; }
img.chart { width: 20cm; }
pre { white-space: pre-wrap; }
h2.charts { page-break-before: always; }
"""


def _cell(value: Any, kind: str) -> str:
    if kind == "text":
        return f"<td>{html.escape(str(value if value is not None else ''))}</td>"
    if kind == "ratio" and value is not None:  # a share reads better as a percentage here
        return f'<td class="num">{value:.1%}</td>'

    return f'<td class="num">{html.escape(tables.text(value, kind))}</td>'


def _table(t: Table, *, currency: str, subtotal_by: int | None = None) -> str:
    """An HTML table; ``subtotal_by`` adds a subtotal row after each run of that column."""
    head = "".join(
        f"<th>{html.escape(h.replace('_', ' '))}"
        + (f" ({currency})" if t.kind(i) == "money" else "")
        + "</th>"
        for i, h in enumerate(t.header)
    )
    body: list[str] = []
    for n, row in enumerate(t.rows):
        body.append("<tr>" + "".join(_cell(v, t.kind(i)) for i, v in enumerate(row)) + "</tr>")
        last = n + 1 == len(t.rows) or t.rows[n + 1][subtotal_by or 0] != row[subtotal_by or 0]
        if subtotal_by is not None and last:
            body.append(_subtotal(t, row[subtotal_by], subtotal_by))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _subtotal(t: Table, key: Any, column: int) -> str:
    """The sum of the money and hours columns over the rows whose ``column`` is ``key``."""
    mine = [r for r in t.rows if r[column] == key]
    cells = []
    for i in range(len(t.header)):
        kind = t.kind(i)
        if i == column:
            cells.append(f"<td>{html.escape(str(key))} total</td>")
        elif kind in ("money", "hours", "kwh"):
            values = [r[i] for r in mine if r[i] is not None]
            total = sum(values, Decimal(0) if kind == "money" else 0.0) if values else None
            cells.append(_cell(total, kind))
        else:
            cells.append("<td></td>")
    return f'<tr class="sub">{"".join(cells)}</tr>'


def _title(cb: Chargeback) -> str:
    whose = f"tenant {cb.tenant}" if cb.tenant else "all tenants"
    return f"GPU chargeback {cb.month} — {whose}"


def render_html(cb: Chargeback, *, images: dict[str, bytes] | None = None) -> str:
    """The report as one self-contained HTML page. Charts are interactive (Plotly, its
    script inline once) unless ``images`` gives each chart's PNG (for the PDF)."""
    led = cb.by_tenant
    parts = [
        f"<h1>{html.escape(_title(cb))}</h1>",
        f'<p class="meta">{led.window.first_day} to {led.window.last_day} (UTC) · idle cost '
        f"policy {led.idle_policy.value} · idle below {led.idle_rule.threshold_ratio:.0%} for "
        f"{led.idle_rule.min_duration_s // 60} min · currency {html.escape(cb.currency)} · "
        f"figures as of {led.computed_until:%Y-%m-%d %H:%M} UTC</p>",
    ]
    if cb.partial:
        parts.append(
            '<p class="note">The month was not over when this report was made: its figures '
            "will grow until it ends. Make the report again after the month's end.</p>"
        )
    verdict = cb.reconciled
    mark = (
        '<span class="ok">holds</span>'
        if verdict
        else '<span class="bad">DOES NOT HOLD</span>'
        if verdict is False
        else "n/a (no GPU inventory to cost capacity by)"
    )
    claim = (
        "The lines add up to the tenant total"
        if cb.tenant
        else "Charges plus the unshared line equal capacity GPU-hours × price"
    )
    parts += [
        "<h2>Reconciliation</h2>",
        f"<p>{claim} to the cent: {mark}.</p>",
        _table(tables.reconciliation(cb), currency=cb.currency),
        "<h2>Per tenant</h2>",
        _table(tables.tenants(cb), currency=cb.currency, subtotal_by=0),
        "<h2>Month over month</h2>",
    ]
    if cb.change is None:
        parts.append(f"<p>{html.escape(cb.no_change_reason)}</p>")
    else:
        parts.append(f"<pre>{html.escape(cb.change.to_text())}</pre>")
        parts.append(_table(tables.change(cb), currency=cb.currency))
    parts.append('<h2 class="charts">Trends</h2>')
    for n, (name, fig) in enumerate(charts.figures(cb)):
        if images is not None:
            data = base64.b64encode(images[name]).decode()
            parts.append(f'<img class="chart" alt="{name}" src="data:image/png;base64,{data}">')
        else:
            parts.append(
                fig.to_html(full_html=False, include_plotlyjs=n == 0, div_id=f"chart-{name}")
            )
    parts += [
        "<h2>Lines (tenant × user × GPU model)</h2>",
        _table(tables.lines(cb), currency=cb.currency),
        f'<p class="meta">{html.escape(led.conservation_note())}</p>',
    ]
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(_title(cb))}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(parts)}</body></html>"
    )


def render_pdf(cb: Chargeback) -> bytes:
    """The report as a PDF: the HTML with its charts drawn as images."""
    import weasyprint

    with charts.image_server():
        images = {name: charts.png(fig) for name, fig in charts.figures(cb)}
    return bytes(weasyprint.HTML(string=render_html(cb, images=images)).write_pdf())
