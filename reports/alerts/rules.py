"""The alert rules as the settings give them (``[alerts]``), parsed and checked once.

The settings take scalar keys only, so lists are strings with a small syntax, checked here so
that a mistake is named with its key and value when the settings load:

- ``rules``: some of ``idle,waiting,unhealthy,borrowed``;
- ``idle_overrides``: ``TENANT=PERCENT%/DURATION`` entries separated by commas, e.g.
  ``ml/vision=2%/2h, research=10%/30m``; the duration may be left out (``ml=2%``: the default's);
- ``idle_exempt``: tenants separated by commas, e.g. ``ops, ml/notebooks``;
- ``unhealthy_xids``: Xid numbers separated by commas, or ``*`` for every Xid;
- durations: a number of seconds, or a number with ``s``, ``m``, ``h`` or ``d``.

A tenant is an org (``ml``, which covers its projects) or ``org/project``; for a project the
most specific entry wins.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from gpuledger_errors import InputError

#: The rules, in the order they are evaluated and reported.
RULES = ("idle", "waiting", "unhealthy", "borrowed")
#: What each rule watches, in a few words (notices and help name it).
TITLES = {
    "idle": "GPU idle in a job",
    "waiting": "GPUs unallocated while jobs wait",
    "unhealthy": "GPU unhealthy",
    "borrowed": "idle borrowed GPUs",
}
SEVERITY = {"idle": "warning", "waiting": "warning", "unhealthy": "critical", "borrowed": "warning"}
#: The Xids that say the GPU or its memory needs attention (NVIDIA's Xid catalogue): double-bit
#: ECC (48), row remapping (63, 64), NVLink (74), fallen off the bus (79), high single-bit ECC
#: rate (92), contained and uncontained ECC (94, 95), GSP errors (119, 120). Application
#: faults (13, 31, 43, ...) are left out: they say the job is wrong, not the GPU.
DEFAULT_XIDS = "48,63,64,74,79,92,94,95,119,120"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd]?)$")
_TENANT = re.compile(r"^[^,=/\s]+(/[^,=/\s]+)?$")


@dataclasses.dataclass(frozen=True)
class IdleLimit:
    """Idle: a held GPU under ``util_percent`` for at least ``for_s`` seconds."""

    util_percent: float
    for_s: int

    @property
    def threshold_ratio(self) -> float:
        return self.util_percent / 100

    def text(self) -> str:
        return f"under {self.util_percent:g}% for {duration_text(self.for_s)}"


@dataclasses.dataclass(frozen=True)
class AlertRules:
    """The rules to evaluate and their limits (see the module docstring and the settings)."""

    rules: tuple[str, ...] = RULES
    idle: IdleLimit = IdleLimit(5.0, 3600)
    idle_overrides: tuple[tuple[str, IdleLimit], ...] = ()
    idle_exempt: tuple[str, ...] = ()
    waiting_for_s: int = 900
    unhealthy_xids: tuple[int, ...] | None = tuple(int(x) for x in DEFAULT_XIDS.split(","))
    unhealthy_xid_window_s: int = 3600
    borrowed_min_gpus: float = 1.0
    cooldown_s: int = 14_400
    dashboard_url: str = ""

    def idle_limit(self, tenant: str) -> IdleLimit | None:
        """The idle limit for ``tenant``: the most specific entry wins (its own exemption or
        override, else its org's), else the default; None when exempt."""
        own = dict(self.idle_overrides)
        for name in (tenant, tenant.partition("/")[0]):
            if name in self.idle_exempt:
                return None
            if name in own:
                return own[name]
        return self.idle

    def limits(self) -> set[IdleLimit]:
        """Every idle limit in use (the default and the overrides)."""
        return {self.idle, *(limit for _, limit in self.idle_overrides)}

    def link(self, path: str, **query: str) -> str:
        """The dashboard page ``path`` with the shared filters ``query`` (empty ones left
        out), under ``dashboard_url`` when it is set."""
        given = {k: v for k, v in query.items() if v}
        tail = path + ("?" + urlencode(given) if given else "")
        return self.dashboard_url.rstrip("/") + tail if self.dashboard_url else tail


def duration_text(seconds: float) -> str:
    """A duration as alerts say it: ``45 s``, ``20 min``, ``3.0 h``, ``2.5 d``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def parse_duration(text: str, label: str) -> int:
    """Seconds from ``90``, ``90s``, ``30m``, ``2h`` or ``1d`` (``label`` names the setting)."""
    match = _DURATION.match(text.strip())
    if not match:
        raise InputError(
            f"{label} {text!r} is not a duration: give seconds, or a number with s, m, h or d "
            "(90, 30m, 2h)"
        )
    return round(float(match[1]) * _UNITS[match[2] or "s"])


def parse_percent(text: str, label: str) -> float:
    """A utilisation in percent from ``2%`` or ``2`` (0 to 100)."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 100:
        raise InputError(f"{label} {text!r} is not a percentage from 0 to 100, e.g. 5%")
    return value


def parse_tenants(text: str, label: str) -> tuple[str, ...]:
    """Tenants (``org`` or ``org/project``) separated by commas."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        _tenant(name, label)
    return tuple(names)


def _tenant(name: str, label: str) -> str:
    if not _TENANT.match(name):
        raise InputError(
            f"{label} tenant {name!r} is not an org or org/project (no spaces, commas or '=', "
            "at most one '/')"
        )
    return name


def parse_overrides(text: str, label: str, default: IdleLimit) -> tuple[tuple[str, IdleLimit], ...]:
    """``TENANT=PERCENT%[/DURATION]`` entries separated by commas."""
    out: dict[str, IdleLimit] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        tenant, eq, limit = entry.partition("=")
        if not eq:
            raise InputError(
                f"{label} entry {entry!r} is not TENANT=PERCENT%/DURATION, e.g. ml/vision=2%/2h"
            )
        tenant = _tenant(tenant.strip(), label)
        if tenant in out:
            raise InputError(f"{label} names tenant {tenant!r} twice: keep one entry")
        percent, slash, duration = limit.partition("/")
        out[tenant] = IdleLimit(
            parse_percent(percent, f"{label} entry {entry!r}: percentage"),
            parse_duration(duration, f"{label} entry {entry!r}: duration")
            if slash
            else default.for_s,
        )
    return tuple(sorted(out.items()))


def parse_xids(text: str, label: str) -> tuple[int, ...] | None:
    """Xid numbers separated by commas; ``*`` (None) for every Xid."""
    if text.strip() == "*":
        return None
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit() or not 0 < int(part) < 1 << 16:
            raise InputError(
                f"{label} entry {part!r} is not an Xid number: give numbers separated by "
                f"commas (e.g. {DEFAULT_XIDS}), or * for every Xid"
            )
        out.append(int(part))
    if not out:
        raise InputError(f"{label} {text!r} names no Xid: give some, or * for every Xid")
    return tuple(sorted(set(out)))


def parse_rules(text: str, label: str) -> tuple[str, ...]:
    names = [r.strip() for r in text.split(",") if r.strip()]
    for name in names:
        if name not in RULES:
            raise InputError(f"{label} entry {name!r} is not a rule: use some of {','.join(RULES)}")
    return tuple(r for r in RULES if r in names)


def _at_least(values: Mapping[str, Any], key: str, low: float) -> Any:
    value = values[key]
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= low):
        raise InputError(f"alerts.{key} {value!r} must be a number, at least {low:g}")
    return value


def build_rules(values: Mapping[str, Any]) -> AlertRules:
    """The rules from the ``[alerts]`` settings' values (a mapping of key to value); an
    InputError names the key, the value and what to write instead."""
    idle = IdleLimit(
        parse_percent(str(values["idle_util_percent"]), "alerts.idle_util_percent"),
        int(_at_least(values, "idle_for_s", 60)),
    )
    url = values["dashboard_url"]
    if url and (urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc):
        raise InputError(
            f"alerts.dashboard_url {url!r} is not an http(s) URL: give the dashboard's address "
            "(e.g. https://gpuledger.example.com), or leave it empty for links as paths"
        )
    return AlertRules(
        rules=parse_rules(values["rules"], "alerts.rules"),
        idle=idle,
        idle_overrides=parse_overrides(values["idle_overrides"], "alerts.idle_overrides", idle),
        idle_exempt=parse_tenants(values["idle_exempt"], "alerts.idle_exempt"),
        waiting_for_s=int(_at_least(values, "waiting_for_s", 0)),
        unhealthy_xids=parse_xids(values["unhealthy_xids"], "alerts.unhealthy_xids"),
        unhealthy_xid_window_s=int(_at_least(values, "unhealthy_xid_window_s", 60)),
        borrowed_min_gpus=float(_at_least(values, "borrowed_min_gpus", 0.01)),
        cooldown_s=int(_at_least(values, "cooldown_s", 0)),
        dashboard_url=url,
    )
