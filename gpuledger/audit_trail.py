"""The audit log's entries for what the command line changes beside the warehouse.

`gpuledger token` and `gpuledger user` change files beside the warehouse and work while `serve`
(or `demo`) owns it. Their entries must not be lost, and the embedded engine lets one process
own the data directory, so an entry goes:

- to the process that owns the data directory, over its socket (:func:`gpuledger.forward.tell`),
  which writes it into its audit log at once;
- when no process owns it, into the pending file (:mod:`gpuledger.audit_pending`), which the
  next process that opens the warehouse writes into the log (every command that reads or writes
  it, `gpuledger audit` included, and `serve` as it starts): these commands never open the
  warehouse themselves, so they never keep a starting `serve` out of it;
- with a ClickHouse server DSN, straight into the server's audit log.

When the owner or the server does not take it, it waits in the pending file as well (``-v``
says so).
"""

from __future__ import annotations

import getpass
import logging
import os
from typing import TYPE_CHECKING

from gpuledger.forward import tell
from gpuledger.output import one_line
from gpuledger_errors import GpuledgerError

if TYPE_CHECKING:
    from gpuledger.settings import Settings
    from warehouse.audit import AuditEntry

log = logging.getLogger(__name__)

#: How long the owner of the data directory has to take an entry, in seconds.
_TELL_TIMEOUT_S = 30.0


def os_user() -> str:
    """The operating-system user running the command line."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): say which uid
        return f"uid {os.getuid()}"


def record(settings: Settings, entry: AuditEntry) -> None:
    """Put ``entry`` into the audit log, or into the pending file for the next process that
    opens the warehouse (see the module's docstring). Raises only when the pending file
    cannot be written either (a ConfigError naming it)."""
    from gpuledger.audit_pending import keep
    from warehouse.client import embedded_path, lock_holder

    data_dir = embedded_path(settings.warehouse.resolved_dsn)
    try:
        if data_dir is None:
            _write_to_server(settings, entry)
            return
        pid = lock_holder(data_dir)
        if pid is not None:
            tell(data_dir, pid, entry, _TELL_TIMEOUT_S)
            return
        note = ""
    except GpuledgerError as exc:
        note = one_line(exc)
    keep(settings.audit_pending_file, entry)
    if note:  # nothing is lost, so no line beside the command's own: -v shows it
        log.info(
            "the audit log did not take this change now (%s); it waits in %s for the next "
            "gpuledger process that opens the warehouse",
            note,
            settings.audit_pending_file,
        )


def _write_to_server(settings: Settings, entry: AuditEntry) -> None:
    from gpuledger.app import open_warehouse
    from gpuledger.audit_pending import write

    wh = open_warehouse(settings, must_exist=True)
    try:
        write(wh, entry)
    finally:
        wh.close()
