"""The periodic jobs' scheduler runs a job whose time has passed while the process was busy,
once, instead of dropping it (APScheduler's default drops a run more than 1 s late)."""

from __future__ import annotations

import datetime as dt
import threading

from gpuledger.commands import periodic_scheduler


def test_a_late_run_still_runs_once() -> None:
    ran: list[dt.datetime] = []
    done = threading.Event()

    def job() -> None:
        ran.append(dt.datetime.now(dt.UTC))
        done.set()

    scheduler = periodic_scheduler()
    late = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30)  # 30 s late when started
    scheduler.add_job(job, "interval", seconds=3600, next_run_time=late, max_instances=1)
    scheduler.start()
    try:
        assert done.wait(10), "a run 30 s late was dropped"
    finally:
        scheduler.shutdown(wait=True)
    assert len(ran) == 1
