"""The monthly chargeback: built from the ledger, reconciled to the cent, the same bytes for
the same data, a tenant's report holding its rows alone, and a rewrite naming what moved."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import zipfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import fresh_database, ledger_between, simulate

from collector.records import JobEvent
from reports.chargeback import build_chargeback
from reports.files import render_csv, write_reports
from reports.formats import formats
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor


def _anchor() -> dt.datetime:
    """36 h into the latest month that began at least two days ago: three simulated days
    before it cross a month's end, and stay within the warehouse's retention."""
    today = dt.datetime.now(dt.UTC)
    first = today.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if today - first < dt.timedelta(days=2):
        first = (first - dt.timedelta(days=1)).replace(day=1)
    return first + dt.timedelta(hours=36)


NOW = _anchor()
MONTH = (NOW - dt.timedelta(days=2)).strftime("%Y-%m")  # the month that ended inside the data


@pytest.fixture(scope="module")
def fleet(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=3, gpus=16, seed=7, now=NOW)
        yield wh


def _total(data: bytes) -> Decimal:
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    return sum((Decimal(r["total_cost"]) for r in rows), Decimal(0))


def test_the_chargeback_reconciles_with_the_ledger(fleet: Warehouse) -> None:
    cb = build_chargeback(fleet, MONTH, now=NOW)
    assert not cb.partial and cb.reconciled is True
    month = cb.window
    ledger = ledger_between(fleet, month.start, month.end, now=NOW, by="tenant")
    assert cb.by_tenant.rows == ledger.rows  # the same cents as `gpuledger ledger`
    assert cb.lines.totals.total_cost == ledger.totals.total_cost
    assert _total(render_csv(cb)) == ledger.totals.capacity_cost
    for row in ledger.rows:
        mine = [r for r in cb.lines.rows if r.parts[0] == row.key]
        assert sum((r.total_cost for r in mine), Decimal(0)) == row.total_cost
    # the trend is the direct cost, day by day, summing to the month's
    direct = sum((p.direct_cost for p in cb.trend), Decimal(0))
    assert abs(direct - sum((r.direct_cost for r in ledger.rows), Decimal(0))) < Decimal("0.05")
    assert cb.change is not None and cb.change.current.month == MONTH


def test_a_tenants_report_holds_its_rows_alone(fleet: Warehouse, tmp_path: Path) -> None:
    everyone = build_chargeback(fleet, MONTH, now=NOW)
    orgs = sorted({r.key.split("/")[0] for r in everyone.by_tenant.rows})
    assert len(orgs) >= 2
    mine, other = orgs[0], orgs[1]
    cb = build_chargeback(fleet, MONTH, now=NOW, tenant=mine)
    assert cb.reconciled is True
    run = write_reports(cb, tmp_path, ("csv", "html", "xlsx"))
    for written in run.files:
        data = written.path.read_bytes()
        if written.path.suffix == ".xlsx":
            data = b"".join(
                zipfile.ZipFile(written.path).read(n)
                for n in zipfile.ZipFile(written.path).namelist()
            )
        if written.path.suffix == ".html":  # plotly.js's own words are not the report's
            data = re.sub(rb"<script.*?</script>", b"", data, flags=re.S)
        assert other.encode() not in data, f"{written.path.name} names tenant {other}"
        assert mine.encode() in data
    assert _total(run.files[0].path.read_bytes()) == sum(
        (r.total_cost for r in everyone.by_tenant.rows if r.key.startswith(mine + "/")),
        Decimal(0),
    )
    with pytest.raises(Exception, match="held no GPU"):
        build_chargeback(fleet, MONTH, now=NOW, tenant="no-such-org")


def test_the_same_data_writes_the_same_bytes(fleet: Warehouse, tmp_path: Path) -> None:
    kinds = formats("csv,xlsx,html,pdf")
    first = write_reports(build_chargeback(fleet, MONTH, now=NOW), tmp_path / "a", kinds)
    again = write_reports(build_chargeback(fleet, MONTH, now=NOW), tmp_path / "b", kinds)
    assert [w.sha256 for w in first.files] == [w.sha256 for w in again.files]
    pdf = next(w for w in first.files if w.path.suffix == ".pdf")
    assert pdf.path.read_bytes().startswith(b"%PDF") and pdf.bytes > 20_000  # charts inside
    book = zipfile.ZipFile(next(w.path for w in first.files if w.path.suffix == ".xlsx"))
    sheets = book.read("xl/workbook.xml").decode()
    assert all(f'name="{n}"' in sheets for n in ("Summary", "Tenants", "Lines", "Trend"))
    assert "<pane" in book.read("xl/worksheets/sheet2.xml").decode()  # frozen header
    html = next(w.path for w in first.files if w.path.suffix == ".html").read_text()
    assert "Plotly.newPlot" in html and "holds" in html


def test_writing_a_month_again_names_what_late_data_changed(
    engine: Warehouse, tmp_path: Path
) -> None:
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=3, gpus=8, seed=11, now=NOW)
        first = write_reports(build_chargeback(wh, MONTH, now=NOW), tmp_path, ("csv",))
        assert first.first and not first.changes
        same = write_reports(build_chargeback(wh, MONTH, now=NOW), tmp_path, ("csv",))
        assert not same.first and same.changes == ()
        # a job of a new tenant, reported late, inside the month
        start = dt.datetime.strptime(MONTH, "%Y-%m").replace(tzinfo=dt.UTC) + dt.timedelta(days=27)
        gpu = wh.rows(f"SELECT any(gpu_uuid) FROM {wh.database}.gpus")[0][0]
        common = {"cluster": "sim", "tenant": "late/comer", "org": "late", "project": "comer"}
        Ingestor(wh, 35, now=lambda: NOW).write_job_events(
            [
                JobEvent(start, job_id="late-1", event="started", gpu_uuids=(gpu,), **common),
                JobEvent(
                    start + dt.timedelta(hours=2),
                    job_id="late-1",
                    event="finished",
                    gpu_uuids=(gpu,),
                    started_at=start,
                    **common,
                ),
            ]
        )
        later = write_reports(build_chargeback(wh, MONTH, now=NOW), tmp_path, ("csv",))
    assert any("late/comer is new" in c for c in later.changes), later.changes


def test_unknown_formats_are_refused() -> None:
    with pytest.raises(Exception, match="docx is not a report format"):
        formats("csv,docx")
