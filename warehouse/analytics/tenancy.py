"""Whose rows are whose: a tenant viewer's scope (an org, or one org/project) against the
"org/project" keys that jobs, allocations and the ledger carry. Every analytic that answers
one tenant's view filters with these, so an org sees all of its projects and nothing else."""

from __future__ import annotations

import polars as pl


def owns(tenant: str, key: str) -> bool:
    """Whether ``key`` (an "org/project" tenant) belongs to ``tenant`` (an org or org/project)."""
    return key == tenant or key.startswith(tenant + "/")


def in_tenant(tenant: str, column: str = "tenant") -> pl.Expr:
    """Whether a row's ``column`` (an "org/project" key) belongs to ``tenant``, an org (all of
    its projects) or one org/project."""
    return (pl.col(column) == tenant) | pl.col(column).str.starts_with(tenant + "/")
