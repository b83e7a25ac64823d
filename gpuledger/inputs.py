"""The days and times a user types (``--from``, ``--at``, ``--since``, ``--start``), read the
same way by every command: a mistake, or a time outside what the warehouse holds, is an
:class:`~gpuledger_errors.InputError` that names the flag and the value."""

from __future__ import annotations

from warehouse.times import day, instant

# both live in the warehouse, so that the dashboards' API reads them the same way
__all__ = ["day", "instant"]
