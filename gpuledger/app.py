"""The gpuledger process: opens the warehouse, runs the simulated (or real) sources on a
schedule, and serves the dashboard — all in one process in embedded mode, because the embedded
engine lets one process own its data directory and must not be forked after it is opened.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from gpuledger.audit_pending import drain
from gpuledger.settings import Settings
from gpuledger_errors import GpuledgerError, InputError
from warehouse.client import Warehouse, connect
from warehouse.migrate import RenderOptions, SchemaDamaged, migrate

log = logging.getLogger(__name__)


def render_options(settings: Settings) -> RenderOptions:
    w = settings.warehouse
    return RenderOptions(
        database=w.database,
        cluster=w.cluster,
        raw_retention_days=w.raw_retention_days,
        rollup_1m_retention_days=w.rollup_1m_retention_days,
        rollup_1h_retention_days=w.rollup_1h_retention_days,
    )


def open_warehouse(
    settings: Settings, *, apply_migrations: bool = True, must_exist: bool = False
) -> Warehouse:
    """Connect to the configured warehouse and bring its schema up to date. ``must_exist``:
    a command that only reads refuses an embedded data directory that holds no warehouse,
    rather than creating an empty one and answering from it."""
    w = settings.warehouse
    data_dir = Path(w.data_dir).expanduser()
    if must_exist and not w.dsn and not _holds_files(data_dir):
        raise InputError(
            f"there is no warehouse in {w.data_dir}: give the right --data-dir (or --dsn), or "
            "fill this one with `gpuledger demo`, `gpuledger import` or `gpuledger serve`"
        )
    wh = connect(
        w.resolved_dsn,
        w.database,
        max_memory_bytes=w.max_memory_bytes,
        connect_timeout_s=w.connect_timeout_s,
    )
    # the engine keeps no trace of a dropped database: a file beside it says one was made
    made = data_dir / ".gpuledger-database" if not w.dsn else None
    if made is not None and made.is_file() and made.read_text().strip() == w.database:
        present = wh.rows(
            "SELECT count() FROM system.databases WHERE name = {db:String}", {"db": w.database}
        )[0][0]
        if not present and apply_migrations:
            raise SchemaDamaged(
                f"the database {w.database} is gone from {w.data_dir} although gpuledger made "
                "it (dropped by hand?); its data is lost. `gpuledger db migrate` creates it "
                "again, empty"
            )
    if apply_migrations:
        migrate(wh, render_options(settings))
        if made is not None:
            with contextlib.suppress(OSError):  # a read-only directory only loses this check
                made.write_text(w.database + "\n")
        write_pending(wh, settings)
    return wh


def write_pending(wh: Warehouse, settings: Settings) -> None:
    """Write the audit entries that wait in the pending file (gpuledger.audit_pending) into
    ``wh``. Best effort: the command goes on when they cannot be written (they wait for the
    next process), and a warning says why."""
    try:
        drain(wh, settings.audit_pending_file)
    except GpuledgerError as exc:
        log.warning("the audit entries in %s wait: %s", settings.audit_pending_file, exc)


def reading_warehouse(settings: Settings, wh: Warehouse | None) -> Warehouse:
    """The warehouse a read command answers from: ``wh`` when it was handed one (the serving
    process's own, for a command sent to it; see :mod:`gpuledger.forward`), else the
    configured one, which must exist."""
    return wh if wh is not None else open_warehouse(settings, must_exist=True)


def _holds_files(data_dir: Path) -> bool:
    try:
        return data_dir.is_dir() and any(data_dir.iterdir())
    except OSError as exc:  # a name too long, a directory not readable
        raise InputError(
            f"cannot read the data directory {str(data_dir)!r}: {exc.strerror}; give the "
            "right --data-dir (or --dsn)"
        ) from None
