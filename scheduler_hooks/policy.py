"""The scheduler hooks' rules, parsed from the settings' one-line texts: priority classes by
efficiency, fair-share weights per class, per-tenant idle and interactive-duration limits, the
hysteresis that keeps advice from flapping, and the names a tenant, pool and GPU model have in
Kueue, Volcano and Slurm.

Settings hold scalars only, so lists are texts (``"0.6=high,0.3=normal,0=low"``); each parser
here refuses a bad one with a :class:`PolicyError` that names the key, the value and what to
write instead, and the settings (``[scheduler]``) call them when they are loaded.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from gpuledger_errors import InputError

#: Kueue's API version unless asked otherwise (served from Kueue v0.15, stored from v0.16).
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


class PolicyError(InputError):
    """A scheduler setting that cannot be read; the message names it and says what to write."""


def pairs(text: str, key: str, example: str) -> list[tuple[str, str]]:
    """``"a=1, b=2"`` as [("a", "1"), ("b", "2")]; an item without "=" is refused."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise PolicyError(f"scheduler.{key}: {item!r} is not NAME=VALUE (e.g. {example!r})")
        out.append((name.strip(), value.strip()))
    names = [n for n, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PolicyError(f"scheduler.{key} names {', '.join(twice)} twice: give each once")
    return out


def duration_s(text: str, key: str) -> float:
    """``"90s"``, ``"30m"``, ``"2h"`` or ``"1d"`` in seconds."""
    found = _DURATION.match(text)
    if not found:
        raise PolicyError(
            f"scheduler.{key}: {text!r} is not a duration: a number and s, m, h or d (e.g. 2h)"
        )
    return float(found[1]) * _UNIT_S[found[2]]


def ratio(text: str, key: str) -> float:
    """``"5%"`` or ``"0.05"`` as 0.05, within 0-1."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise PolicyError(f"scheduler.{key}: {text!r} is not a share: give 5% or 0.05 (0-1)")
    return value


def most_specific(table: Mapping[str, object], tenant: str) -> object | None:
    """The entry for ``tenant`` ("org/project"), else its org's, else "*", else None."""
    for name in (tenant, tenant.split("/")[0], "*"):
        if name in table:
            return table[name]
    return None


@dataclasses.dataclass(frozen=True)
class PriorityPolicy:
    """Efficiency (used ÷ measured allocated GPU-hours over the trailing ``window_days``) to a
    priority class: the first class, highest threshold first, whose threshold the score
    reaches; each class's fair-share weight."""

    window_days: float = 7.0
    classes: tuple[tuple[float, str], ...] = ((0.6, "high"), (0.3, "normal"), (0.0, "low"))
    weights: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {"high": 2.0, "normal": 1.0, "low": 0.5}
    )

    def class_of(self, score: float) -> str:
        return next(name for threshold, name in self.classes if score >= threshold)

    @classmethod
    def parse(cls, window_days: float, classes: str, weights: str) -> PriorityPolicy:
        if not 0 < window_days <= 366:
            raise PolicyError(
                f"scheduler.priority_window_days {window_days:g} must be more than 0 and at "
                "most 366 (the trailing days efficiency is measured over)"
            )
        found = sorted(((ratio(v, "priority_classes"), n) for n, v in _swap(classes)), reverse=True)
        if not found or found[-1][0] != 0:
            raise PolicyError(
                f"scheduler.priority_classes {classes!r} must give a class from 0 up, so that "
                'every tenant gets one (e.g. "0.6=high,0.3=normal,0=low")'
            )
        table = {n: _weight(v) for n, v in pairs(weights, "fair_share_weights", "high=2,low=0.5")}
        missing = sorted({n for _, n in found} - set(table))
        if missing:
            raise PolicyError(
                f"scheduler.fair_share_weights gives no weight to {', '.join(missing)}: give "
                "each priority class one (e.g. high=2,normal=1,low=0.5)"
            )
        return cls(window_days, tuple(found), table)


def _swap(text: str) -> list[tuple[str, str]]:
    """``"0.6=high"`` items as (class, threshold) pairs, each class once."""
    items = pairs(text, "priority_classes", "0.6=high,0.3=normal,0=low")
    return [(name, threshold) for threshold, name in items]


def _weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise PolicyError(
            f"scheduler.fair_share_weights: {text!r} is not a positive number (e.g. 1 or 0.5)"
        )
    return value


