"""The gpuledger process: opens the warehouse, runs the simulated (or real) sources on a
schedule, and serves the dashboard — all in one process in embedded mode, because the embedded
engine lets one process own its data directory and must not be forked after it is opened.
"""

from __future__ import annotations

from gpuledger.settings import Settings
from warehouse.client import Warehouse, connect
from warehouse.migrate import RenderOptions, migrate


def render_options(settings: Settings) -> RenderOptions:
    w = settings.warehouse
    return RenderOptions(
        database=w.database,
        cluster=w.cluster,
        raw_retention_days=w.raw_retention_days,
        rollup_1m_retention_days=w.rollup_1m_retention_days,
        rollup_1h_retention_days=w.rollup_1h_retention_days,
    )


def open_warehouse(settings: Settings, *, apply_migrations: bool = True) -> Warehouse:
    """Connect to the configured warehouse and bring its schema up to date."""
    w = settings.warehouse
    wh = connect(
        w.resolved_dsn,
        w.database,
        max_memory_bytes=w.max_memory_bytes,
        connect_timeout_s=w.connect_timeout_s,
    )
    if apply_migrations:
        migrate(wh, render_options(settings))
    return wh
