"""Ingest tokens: what lets an agent write, and which cluster (and node) it may write for.

A token is shown once, when it is made (``gpuledger token create``); only its SHA-256 is kept,
in a JSON file beside the warehouse (``<data_dir>/ingest-tokens.json``, mode 0600, or
``server.tokens_file``). A file rather than a table, so that tokens can be made and revoked
while ``gpuledger serve`` holds the embedded data directory: the server reads the file again
when it changes. Tokens are long random strings, so a fast hash is enough (passwords, which
people choose, get argon2 elsewhere).

Format: ``glt_<id>_<secret>``: the id (8 hex digits) finds the entry, the whole token is
compared by its hash in constant time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

import polars as pl

from collector.records import Batch
from gpuledger.lockedfile import WatchedIndex, changing, entry_as, read_list
from gpuledger_errors import InputError

_TOKEN = re.compile(r"^glt_([0-9a-f]{8})_[A-Za-z0-9_-]{20,100}$")


class TokenError(InputError):
    """A token request that cannot be done as asked (unknown id, bad cluster name)."""


@dataclasses.dataclass(frozen=True)
class Token:
    """One ingest token's record (never the token itself)."""

    id: str
    sha256: str
    cluster: str
    node: str = ""  # empty: any node of the cluster
    created_at: str = ""
    created_by: str = ""
    note: str = ""
    revoked_at: str = ""

    @property
    def revoked(self) -> bool:
        return bool(self.revoked_at)

    def scope(self) -> str:
        return f"cluster {self.cluster}" + (f", node {self.node}" if self.node else "")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """The tokens file (see :mod:`gpuledger.lockedfile`)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def tokens(self) -> list[Token]:
        return [_token(entry, self.path) for entry in read_list(self.path, "tokens")]

    def create(
        self, cluster: str, node: str = "", *, by: str = "", note: str = ""
    ) -> tuple[str, Token]:
        """A new token for ``cluster`` (and ``node``): the token, shown once, and its record."""
        if not re.fullmatch(r"[\w.:-]{1,200}", cluster):
            raise TokenError(
                f"--cluster {cluster!r} is not a cluster name (letters, digits, . _ : -)"
            )
        with changing(self.path, "tokens") as entries:
            taken = {e.get("id") for e in entries}
            while (token_id := secrets.token_hex(4)) in taken:
                pass
            token = f"glt_{token_id}_{secrets.token_urlsafe(32)}"
            record = Token(
                token_id, _digest(token), cluster, node, _now(), created_by=by, note=note
            )
            entries.append(dataclasses.asdict(record))
        return token, record

    def revoke(self, token_id: str) -> Token:
        with changing(self.path, "tokens") as entries:
            for entry in entries:
                if entry.get("id") == token_id:
                    entry["revoked_at"] = entry.get("revoked_at") or _now()
                    return _token(entry, self.path)
        known = ", ".join(t.id for t in self.tokens()) or "none yet"
        raise TokenError(
            f"no token {token_id!r} (tokens: {known}); `gpuledger token list` shows them"
        )


def _token(entry: dict[str, Any], path: Path) -> Token:
    return entry_as(Token, entry, path, "a token")


class TokenBook:
    """What the server checks ingest against: the tokens file, read again when it changes."""

    def __init__(self, store: TokenStore, clock: Any = time.monotonic):
        self.store = store
        self._by_id = WatchedIndex(store.path, lambda: {t.id: t for t in store.tokens()}, clock)

    def __len__(self) -> int:
        return sum(not t.revoked for t in self._by_id.current().values())

    def check(self, authorization: str) -> tuple[Token | None, str]:
        """The token an ``Authorization`` header names, or None with why it is refused."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None, "no ingest token: send Authorization: Bearer <token> (agent.token)"
        match = _TOKEN.match(token)
        record = self._by_id.current().get(match[1]) if match else None
        if record is None or not hmac.compare_digest(record.sha256, _digest(token)):
            return None, "the ingest token is not known: make one with `gpuledger token create`"
        if record.revoked:
            return None, f"ingest token {record.id} was revoked at {record.revoked_at}"
        return record, ""


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def out_of_scope(batch: Batch, token: Token) -> str | None:
    """Why ``batch`` holds a row ``token`` may not write (another cluster, or another node for
    a node's token), or None when every row is its own."""
    samples = batch.samples
    if isinstance(samples, pl.DataFrame):
        rows: list[tuple[str, str, str]] = [
            ("gpu_samples", str(c), str(n))
            for c, n in samples.select("cluster", "node").unique().iter_rows()
        ]
    else:
        rows = [("gpu_samples", s.cluster, s.node) for s in samples]
    for kind in ("gpus", "nodes", "job_events", "processes", "health"):
        rows += [(kind, r.cluster, r.node) for r in getattr(batch, kind)]
    for kind, cluster, node in rows:
        if cluster != token.cluster:
            return (
                f"ingest token {token.id} writes for {token.scope()}, and the batch holds "
                f"{kind} of cluster {cluster!r}: nothing of it was written"
            )
        if token.node and node not in ("", token.node):
            return (
                f"ingest token {token.id} writes for {token.scope()}, and the batch holds "
                f"{kind} of node {node!r}: nothing of it was written"
            )
    return None