@dataclasses.dataclass(frozen=True)
class IdleLimit:
    """Run:ai's GPU-idle limit: a job whose GPUs stayed under ``threshold_ratio`` for
    ``after_s`` is proposed for preemption."""

    threshold_ratio: float
    after_s: float


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-tenant limits (the most specific entry wins: org/project, org, then "*")."""

    idle: Mapping[str, IdleLimit] = dataclasses.field(default_factory=dict)
    interactive_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    interactive_types: frozenset[str] = frozenset({"notebook"})

    def idle_of(self, tenant: str) -> IdleLimit | None:
        found = most_specific(self.idle, tenant)
        return found if isinstance(found, IdleLimit) else None

    def interactive_of(self, tenant: str) -> float | None:
        found = most_specific(self.interactive_s, tenant)
        return float(found) if isinstance(found, float) else None

    @classmethod
    def parse(cls, idle: str, interactive: str, types: str) -> Limits:
        limits = {}
        for tenant, value in pairs(idle, "idle_limits", "ml=5%/2h, *=5%/4h"):
            share, sep, after = value.partition("/")
            if not sep:
                raise PolicyError(
                    f"scheduler.idle_limits: {value!r} for {tenant} is not SHARE/DURATION "
                    "(e.g. 5%/2h: idle under 5% for 2 hours)"
                )
            limits[tenant] = IdleLimit(
                ratio(share, "idle_limits"), duration_s(after, "idle_limits")
            )
        durations = {
            t: duration_s(v, "interactive_limits")
            for t, v in pairs(interactive, "interactive_limits", "ml=8h, *=12h")
        }
        for name, seconds in [*((t, x.after_s) for t, x in limits.items()), *durations.items()]:
            if seconds <= 0:
                raise PolicyError(f"scheduler: the limit of {name} must be longer than 0")
        kinds = frozenset(x.strip() for x in types.split(",") if x.strip())
        if durations and not kinds:
            raise PolicyError("scheduler.interactive_types names no workload type: e.g. notebook")
        return cls(limits, durations, kinds)


@dataclasses.dataclass(frozen=True)
class Hysteresis:
    """When advice is proposed, and when it replaces the advice in force: its condition has
    held ``hold_s`` (idle GPUs idle that long, waiting jobs waited that long), and a new
    amount replaces the old only when they differ by more than ``min_change_gpus``.
    Recovered GPU-hours are counted over ``horizon_h`` hours ahead."""

    hold_s: float = 1800.0
    min_change_gpus: float = 1.0
    horizon_h: float = 24.0


@dataclasses.dataclass(frozen=True)
class Names:
    """What the scheduler calls a tenant's queue or account and a (pool, model)'s flavor."""

    kueue_queues: Mapping[str, str] = dataclasses.field(default_factory=dict)
    kueue_flavors: Mapping[str, str] = dataclasses.field(default_factory=dict)
    volcano_queues: Mapping[str, str] = dataclasses.field(default_factory=dict)
    slurm_accounts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    kueue_version: str = "v1beta2"
    integer_weight_scale: int = 2

    def shares(self, weight: float) -> int:
        """A weight as the whole number Volcano and Slurm take (at least 1)."""
        return max(1, round(weight * self.integer_weight_scale))

    def cluster_queue(self, tenant: str) -> str:
        """The tenant's ClusterQueue: as set, else "org/project" as a DNS label (org-project)."""
        return self.kueue_queues.get(tenant) or dns_label(tenant)

    def flavor(self, pool: str, model: str) -> str:
        """The ResourceFlavor of (pool, model): "pool/model", then "model", then the model as a
        DNS label (a pool-wide quota, model '', is the pool's)."""
        found = self.kueue_flavors.get(f"{pool}/{model}") or self.kueue_flavors.get(model)
        return found or dns_label(model or pool)

    def volcano_queue(self, tenant: str) -> str:
        return self.volcano_queues.get(tenant) or dns_label(tenant)

    def slurm_account(self, tenant: str) -> str:
        """The tenant's Slurm account: as set, else its project (Slurm accounts are flat)."""
        return self.slurm_accounts.get(tenant) or tenant.rsplit("/", 1)[-1]

    @classmethod
    def parse(
        cls,
        kueue_queues: str = "",
        kueue_flavors: str = "",
        volcano_queues: str = "",
        slurm_accounts: str = "",
        gpu_resource: str = "nvidia.com/gpu",
        kueue_version: str = "v1beta2",
        integer_weight_scale: int = 2,
    ) -> Names:
        if kueue_version not in KUEUE_VERSIONS:
            raise PolicyError(
                f"scheduler.kueue_api_version {kueue_version!r} is not one of "
                f"{', '.join(KUEUE_VERSIONS)} (v1beta1 only for Kueue before v0.15)"
            )
        if not gpu_resource.strip():
            raise PolicyError("scheduler.gpu_resource is empty: e.g. nvidia.com/gpu")
        if not 1 <= integer_weight_scale <= 1000:
            raise PolicyError(
                f"scheduler.integer_weight_scale {integer_weight_scale} must be 1 to 1000"
            )
        return cls(
            dict(pairs(kueue_queues, "kueue_queues", "ml/nlp=nlp-cq")),
            dict(pairs(kueue_flavors, "kueue_flavors", "train/H100=h100-train")),
            dict(pairs(volcano_queues, "volcano_queues", "ml/nlp=nlp")),
            dict(pairs(slurm_accounts, "slurm_accounts", "ml/nlp=nlp")),
            gpu_resource.strip(),
            kueue_version,
            integer_weight_scale,
        )


def dns_label(text: str) -> str:
    """``text`` as a Kubernetes object name: lower case, runs of anything else as "-"."""
    return _DNS_LABEL.sub("-", text.lower()).strip("-") or "default"


@dataclasses.dataclass(frozen=True)
class AdvicePolicy:
    """Everything the advice reads from the settings."""

    priority: PriorityPolicy = PriorityPolicy()
    limits: Limits = Limits()
    hysteresis: Hysteresis = Hysteresis()
    names: Names = Names()
