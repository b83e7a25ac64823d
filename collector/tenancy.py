"""Tenant mapping: which tenant a namespace, a label or a Slurm account belongs to.

Rules are data (``collector.records.TenantRule``, kept in the warehouse's ``tenant_rules``).
A pattern is an exact value, or ends in ``*`` for a prefix match; label rules are
``key=value``. When several rules match, the lowest ``rank`` wins, then the longest pattern
(the most specific), then the first given. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from collector.records import TenantRule

UNMAPPED = "__unmapped__"


def _matches(pattern: str, value: str) -> bool:
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    return value == pattern


class TenantMapper:
    """Resolves a tenant ("org/project") from the attributes a source knows."""

    def __init__(self, rules: Iterable[TenantRule]):
        ordered = sorted(enumerate(rules), key=lambda ir: (ir[1].rank, -len(ir[1].pattern), ir[0]))
        self.rules = [r for _i, r in ordered]

    def resolve(
        self,
        *,
        namespace: str = "",
        labels: Mapping[str, str] | None = None,
        slurm_account: str = "",
    ) -> str:
        """The tenant of the first matching rule, or ``UNMAPPED``."""
        labels = labels or {}
        for rule in self.rules:
            if rule.kind == "namespace" and namespace and _matches(rule.pattern, namespace):
                return rule.tenant
            if rule.kind == "label":
                key, _, value = rule.pattern.partition("=")
                if key in labels and _matches(value, labels[key]):
                    return rule.tenant
            if (
                rule.kind == "slurm_account"
                and slurm_account
                and _matches(rule.pattern, slurm_account)
            ):
                return rule.tenant
        return UNMAPPED

    @staticmethod
    def split(tenant: str) -> tuple[str, str]:
        """(org, project) of a tenant id; an unmapped tenant is its own org."""
        org, _, project = tenant.partition("/")
        return org, project
