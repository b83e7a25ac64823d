"""What only some roles may do from the command line runs as a gpuledger user: ``sql --write``
(role admin) and ``advise approve|reject|apply`` (admin or manager).

The user is named with ``--user`` or a settings key; its password is asked on the terminal, or
read from stdin's first line with ``--password-stdin``, and checked against the users file
(argon2). A refusal (no users yet, a wrong name or password, a role that may not) ends the
command with one line and is in the audit log under the name given, with the OS user's.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuledger.audit_trail import os_user
from gpuledger_errors import GpuledgerError, InputError

if TYPE_CHECKING:
    from gpuledger.settings import Settings
    from gpuledger.users import User
    from warehouse.client import Warehouse


def named(name: str, what: str, roles: Sequence[str], key: str) -> str:
    """``name``, or an :class:`InputError` saying how to give one (``key``: the settings key
    that names the user, e.g. ``sql.user``)."""
    if name:
        return name
    env = "GPULEDGER_" + key.upper().replace(".", "__")
    raise InputError(
        f"{what} runs as a gpuledger user of role {' or '.join(roles)}: give --user NAME (or "
        f"set {key}, {env}); `gpuledger user list` shows the users"
    )


def log_in(
    settings: Settings,
    wh: Warehouse,
    name: str,
    *,
    password_stdin: bool,
    what: str,
    roles: Sequence[str],
    action: str,
    obj: str = "",
    detail: str = "",
) -> User:
    """The user ``name``, once its password is read and checked and its role is one of
    ``roles``; a refusal is audited (``action``, outcome ``denied``, on ``obj``, with
    ``detail`` and the reason) before it is raised."""
    from gpuledger.users import RoleRefused, UserStore, with_role

    password = read_password(password_stdin, name, what)
    try:
        return with_role(UserStore(settings.users_file), name, password, what, roles)
    except RoleRefused as exc:
        audit(wh, name, action, f"{detail}\n-- {exc}" if detail else str(exc), "denied", obj=obj)
        raise


def read_password(from_stdin: bool, name: str, what: str) -> str:
    """The password of ``name``: stdin's first line, or asked on the terminal."""
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    if sys.stdin.isatty():
        return getpass.getpass(f"password of gpuledger user {name}: ")
    raise InputError(
        f"{what} asks for the password of {name} on a terminal, and stdin is not one: "
        "give it on stdin's first line with --password-stdin"
    )


def audit(
    wh: Warehouse, name: str, action: str, detail: str, outcome: str, *, obj: str = ""
) -> None:
    """Put what the user did (or was refused) on record under its name and the OS user's, on
    ``obj`` (default: the database). Best effort: when the log cannot take it (a statement
    dropped the log itself), a warning on stderr says so instead."""
    try:
        wh.audit(
            name, action, obj or wh.database, f"{detail}\n-- OS user {os_user()}", outcome=outcome
        )
    except GpuledgerError as exc:
        print(f"gpuledger: warning: the audit log could not record this: {exc}", file=sys.stderr)
