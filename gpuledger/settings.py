"""Settings: built once, at the edge, from a TOML file plus ``GPULEDGER_*`` variables.

Precedence, lowest first: defaults, the TOML file (``--config``), environment variables,
command-line flags. Environment variables name a section and a key separated by a double
underscore: ``GPULEDGER_WAREHOUSE__DSN``, ``GPULEDGER_LEDGER__IDLE_THRESHOLD_RATIO``. Unknown
sections, keys and variables are rejected with the name and the list of valid ones, so a typo
never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuledger_errors import ConfigError, InputError

if TYPE_CHECKING:
    from gpuledger.oidc import OidcConfig

ENV_PREFIX = "GPULEDGER_"
#: The longest a warehouse keeps anything: the ingest checks and the tables' TTLs count back
#: this far from now, which must stay a date.
MAX_RETENTION_DAYS = 36_500
#: The largest cluster the demo simulates, about the size of the largest real ones: a number
#: past it is a typo, and its arrays would not fit in memory.
MAX_SIMULATED_GPUS = 100_000


class SettingsError(ConfigError):
    """A setting is unknown or has a bad value; the message names it and says what to do."""


_WEB = ("http", "https")


def _scheme(url: str, label: str) -> str:
    """The scheme of ``url``; a URL that cannot be split (``http://[::1``) is refused."""
    try:
        return urlsplit(url).scheme
    except ValueError as exc:
        raise SettingsError(f"{label} {url!r} is not a URL ({exc}): check its spelling") from None


#: The longest file name and path most file systems take (NAME_MAX, PATH_MAX less room for
#: the files gpuledger keeps under a folder).
_NAME_MAX, _PATH_MAX = 255, 3800


def _usable_path(path: str, label: str) -> None:
    """Refuse a path no file system takes (a name too long, a NUL), which would otherwise
    surface as an OSError from whichever file is opened under it first."""
    if "\0" in path:
        raise SettingsError(f"{label} {path!r} holds a NUL character: give a path without it")
    encoded = os.fsencode(os.path.expanduser(path))
    for name in encoded.split(b"/"):
        if len(name) > _NAME_MAX:
            shown = os.fsdecode(name[:24])
            raise SettingsError(
                f"{label} has a name of {len(name)} bytes ({shown}…): file systems take names "
                f"of at most {_NAME_MAX}; give a shorter path"
            )
    if len(encoded) > _PATH_MAX:
        raise SettingsError(
            f"{label} is {len(encoded)} bytes long: give a path of at most {_PATH_MAX}"
        )


@dataclasses.dataclass(frozen=True)
class WarehouseSettings:
    #: ``chdb:///abs/path`` (embedded, the default, derived from ``data_dir``) or
    #: ``http(s)://user:pass@host:8123/db`` for a ClickHouse server.
    dsn: str = ""
    #: Where the embedded engine keeps its data when ``dsn`` is empty.
    data_dir: str = "./gpuledger-data"
    database: str = "gpuledger"
    #: A ClickHouse cluster name: migrations render ``ON CLUSTER`` with Replicated tables
    #: behind Distributed ones. Empty for a single server or the embedded engine.
    cluster: str = ""
    raw_retention_days: int = 35
    rollup_1m_retention_days: int = 180
    rollup_1h_retention_days: int = 1095
    #: Engine memory cap in bytes for the embedded engine (0: the engine's default).
    max_memory_bytes: int = 0
    connect_timeout_s: float = 10.0

    def validate(self) -> None:
        if self.dsn:
            scheme = _scheme(self.dsn, "warehouse.dsn")
            if scheme not in ("chdb", "http", "https"):
                raise SettingsError(
                    f"warehouse.dsn {self.dsn!r} is not a ClickHouse DSN: use "
                    "chdb:///absolute/path for the embedded engine or "
                    "http(s)://user:pass@host:8123/database for a server"
                )
        _usable_path(self.data_dir, "warehouse.data_dir")
        if not self.database.isidentifier():
            raise SettingsError(
                f"warehouse.database {self.database!r} is not a plain identifier: "
                "use letters, digits and underscores"
            )
        if self.cluster and not self.cluster.isidentifier():
            raise SettingsError(
                f"warehouse.cluster {self.cluster!r} is not a plain identifier: use the name "
                "of the cluster in the servers' remote_servers, letters, digits and underscores"
            )
        for name in ("raw_retention_days", "rollup_1m_retention_days", "rollup_1h_retention_days"):
            if getattr(self, name) < 1:
                raise SettingsError(f"warehouse.{name} must be at least 1 day")
            if getattr(self, name) > MAX_RETENTION_DAYS:
                raise SettingsError(
                    f"warehouse.{name} {getattr(self, name)} is more than {MAX_RETENTION_DAYS} "
                    "days (100 years): give a number of days up to that"
                )
        if self.raw_retention_days > self.rollup_1m_retention_days:
            raise SettingsError(
                "warehouse.raw_retention_days must not exceed rollup_1m_retention_days: "
                "rollups are kept at least as long as the raw samples they summarise"
            )

    @property
    def resolved_dsn(self) -> str:
        """The DSN actually used: ``dsn``, or the embedded engine in ``data_dir``."""
        if self.dsn:
            return self.dsn
        return "chdb://" + str(Path(self.data_dir).expanduser().resolve())

    @property
    def embedded(self) -> bool:
        return urlsplit(self.resolved_dsn).scheme == "chdb"


@dataclasses.dataclass(frozen=True)
class LedgerSettings:
    idle_threshold_ratio: float = 0.05
    idle_min_duration_s: int = 1800
    #: weighted | even | none
    idle_policy: str = "weighted"
    currency: str = "USD"
    #: how often `serve` seals the finished days and past hours (`gpuledger seal`); 0: never
    seal_interval_s: int = 3600

    def validate(self) -> None:
        if not 0 <= self.idle_threshold_ratio <= 1:
            raise SettingsError(
                f"ledger.idle_threshold_ratio {self.idle_threshold_ratio} must be within 0-1 "
                "(a ratio, not a percent: 0.05 means 5%)"
            )
        if self.idle_min_duration_s < 0:
            raise SettingsError("ledger.idle_min_duration_s must not be negative")
        if self.seal_interval_s < 0:
            raise SettingsError(
                f"ledger.seal_interval_s {self.seal_interval_s} must not be negative "
                "(0 turns sealing in `serve` off)"
            )
        if self.idle_policy not in ("weighted", "even", "none"):
            raise SettingsError(
                f"ledger.idle_policy {self.idle_policy!r} is not one of weighted, even, none"
            )


@dataclasses.dataclass(frozen=True)
class SimulatorSettings:
    gpus: int = 64
    days: float = 7.0
    seed: int = 0
    interval_s: int = 10
    cluster: str = "demo"

    def validate(self) -> None:
        if self.gpus < 1 or self.gpus % 8:  # SimulatorConfig.default's nodes have 8 GPUs each
            raise SettingsError(
                f"simulator.gpus {self.gpus} must be a positive multiple of 8 (the simulated "
                "nodes have 8 GPUs each)"
            )
        if self.gpus > MAX_SIMULATED_GPUS:
            raise SettingsError(
                f"simulator.gpus {self.gpus} is more than the simulator runs "
                f"({MAX_SIMULATED_GPUS}): give fewer GPUs"
            )
        if not math.isfinite(self.days) or self.days < 0:
            raise SettingsError(
                f"simulator.days {self.days} must be a number of days, 0 or more (e.g. 7)"
            )
        if not 0 <= self.seed < 2**32:
            raise SettingsError(f"simulator.seed {self.seed} must be within 0-4294967295")
        if self.interval_s < 1:
            raise SettingsError(f"simulator.interval_s {self.interval_s} must be at least 1")


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8050
    #: Sources `gpuledger serve` runs in-process (embedded mode: one process owns the data
    #: directory): comma-separated from nvml, dcgm, kubernetes, slurm. Their settings are the
    #: [agent] ones.
    collectors: str = ""
    #: The write-ahead spool of agents' batches: each is fsync'd here before it is
    #: acknowledged, then written many at a time. Empty: ``<warehouse.data_dir>/ingest-spool``.
    spool_dir: str = ""
    #: When the spool holds this much (the warehouse is down or behind), agents are told 503
    #: with Retry-After and keep their batches in their own spools.
    spool_max_bytes: int = 1 << 30
    #: A group of batches is written (one insert per table) once it holds this many rows ...
    coalesce_max_rows: int = 50_000
    #: ... or once its oldest batch has waited this long. 1 row gives one insert per batch.
    coalesce_max_ms: int = 1000
    #: How long the ids of written batches are remembered, so that an agent re-sending a batch
    #: whose reply was lost is answered "duplicate" instead of writing it twice.
    dedup_window_s: int = 86_400
    #: Requests served at once (threads of one process: the embedded engine forbids forking).
    threads: int = 8
    #: A read command sent to the `serve` (or `demo`) process that owns the data directory
    #: (gpuledger.forward) gives up, saying so, when no answer has come in this long.
    forward_timeout_s: float = 600.0
    #: The ingest tokens' hashes (`gpuledger token`); empty: ``ingest-tokens.json`` in the data
    #: directory.
    tokens_file: str = ""
    #: The people who may log in, with argon2 hashes (`gpuledger user`); empty: ``users.json``
    #: in the data directory.
    users_file: str = ""
    #: HTTPS: a PEM certificate (chain) and its key; both empty: plain HTTP.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    #: Single sign-on: the OpenID Connect issuer URL (empty: off), this client's id and secret
    #: (better: GPULEDGER_SERVER__OIDC_CLIENT_SECRET), the ID token claims that name the person
    #: and list their groups, and the groups' roles, e.g.
    #: "gpu-admins=admin;finance=manager;ml-vision=tenant:ml/vision".
    oidc_issuer: str = ""
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    oidc_name_claim: str = "preferred_username"
    oidc_groups_claim: str = "groups"
    oidc_roles: str = ""
    #: The longest batch the ingest route reads (413 beyond it, before reading when the
    #: Content-Length says so); its samples may take four times this once decompressed.
    max_body_bytes: int = 64 << 20
    #: Ingest bodies read and decoded at once (each up to max_body_bytes, and more decoded);
    #: one more is answered 503 with Retry-After, and its agent sends it again later.
    max_concurrent_bodies: int = 4
    #: The dashboard pages' answers are kept this long (seconds: a page's figures are at most
    #: this old), and those asked for lately are computed again in the background before they
    #: age out; 0: every page load computes afresh. The JSON API always computes afresh.
    dashboard_cache_s: float = 300.0
    #: Today's hours after its sealed ones are computed this often (seconds) for every page at
    #: once, and the pages' ledger figures are as of that instant; 0: each answer computes them.
    live_tail_s: float = 60.0

    def validate(self) -> None:
        if not 0 < self.port < 65536:
            raise SettingsError(f"server.port {self.port} is not a TCP port (1-65535)")
        if not 1 <= self.threads <= 256:
            raise SettingsError(f"server.threads {self.threads} must be 1 to 256")
        if not 0 <= self.dashboard_cache_s <= 3600:
            raise SettingsError(
                f"server.dashboard_cache_s {self.dashboard_cache_s} must be 0 (off) to 3600"
            )
        if not (self.live_tail_s == 0 or 5 <= self.live_tail_s <= 3600):
            raise SettingsError(
                f"server.live_tail_s {self.live_tail_s} must be 0 (off) or 5 to 3600"
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SettingsError(
                "server.tls_cert_file and server.tls_key_file go together: give both for "
                "HTTPS, or neither"
            )
        for name in ("tls_cert_file", "tls_key_file"):
            path = getattr(self, name)
            if path and not Path(path).expanduser().is_file():
                raise SettingsError(f"server.{name} {path!r} is not a file")
        if self.oidc_issuer:
            if urlsplit(self.oidc_issuer).scheme not in ("http", "https"):
                raise SettingsError(f"server.oidc_issuer {self.oidc_issuer!r} is not a URL")
            if not self.oidc_client_id or not self.oidc_roles:
                raise SettingsError(
                    "server.oidc_issuer needs server.oidc_client_id and server.oidc_roles "
                    "(which groups get which role)"
                )
            self.oidc()  # the roles must parse
        if self.spool_max_bytes < 1 << 20:
            raise SettingsError("server.spool_max_bytes must be at least 1 MiB (1048576)")
        if self.coalesce_max_rows < 1:
            raise SettingsError(
                f"server.coalesce_max_rows {self.coalesce_max_rows} must be at least 1 "
                "(1 writes each agent batch with its own inserts)"
            )
        if not 0 <= self.coalesce_max_ms <= 60_000:
            raise SettingsError(
                f"server.coalesce_max_ms {self.coalesce_max_ms} must be within 0-60000 "
                "(milliseconds a batch may wait for others before it is written)"
            )
        if not 1 << 20 <= self.max_body_bytes <= self.spool_max_bytes:
            raise SettingsError(
                f"server.max_body_bytes {self.max_body_bytes} must be at least 1 MiB (1048576) "
                f"and at most server.spool_max_bytes ({self.spool_max_bytes}): a batch larger "
                "than the spool could never be kept"
            )
        if not 1 <= self.max_concurrent_bodies <= 256:
            raise SettingsError(
                f"server.max_concurrent_bodies {self.max_concurrent_bodies} must be 1 to 256 "
                "(ingest bodies read at once; each may take server.max_body_bytes of memory)"
            )
        if self.dedup_window_s < 60:
            raise SettingsError(
                f"server.dedup_window_s {self.dedup_window_s} must be at least 60: agents "
                "re-send a batch whose reply was lost on their next step, or after an outage"
            )
        if self.forward_timeout_s <= 0:
            raise SettingsError(
                f"server.forward_timeout_s {self.forward_timeout_s} must be positive (seconds a "
                "read command waits for the serving process's answer)"
            )
        unknown = set(self.sources) - {"nvml", "dcgm", "kubernetes", "slurm"}
        if unknown:
            raise SettingsError(
                f"server.collectors names unknown sources {sorted(unknown)}: "
                "use nvml, dcgm, kubernetes, slurm"
            )

    def oidc(self) -> OidcConfig | None:
        """The single sign-on settings, or None when it is off."""
        if not self.oidc_issuer:
            return None
        from gpuledger.oidc import OidcConfig, OidcSettingsError, parse_roles

        try:
            roles = parse_roles(self.oidc_roles)
        except OidcSettingsError as exc:
            raise SettingsError(str(exc)) from None
        return OidcConfig(
            self.oidc_issuer,
            self.oidc_client_id,
            self.oidc_client_secret,
            roles,
            self.oidc_groups_claim,
            self.oidc_name_claim,
        )

    @property
    def sources(self) -> list[str]:
        return [c.strip() for c in self.collectors.split(",") if c.strip()]


@dataclasses.dataclass(frozen=True)
class AgentSettings:
    #: A `gpuledger serve` URL to send batches to; empty: write to the warehouse directly.
    server_url: str = ""
    #: The ingest token `gpuledger token create` made for this cluster (or node); prefer
    #: GPULEDGER_AGENT__TOKEN or token_file to writing it in a settings file.
    token: str = ""
    #: A file holding the token (e.g. a Kubernetes secret mounted read-only).
    token_file: str = ""
    #: The CA that signed an https server_url's certificate, when it is not a public one.
    tls_ca_file: str = ""
    cluster: str = "default"
    pool: str = ""
    #: This node's name; empty: the host name.
    node: str = ""
    interval_s: float = 10.0
    #: Comma-separated dcgm-exporter /metrics URLs to scrape besides (or instead of) NVML.
    dcgm_targets: str = ""
    nvml: bool = True
    nvml_library: str = ""
    proc_root: str = "/proc"
    #: The directory Slurm prolog scripts write GPU → job mapping files into (dcgm-exporter's
    #: HPC job mapping); when set, samples without a job label get the job from it.
    slurm_job_map_dir: str = ""
    #: The kubelet's pod-resources socket (/var/lib/kubelet/pod-resources/kubelet.sock); when
    #: set, samples without a pod get the pod, namespace and container the kubelet assigned
    #: their GPU or MIG instance to. Empty: off.
    pod_resources_socket: str = ""
    #: Ask the kubelet again at most this often, seconds.
    pod_resources_refresh_s: float = 10.0
    #: Where batches wait while the sink is down; empty: ``agent-spool`` in the data directory.
    spool_dir: str = ""
    spool_max_bytes: int = 1 << 30
    #: While the server is down, the wait between tries doubles from 1 s up to this (a 503's
    #: Retry-After is honoured as it is), stretched by up to half at random.
    max_backoff_s: float = 30.0
    status_host: str = "127.0.0.1"
    status_port: int = 9108

    def validate(self) -> None:
        if self.interval_s <= 0:
            raise SettingsError(f"agent.interval_s {self.interval_s} must be positive")
        if self.max_backoff_s < 1:
            raise SettingsError(f"agent.max_backoff_s {self.max_backoff_s} must be at least 1")
        if self.spool_max_bytes < 1 << 20:
            raise SettingsError("agent.spool_max_bytes must be at least 1 MiB (1048576)")
        if self.server_url and _scheme(self.server_url, "agent.server_url") not in _WEB:
            raise SettingsError(
                f"agent.server_url {self.server_url!r} must be an http(s) URL "
                "of a `gpuledger serve` process"
            )
        for target in self.targets:
            if _scheme(target, "agent.dcgm_targets entry") not in _WEB:
                raise SettingsError(f"agent.dcgm_targets entry {target!r} is not an http(s) URL")
        if not 0 <= self.status_port < 65536:
            raise SettingsError(f"agent.status_port {self.status_port} is not a TCP port")
        self._validate_pod_resources()

    def _validate_pod_resources(self) -> None:
        path = self.pod_resources_socket
        if path and not os.path.isabs(path):
            raise SettingsError(
                f"agent.pod_resources_socket {path!r} must be the absolute path of the "
                "kubelet's pod-resources socket (no unix:// prefix), e.g. "
                "/var/lib/kubelet/pod-resources/kubelet.sock; empty turns pod labels off"
            )
        if len(path.encode()) > 107:
            raise SettingsError(
                f"agent.pod_resources_socket {path!r} is longer than a unix socket path may "
                "be (107 bytes): mount the socket's directory at a shorter path"
            )
        if self.pod_resources_refresh_s <= 0:
            raise SettingsError(
                f"agent.pod_resources_refresh_s {self.pod_resources_refresh_s} must be positive"
            )

    @property
    def targets(self) -> list[str]:
        return [t.strip() for t in self.dcgm_targets.split(",") if t.strip()]


@dataclasses.dataclass(frozen=True)
class KubernetesSettings:
    """`gpuledger collect kubernetes` and the Kubernetes collector `serve` hosts."""

    #: Where the collector keeps what it has reported (one file per cluster), so that a restart
    #: resumes its watches and re-emits nothing; created if missing. Empty: ``k8s-state`` in
    #: the data directory (never the working directory).
    state_dir: str = ""
    #: False: keep no state (a restart relists and reports every pod's lifecycle again).
    keep_state: bool = True
    #: Save the state at most this often, seconds: a crash re-emits at most that much.
    state_save_interval_s: float = 1.0

    def validate(self) -> None:
        if self.state_dir and Path(self.state_dir).expanduser().is_file():
            raise SettingsError(
                f"kubernetes.state_dir {self.state_dir!r} is a file: give a directory (it is "
                "created if missing), or set kubernetes.keep_state = false to keep no state"
            )
        if self.state_save_interval_s <= 0:
            raise SettingsError(
                f"kubernetes.state_save_interval_s {self.state_save_interval_s} must be positive"
            )


@dataclasses.dataclass(frozen=True)
class ReportSettings:
    """The monthly chargeback (`gpuledger report`, and the job `serve` runs)."""

    #: where reports are written (default: ``reports`` in the data directory)
    out_dir: str = ""
    formats: str = "csv,xlsx,html,pdf,focus"
    #: when `serve` writes the previous month's reports: a crontab line, in UTC; "" turns it off
    schedule: str = "0 6 1 * *"
    #: the FOCUS export's provider, publisher and invoice issuer
    provider: str = "gpuledger"
    #: the FOCUS export's billing account (default: the cluster, or "gpuledger")
    billing_account: str = ""

    def validate(self) -> None:
        from reports.formats import formats

        try:
            formats(self.formats)
        except InputError as exc:
            raise SettingsError(f"reports.formats: {exc}") from None
        if self.schedule:
            from apscheduler.triggers.cron import CronTrigger

            try:
                CronTrigger.from_crontab(self.schedule, timezone="UTC")
            except ValueError as exc:
                raise SettingsError(
                    f"reports.schedule {self.schedule!r} is not a crontab line ({exc}): e.g. "
                    '"0 6 1 * *" (06:00 UTC on the first of each month), or "" for never'
                ) from None
        if not self.provider.strip():
            raise SettingsError("reports.provider must name who issues the charges")


@dataclasses.dataclass(frozen=True)
class AdmissionSettings:
    """The Kubernetes admission webhook (``POST /admission`` on `serve`)."""

    enabled: bool = True
    #: the GPU cluster (as the collectors name it) whose idle GPUs count; "": every cluster
    cluster: str = ""
    #: allow | warn | deny | deprioritise: what a GPU job of a tenant holding idle GPUs gets
    policy: str = "warn"
    #: per tenant (an org covers its projects): "research=deny, product/chat=deprioritise"
    tenant_policies: str = ""
    #: tenants never checked: "platform, research/vision"
    exempt: str = ""
    #: the Kueue priority class a deprioritised Job or Workload gets (when the priority
    #: feedback names none for its tenant)
    low_priority_class: str = "low"
    #: the resources that count as GPUs; a trailing * matches a prefix (MIG profiles)
    gpu_resources: str = "nvidia.com/gpu,nvidia.com/mig-*"
    #: how often the in-memory view of idle GPUs is rebuilt, and how old it may grow before
    #: the webhook stops trusting it (it then allows everything, with a warning)
    refresh_s: float = 15.0
    max_age_s: float = 120.0
    max_body_bytes: int = 3 << 20

    def validate(self) -> None:
        self.rules()
        if self.refresh_s <= 0 or self.max_age_s <= self.refresh_s:
            raise SettingsError(
                f"admission.max_age_s {self.max_age_s:g} must be more than admission.refresh_s "
                f"{self.refresh_s:g} (> 0), or every snapshot is stale before the next"
            )
        if self.max_body_bytes < 1024:
            raise SettingsError(f"admission.max_body_bytes {self.max_body_bytes} is too small")

    def rules(self) -> Any:
        """The policies as :class:`scheduler_hooks.admission.AdmissionRules`."""
        from scheduler_hooks.admission import POLICIES, AdmissionRules

        def policy(value: str, key: str) -> str:
            if value not in POLICIES:
                raise SettingsError(
                    f"admission.{key}: {value!r} is not a policy: use one of {', '.join(POLICIES)}"
                )
            return value

        tenants = {}
        for item in filter(None, (x.strip() for x in self.tenant_policies.split(","))):
            tenant, sep, value = item.partition("=")
            if not sep or not tenant.strip():
                raise SettingsError(
                    f"admission.tenant_policies: {item!r} is not TENANT=POLICY "
                    '(e.g. "research=deny, product/chat=deprioritise")'
                )
            tenants[tenant.strip()] = policy(value.strip(), "tenant_policies")
        names = tuple(x.strip() for x in self.gpu_resources.split(",") if x.strip())
        if not names:
            raise SettingsError("admission.gpu_resources names no resource: e.g. nvidia.com/gpu")
        return AdmissionRules(
            default=policy(self.policy, "policy"),
            tenants=tenants,
            exempt=frozenset(x.strip() for x in self.exempt.split(",") if x.strip()),
            low_priority_class=self.low_priority_class,
            gpu_resources=names,
            max_age_s=self.max_age_s,
        )


@dataclasses.dataclass(frozen=True)
class SqlSettings:
    """`gpuledger sql`, the SQL console."""

    #: The gpuledger user (role admin) that `sql --write` runs as, asked for its password;
    #: `--user` overrides it (GPULEDGER_SQL__USER in the environment).
    user: str = ""

    def validate(self) -> None:
        """Nothing to check: an unknown user is refused when `sql --write` asks for it."""


@dataclasses.dataclass(frozen=True)
class AlertSettings:
    """Idle-GPU alerts (`gpuledger alerts`, and the job `serve` runs). Lists are strings; their
    syntax is in :mod:`reports.alerts.rules`."""

    #: how often `serve` evaluates the rules, seconds; 0 turns alerting in `serve` off
    interval_s: int = 60
    #: an alert that stays open is told again at most this often, seconds (0: told once)
    cooldown_s: int = 14_400
    #: the rules evaluated: some of idle,waiting,unhealthy,borrowed
    rules: str = "idle,waiting,unhealthy,borrowed"
    #: the dashboard's address, for the links in notices; empty: links are paths
    dashboard_url: str = ""
    #: idle: a GPU held by a job and under this utilisation (percent) for idle_for_s or more
    idle_util_percent: float = 5.0
    idle_for_s: int = 3600
    #: per tenant (org, or org/project: the most specific wins): "ml/vision=2%/2h, research=10%"
    idle_overrides: str = ""
    #: tenants never alerted about idle GPUs: "ops, ml/notebooks"
    idle_exempt: str = ""
    #: waiting: whole GPUs of a model free this long, seconds, while a job for it waited as long
    waiting_for_s: int = 900
    #: unhealthy: the Xids that count ("*": every one), seen within unhealthy_xid_window_s
    unhealthy_xids: str = "48,63,64,74,79,92,94,95,119,120"
    unhealthy_xid_window_s: int = 3600
    #: borrowed: a tenant above its guarantee with at least this many borrowed GPUs idle
    borrowed_min_gpus: float = 1.0
    #: notifiers: the log when on; each other one when its address is set
    log: bool = True
    webhook_url: str = ""
    slack_webhook_url: str = ""
    slack_blocks: bool = True
    smtp_host: str = ""
    smtp_port: int = 587
    smtp_starttls: bool = True
    smtp_user: str = ""
    #: prefer GPULEDGER_ALERTS__SMTP_PASSWORD to writing it in a settings file
    smtp_password: str = ""
    smtp_from: str = ""
    #: recipients, separated by commas
    smtp_to: str = ""
    #: how long one try of one notifier may take, seconds
    timeout_s: float = 10.0
    #: a failed notifier is tried again after retry_initial_s, doubling up to retry_max_s; a
    #: notice still undelivered after retry_for_s is given up (logged)
    retry_initial_s: float = 30.0
    retry_max_s: float = 900.0
    retry_for_s: float = 86_400.0

    def validate(self) -> None:
        from reports.alerts.notify import build_notifiers
        from reports.alerts.rules import build_rules

        if self.interval_s < 0:
            raise SettingsError(
                f"alerts.interval_s {self.interval_s} must not be negative (0 turns alerting "
                "in `serve` off)"
            )
        for key in ("retry_initial_s", "retry_max_s", "retry_for_s"):
            value = getattr(self, key)
            if not math.isfinite(value) or value <= 0:
                raise SettingsError(f"alerts.{key} {value} must be a positive number of seconds")
        if self.retry_max_s < self.retry_initial_s:
            raise SettingsError(
                f"alerts.retry_max_s {self.retry_max_s:g} is less than alerts.retry_initial_s "
                f"{self.retry_initial_s:g}: the back-off grows from the one to the other"
            )
        values = dataclasses.asdict(self)
        try:
            build_rules(values)
            build_notifiers(values)
        except InputError as exc:
            raise SettingsError(str(exc)) from None


@dataclasses.dataclass(frozen=True)
class SchedulerSettings:
    """Quota-reclaim advice, idle limits and priority feedback (`gpuledger advise`); the
    texts are parsed by :mod:`scheduler_hooks.policy`, which says what a bad one should be."""

    #: the trailing days a tenant's efficiency (used ÷ allocated GPU-hours) is measured over
    priority_window_days: float = 7.0
    #: efficiency thresholds to priority classes (the lowest must be 0)
    priority_classes: str = "0.6=high,0.3=normal,0=low"
    #: each class's fair-share weight (Kueue fairSharing.weight, Volcano weight, Slurm Fairshare)
    fair_share_weights: str = "high=2,normal=1,low=0.5"
    #: how often `serve` works the advice out and proposes it, seconds; 0: only `gpuledger advise`
    propose_interval_s: int = 900
    #: advice is proposed once its condition has held this long (seconds) ...
    hold_s: int = 1800
    #: ... and replaces the advice in force only when its GPUs differ by more than this
    min_change_gpus: float = 1.0
    #: recovered GPU-hours and cost are counted over this many hours ahead
    horizon_h: float = 24.0
    #: per-tenant GPU-idle limits (org/project, org or *): "ml=5%/2h, *=5%/4h"
    idle_limits: str = ""
    #: per-tenant duration limits of interactive workloads: "ml=8h, *=12h"
    interactive_limits: str = ""
    #: the workload types that count as interactive
    interactive_types: str = "notebook"
    #: the ClusterQueue (Volcano Queue, Slurm account) of a tenant, "ml/nlp=nlp-cq"; unnamed:
    #: the tenant as a DNS label (ml-nlp; for Slurm, the project)
    kueue_queues: str = ""
    volcano_queues: str = ""
    slurm_accounts: str = ""
    #: the ResourceFlavor of "pool/model" or "model"; unnamed: the model as a DNS label
    kueue_flavors: str = ""
    kueue_api_version: str = "v1beta2"
    gpu_resource: str = "nvidia.com/gpu"
    #: Volcano queue weights and Slurm Fairshare are whole numbers: the weight times this
    integer_weight_scale: int = 2
    #: where `advise apply` finds sacctmgr, scontrol and scancel ("": on the PATH)
    slurm_bin_dir: str = ""
    #: the gpuledger user (role admin or manager) that `advise approve|reject|apply` runs as,
    #: asked for its password; `advise --user` overrides it (GPULEDGER_SCHEDULER__USER)
    user: str = ""

    def validate(self) -> None:
        self.policy()
        if self.propose_interval_s < 0:
            raise SettingsError(
                f"scheduler.propose_interval_s {self.propose_interval_s} must not be negative "
                "(0 turns proposing in `serve` off)"
            )
        if self.hold_s < 0 or self.min_change_gpus < 0 or self.horizon_h <= 0:
            raise SettingsError(
                f"scheduler.hold_s {self.hold_s} and min_change_gpus {self.min_change_gpus:g} "
                f"must not be negative, and horizon_h {self.horizon_h:g} must be positive"
            )

    def policy(self) -> Any:
        """The rules as :class:`scheduler_hooks.policy.AdvicePolicy`."""
        from scheduler_hooks import policy as p

        try:
            return p.AdvicePolicy(
                p.PriorityPolicy.parse(
                    self.priority_window_days, self.priority_classes, self.fair_share_weights
                ),
                p.Limits.parse(self.idle_limits, self.interactive_limits, self.interactive_types),
                p.Hysteresis(self.hold_s, self.min_change_gpus, self.horizon_h),
                p.Names.parse(
                    self.kueue_queues,
                    self.kueue_flavors,
                    self.volcano_queues,
                    self.slurm_accounts,
                    self.gpu_resource,
                    self.kueue_api_version,
                    self.integer_weight_scale,
                ),
            )
        except p.PolicyError as exc:
            raise SettingsError(str(exc)) from None


@dataclasses.dataclass(frozen=True)
class Settings:
    warehouse: WarehouseSettings = WarehouseSettings()
    ledger: LedgerSettings = LedgerSettings()
    simulator: SimulatorSettings = SimulatorSettings()
    server: ServerSettings = ServerSettings()
    agent: AgentSettings = AgentSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    reports: ReportSettings = ReportSettings()
    admission: AdmissionSettings = AdmissionSettings()
    sql: SqlSettings = SqlSettings()
    alerts: AlertSettings = AlertSettings()
    scheduler: SchedulerSettings = SchedulerSettings()

    def validate(self) -> None:
        for field in dataclasses.fields(self):
            getattr(self, field.name).validate()
        if self.simulator.days > self.warehouse.raw_retention_days:
            raise SettingsError(
                f"simulator.days {self.simulator.days:g} is more than "
                f"warehouse.raw_retention_days ({self.warehouse.raw_retention_days}): the "
                "older samples would be refused at ingest; simulate fewer days, or raise "
                "warehouse.raw_retention_days"
            )

    @property
    def agent_spool_dir(self) -> str:
        """agent.spool_dir, or ``agent-spool`` in the data directory (never the working one)."""
        return self.agent.spool_dir or str(self._data_dir / "agent-spool")

    @property
    def server_spool_dir(self) -> str:
        """server.spool_dir, or ``ingest-spool`` in the data directory."""
        return self.server.spool_dir or str(self._data_dir / "ingest-spool")

    @property
    def tokens_file(self) -> Path:
        """server.tokens_file, or ``ingest-tokens.json`` in the data directory."""
        given = self.server.tokens_file
        return Path(given).expanduser() if given else self._data_dir / "ingest-tokens.json"

    @property
    def users_file(self) -> Path:
        """server.users_file, or ``users.json`` in the data directory."""
        given = self.server.users_file
        return Path(given).expanduser() if given else self._data_dir / "users.json"

    @property
    def reports_dir(self) -> Path:
        """reports.out_dir, or ``reports`` in the data directory."""
        given = self.reports.out_dir
        return Path(given).expanduser() if given else self._data_dir / "reports"

    @property
    def audit_pending_file(self) -> Path:
        """Audit entries waiting for a process that can write them (gpuledger.audit_pending),
        in the data directory."""
        return self._data_dir / "audit-pending.json"

    @property
    def session_key_file(self) -> Path:
        """The key that signs login cookies, made on first use, in the data directory."""
        return self._data_dir / "session-key"

    @property
    def kubernetes_state_dir(self) -> Path | None:
        """kubernetes.state_dir, or ``k8s-state`` in the data directory; None when
        kubernetes.keep_state is false."""
        k8s = self.kubernetes
        if not k8s.keep_state:
            return None
        return Path(k8s.state_dir).expanduser() if k8s.state_dir else self._data_dir / "k8s-state"

    @property
    def _data_dir(self) -> Path:
        return Path(self.warehouse.data_dir).expanduser()


def _sections() -> dict[str, type]:
    return {f.name: typing.get_type_hints(Settings)[f.name] for f in dataclasses.fields(Settings)}


def _unknown(kind: str, name: str, valid: list[str], where: str) -> SettingsError:
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return SettingsError(
        f"unknown {kind} {name!r} in {where}.{hint} Valid: {', '.join(sorted(valid))}"
    )


def _coerce(section: str, key: str, value: Any, hint: Any, where: str) -> Any:
    """Turn ``value`` (from TOML, or a string from the environment) into the field's type."""
    target = hint
    if isinstance(hint, types.UnionType):
        target = next(a for a in typing.get_args(hint) if a is not type(None))
    label = f"{section}.{key}"
    try:
        if target is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if target is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if target is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if target is str:
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        pass
    else:
        raise SettingsError(f"{label} has an unsupported type")  # pragma: no cover
    raise SettingsError(
        f"{label} = {value!r} (from {where}) is not a valid {target.__name__}: "
        f"give a {target.__name__}, e.g. the default"
    )


def _apply(values: dict[str, dict[str, Any]], data: Mapping[str, Any], where: str) -> None:
    sections = _sections()
    for section, body in data.items():
        if section not in sections:
            raise _unknown("section", section, list(sections), where)
        if not isinstance(body, Mapping):
            raise SettingsError(f"[{section}] in {where} must be a table of keys")
        hints = typing.get_type_hints(sections[section])
        for key, value in body.items():
            if key not in hints:
                raise _unknown(f"key in [{section}]", key, list(hints), where)
            values.setdefault(section, {})[key] = _coerce(section, key, value, hints[key], where)


def _from_env(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    sections = _sections()
    out: dict[str, dict[str, str]] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section, sep, key = rest.partition("__")
        valid = [
            f"{ENV_PREFIX}{s.upper()}__{k.upper()}"
            for s, cls in sections.items()
            for k in typing.get_type_hints(cls)
        ]
        if not sep or section not in sections:
            raise _unknown("environment variable", name, valid, "the environment")
        if key not in typing.get_type_hints(sections[section]):
            raise _unknown("environment variable", name, valid, "the environment")
        out.setdefault(section, {})[key] = value
    return out


def load_settings(
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Settings:
    """Build and validate the settings.

    ``overrides`` (from command-line flags) win over the environment, which wins over the
    file, which wins over the defaults. Raises :class:`SettingsError` naming the bad key.
    """
    values: dict[str, dict[str, Any]] = {}
    if config is not None:
        path = Path(config)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SettingsError(f"config file {str(path)!r} does not exist") from None
        except OSError as exc:  # a directory, no permission, a name too long
            raise SettingsError(
                f"config file {str(path)!r} cannot be read: {exc.strerror}; give a TOML file"
            ) from None
        except UnicodeDecodeError as exc:
            raise SettingsError(
                f"config file {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#x} "
                f"at offset {exc.start}): save it as UTF-8 TOML"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
        _apply(values, data, str(path))
    _apply(values, _from_env(os.environ if env is None else env), "the environment")
    if overrides:
        _apply(values, overrides, "the command line")
    sections = _sections()
    built = Settings(**{name: cls(**values.get(name, {})) for name, cls in sections.items()})
    built.validate()
    return built
