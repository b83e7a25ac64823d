"""People who may log in, and what they may see: ``admin`` and ``manager`` see everything; a
``tenant:ORG`` or ``tenant:ORG/PROJECT`` user sees only that tenant's rows.

Users live in a JSON file beside the warehouse (``<data_dir>/users.json``, mode 0600, or
``server.users_file``), with argon2 hashes of their passwords, so that ``gpuledger user`` can
change them while ``gpuledger serve`` runs (it reads the file again when it changes).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import secrets
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from gpuledger.lockedfile import WatchedIndex, changing, entry_as, read_list
from gpuledger_errors import InputError

ROLES = ("admin", "manager")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
_TENANT = re.compile(r"^tenant:[^/\s]+(/[^/\s]+)?$")
_HASHER = PasswordHasher()
#: Verified against when the name is unknown, so that a wrong name costs as long as a wrong
#: password (no telling which names exist by timing).
_DECOY = _HASHER.hash(secrets.token_urlsafe(16))


class UserError(InputError):
    """A user request that cannot be done as asked (bad name or role, unknown user)."""


def check_role(role: str) -> str:
    if role in ROLES or _TENANT.match(role):
        return role
    raise UserError(
        f"--role {role!r} is not a role: use admin, manager, tenant:ORG or tenant:ORG/PROJECT"
    )


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    role: str
    argon2: str
    created_at: str = ""
    created_by: str = ""

    @property
    def tenant(self) -> str | None:
        """The org or org/project this user is limited to; None: sees every tenant."""
        return self.role.removeprefix("tenant:") if self.role.startswith("tenant:") else None


class UserStore:
    """The users file (see :mod:`gpuledger.lockedfile`)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def users(self) -> list[User]:
        return [_user(entry, self.path) for entry in read_list(self.path, "users")]

    def add(self, name: str, role: str, password: str, *, by: str = "") -> User:
        if not _NAME.match(name):
            raise UserError(
                f"user name {name!r} must be 1-100 letters, digits or . _ @ -, starting with a "
                "letter or digit"
            )
        check_role(role)
        if len(password) < 12:
            raise UserError("the password must be at least 12 characters long")
        with changing(self.path, "users") as entries:
            if any(e.get("name") == name for e in entries):
                raise UserError(f"user {name!r} exists: remove it first to change it")
            user = User(name, role, _HASHER.hash(password), _now(), by)
            entries.append(dataclasses.asdict(user))
        return user

    def remove(self, name: str) -> User:
        with changing(self.path, "users") as entries:
            for i, entry in enumerate(entries):
                if entry.get("name") == name:
                    return _user(entries.pop(i), self.path)
        known = ", ".join(u.name for u in self.users()) or "none yet"
        raise UserError(f"no user {name!r} (users: {known})")


def _user(entry: dict[str, Any], path: Path) -> User:
    return entry_as(User, entry, path, "a user")


class UserBook:
    """What the server checks logins against: the users file, read again when it changes."""

    def __init__(self, store: UserStore, clock: Any = time.monotonic):
        self.store = store
        self._by_name = WatchedIndex(store.path, lambda: {u.name: u for u in store.users()}, clock)

    def __len__(self) -> int:
        return len(self._by_name.current())

    def get(self, name: str) -> User | None:
        """The user still on file under ``name`` (a removed user's session ends with it)."""
        return self._by_name.current().get(name)

    def verify(self, name: str, password: str) -> User | None:
        """The user when ``password`` is theirs, else None (in about the same time)."""
        return _verified(self.get(name), password)


def _verified(user: User | None, password: str) -> User | None:
    """``user`` when ``password`` is theirs; None for a wrong one or no user, in about the
    same time (no telling which names exist by timing)."""
    try:
        _HASHER.verify(user.argon2 if user else _DECOY, password)
    except (VerificationError, InvalidHashError):
        return None
    return user


class RoleRefused(UserError):
    """Who asked for something only some roles may do has none of them (or gave a wrong
    password, or there are no users)."""


def with_role(
    store: UserStore, name: str, password: str, what: str, roles: Sequence[str] = ("admin",)
) -> User:
    """The user ``name`` when ``password`` is theirs and their role is one of ``roles``, else
    :class:`RoleRefused` saying why, and what to do, for ``what`` (``sql --write``)."""
    allowed = " or ".join(roles)
    someone = " or ".join(f"an {r}" if r[0] in "aeiou" else f"a {r}" for r in roles)
    add = f"`gpuledger user add NAME --role {roles[-1]}`"
    users = {u.name: u for u in store.users()}
    if not users:
        raise RoleRefused(
            f"{what} needs a gpuledger user of role {allowed}, and there are no users yet "
            f"({store.path}): add one with {add}"
        )
    user = _verified(users.get(name), password)
    if user is None:
        raise RoleRefused(
            f"{what}: the user name {name!r} or its password is wrong; `gpuledger user list` "
            "shows the users"
        )
    if user.role not in roles:
        raise RoleRefused(
            f"{what} needs role {allowed}, and user {name} has role {user.role}: run it as "
            f"{someone}, or add one with {add}"
        )
    return user


def new_password() -> str:
    """A password for a user made without one (shown once)."""
    return secrets.token_urlsafe(18)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
