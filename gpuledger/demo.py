"""The demo: a simulated cluster written into the warehouse, backfilled, then kept live."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from collector.sim.simulator import Simulator, SimulatorConfig
from gpuledger.commands import periodic_scheduler
from gpuledger.settings import AlertSettings, Settings
from warehouse import queries
from warehouse.client import Warehouse, WarehouseError
from warehouse.ingest.writer import Ingestor, IngestResult

log = logging.getLogger(__name__)

#: How often the demo evaluates the alert rules, seconds, at most (a shorter
#: ``alerts.interval_s`` is kept; 0 keeps alerting off): its simulated cluster moves every few
#: seconds, and whoever tries it should see alerts within a minute of the dashboard opening.
ALERTS_INTERVAL_S = 30


def _align(ts: dt.datetime, step_s: int) -> dt.datetime:
    epoch = int(ts.timestamp())
    return dt.datetime.fromtimestamp(epoch - epoch % step_s, dt.UTC)


@dataclasses.dataclass
class DemoRun:
    """A simulated cluster written into the warehouse: backfilled, then kept live.

    The run's parameters are recorded in the audit log (action ``demo.start``). When the demo
    is started again on the same data directory it replays the deterministic simulation up to
    the newest stored sample without writing, and continues from there: no gap, no duplicate.
    """

    wh: Warehouse
    ingestor: Ingestor
    sim: Simulator
    cluster: str
    began: dt.datetime  # the simulation's first instant
    position: dt.datetime  # simulated time written so far (exclusive)
    result: IngestResult = dataclasses.field(default_factory=IngestResult)
    resumed_from: dt.datetime | None = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @classmethod
    def start(
        cls,
        wh: Warehouse,
        settings: Settings,
        now: dt.datetime | None = None,
        progress: Callable[[str], None] = lambda _m: None,
    ) -> DemoRun:
        s = settings.simulator
        now = now or dt.datetime.now(dt.UTC)
        config = dataclasses.replace(
            SimulatorConfig.default(gpus=s.gpus, seed=s.seed),
            cluster=s.cluster,
            interval_s=s.interval_s,
            currency=settings.ledger.currency,
        )
        previous = _previous_demo(wh, s.cluster)
        params = {"cluster": s.cluster, "gpus": s.gpus, "seed": s.seed, "interval_s": s.interval_s}
        ingestor = Ingestor(wh, settings.warehouse.raw_retention_days)
        sim = Simulator(config)
        last = queries.last_sample(wh, s.cluster)
        if previous is not None and last is not None:
            if {k: previous.get(k) for k in params} != params:
                raise WarehouseError(
                    f"this data directory already holds demo cluster {s.cluster!r} simulated "
                    f"with {json.dumps({k: previous.get(k) for k in params})}; start the demo "
                    "with the same --gpus/--seed, or use another --data-dir"
                )
            start = dt.datetime.fromisoformat(str(previous["start"]))
            resume = _align(last, s.interval_s) + dt.timedelta(seconds=s.interval_s)
            progress(
                f"resuming demo cluster {s.cluster!r}: replaying {start:%Y-%m-%d %H:%M} to "
                f"{resume:%Y-%m-%d %H:%M} UTC without writing"
            )
            for _ in sim.run(start, resume):
                pass
            run = cls(
                wh, ingestor, sim, s.cluster, began=start, position=resume, resumed_from=resume
            )
        else:
            start = _align(now - dt.timedelta(days=s.days), 3600)
            _record_demo(wh, {**params, "start": start.isoformat()})
            cfg = sim.config_records()
            ingestor.write_config(cfg.tenants, cfg.tenant_rules, cfg.quotas, cfg.prices)
            run = cls(wh, ingestor, sim, s.cluster, began=start, position=start)
            progress(
                f"backfilling {s.days:g} days of {s.gpus} simulated GPUs "
                f"(cluster {s.cluster!r}, seed {s.seed}) from {start:%Y-%m-%d %H:%M} UTC"
            )
        run.advance(now, progress)
        return run

    def advance(
        self, until: dt.datetime, progress: Callable[[str], None] = lambda _m: None
    ) -> IngestResult:
        """Simulate and write everything from where the simulator is up to ``until``."""
        result = IngestResult()
        with self._lock:
            until = _align(until, self.sim.config.interval_s)
            if until <= self.position:
                return result
            shown = time.monotonic()
            for batch in self.sim.run(self.position, until):
                result += self.ingestor.write(batch)
                if time.monotonic() - shown > 2:
                    shown = time.monotonic()
                    progress(
                        f"  simulated to {self.sim.now:%Y-%m-%d %H:%M} UTC, "
                        f"{sum(result.written.values()):,} rows written"
                    )
            self.position = until
            self.result += result
        return result


def _previous_demo(wh: Warehouse, cluster: str) -> dict[str, object] | None:
    rows = wh.rows(
        "SELECT detail FROM {db:Identifier}.audit_log WHERE action = 'demo.start' "
        "AND object = {cluster:String} ORDER BY ts DESC LIMIT 1",
        {"db": wh.database, "cluster": cluster},
    )
    return json.loads(rows[0][0]) if rows else None


def _record_demo(wh: Warehouse, params: dict[str, object]) -> None:
    wh.audit("gpuledger demo", "demo.start", str(params["cluster"]), json.dumps(params))


def start_live(run: DemoRun, interval_s: int) -> BackgroundScheduler:
    """Keep the simulated cluster live: every ``interval_s`` simulate up to the wall clock."""
    scheduler = periodic_scheduler()

    def tick() -> None:
        try:
            run.advance(dt.datetime.now(dt.UTC))
        except WarehouseError as exc:  # keep the process alive; the next tick retries
            log.error("live simulation step failed: %s", exc)

    scheduler.add_job(
        tick, "interval", seconds=interval_s, max_instances=1, coalesce=True, id="simulator"
    )
    scheduler.start()
    return scheduler


def demo_settings(settings: Settings, dashboard_url: str) -> Settings:
    """The settings the demo's jobs run with: the alert rules every :data:`ALERTS_INTERVAL_S`
    (see there) and, unless the settings name another address, links in notices to the demo's
    own dashboard at ``dashboard_url``. The notifiers are the settings' own: by default the
    log alone, which needs no network."""
    a = settings.alerts
    alerts = dataclasses.replace(
        a,
        interval_s=min(a.interval_s, ALERTS_INTERVAL_S),
        dashboard_url=a.dashboard_url or dashboard_url,
    )
    return dataclasses.replace(settings, alerts=alerts)


def report_month(start: dt.datetime, now: dt.datetime) -> str:
    """The month whose chargeback the demo writes when it starts (YYYY-MM): the last month that
    has ended, as the monthly job writes it, when the simulation reaches back into it; else (the
    simulation began this month) this month so far, so that there is a chargeback to open."""
    this_month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if start < this_month:
        return (this_month - dt.timedelta(days=1)).strftime("%Y-%m")
    return this_month.strftime("%Y-%m")


def alerts_text(alerts: AlertSettings, notifiers: list[str]) -> str:
    """The demo's line about alerting, for its start-up output."""
    if not alerts.interval_s:
        return "alerts: off (alerts.interval_s is 0)"
    told = ", ".join("the log (stderr)" if n == "log" else n for n in notifiers) or "no notifier"
    return (
        f"alerts: on, the rules {alerts.rules.replace(',', ', ')} every {alerts.interval_s} s, "
        f"told to {told}; open alerts on the dashboard's /alerts page and in "
        "`gpuledger alerts list`"
    )
