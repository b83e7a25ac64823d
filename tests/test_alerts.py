"""Idle-GPU alerts end to end: a squatting job on a hand-made cluster, written through the real
ingest, evaluated by the real rules over the embedded engine, told to a real HTTP receiver
(webhook and Slack) and a real SMTP server (aiosmtpd), and recorded in the alert history.

The cluster (one sample a minute from T to T + 6 h; H100 at 2.00 per GPU-hour):

  node  GPU    utilisation  job      tenant       held
  n1    GPU-s  1 %          j-squat  ml/vision    T -> T + 4 h 05 (then finished)
  n1    GPU-b  80 %         j-busy   research/nlp T -> open

Idle is under 5 % for at least 1 h; the cooldown is 1 h. So at T + 3 h, j-squat's GPU has been
idle 3 h (since T, its start) and its idle time has cost 3 GPU-h x 2.00 = 6.00; at T + 4 h,
8.00. GPU-b is busy: nothing about it, ever.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from alerts_fixture import Cluster, at
from alerts_receivers import HttpReceiver, SmtpReceiver

from gpuledger.alert_commands import alerting
from gpuledger.settings import Settings, load_settings
from warehouse.alerts import alert_history, open_alert_rows, pending_outbox
from warehouse.client import Warehouse

SECOND = dt.timedelta(seconds=1)
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def receivers() -> Iterator[tuple[HttpReceiver, SmtpReceiver]]:
    http, smtp = HttpReceiver(), SmtpReceiver()
    yield http, smtp
    http.close()
    smtp.stop()


@pytest.fixture
def squat(wh: Warehouse) -> Cluster:
    c = Cluster(wh)
    c.gpus("GPU-s", "GPU-b")
    c.samples("GPU-s", at(0), at(6), 0.01)
    c.samples("GPU-b", at(0), at(6), 0.8)
    c.job("j-squat", "ml/vision", ["GPU-s"], at(0))
    c.job("j-busy", "research/nlp", ["GPU-b"], at(0))
    c.config()
    return c


def _settings(http: HttpReceiver, smtp: SmtpReceiver, **more: Any) -> Settings:
    return load_settings(
        env={},
        overrides={
            "alerts": {
                "idle_util_percent": 5.0,
                "idle_for_s": 3600,
                "cooldown_s": 3600,
                "dashboard_url": "http://dash.example",
                "webhook_url": f"{http.url}/hook",
                "slack_webhook_url": f"{http.url}/slack",
                "smtp_host": "127.0.0.1",
                "smtp_port": smtp.port,
                "smtp_starttls": False,
                "smtp_from": "gpuledger@example.com",
                "smtp_to": "ops@example.com, lead@example.com",
                "timeout_s": 5.0,
                "retry_initial_s": 30.0,
                **more,
            }
        },
    )


def _told(http: HttpReceiver, smtp: SmtpReceiver) -> tuple[int, int, int]:
    return len(http.bodies("/hook")), len(http.bodies("/slack")), len(smtp.messages)


def test_a_squatting_job_fires_once_stays_quiet_and_resolves(
    squat: Cluster,
    receivers: tuple[HttpReceiver, SmtpReceiver],
    caplog: pytest.LogCaptureFixture,
) -> None:
    http, smtp = receivers
    run = alerting(squat.wh, _settings(http, smtp))
    caplog.set_level(logging.INFO, logger="gpuledger.alerts")

    first = run.check(at(3))
    assert [(n.event, n.finding.rule, n.finding.jobs) for n in first.notices] == [
        ("fired", "idle", ("j-squat",))
    ]
    assert _told(http, smtp) == (0, 0, 0)  # the evaluation only queues: delivery is apart
    sent = run.deliver(at(3))
    assert sorted((d.notifier, d.outcome) for d in sent) == [
        ("email", "delivered"),
        ("log", "delivered"),
        ("slack", "delivered"),
        ("webhook", "delivered"),
    ]
    assert _told(http, smtp) == (1, 1, 1)

    (hook,) = http.bodies("/hook")
    link = f"http://dash.example/gpu/GPU-s?cluster=c1&from={at(0).date()}&to={at(3).date()}"
    assert {k: hook[k] for k in ("event", "state", "rule", "severity", "cluster", "node")} == {
        "event": "fired",
        "state": "firing",
        "rule": "idle",
        "severity": "warning",
        "cluster": "c1",
        "node": "n1",
    }
    assert (hook["gpus"], hook["jobs"], hook["tenant"]) == (["GPU-s"], ["j-squat"], "ml/vision")
    assert hook["since"] == at(0).isoformat() and hook["duration_s"] == 3 * 3600
    assert (hook["cost"], hook["currency"], hook["url"]) == ("6.00", "USD", link)
    assert "3.0 h" in hook["text"] and "USD 6.00" in hook["text"]

    (slack,) = http.bodies("/slack")
    assert "j-squat" in slack["text"] and "USD 6.00" in slack["text"]
    assert f"<{link}|open>" in slack["text"]
    assert slack["blocks"][0]["text"]["text"] == slack["text"]

    (mail,) = smtp.messages
    assert mail["Subject"].startswith("[gpuledger FIRING] GPU idle in a job: ")
    assert mail["To"] == "ops@example.com, lead@example.com"
    body = mail.get_content()
    assert "GPU-s" in body and "j-squat" in body and "ml/vision" in body
    assert "cost: USD 6.00" in body and link in body
    assert [r.levelno for r in caplog.records] == [logging.WARNING]

    # the same alert a minute, two and half an hour later: within the cooldown, nothing is said
    for later in (at(3) + MINUTE, at(3) + 2 * MINUTE, at(3, 30)):
        assert run.check(later).notices == ()
        assert run.deliver(later) == []
    assert _told(http, smtp) == (1, 1, 1)

    # an hour after it was told, it is told again, with the figures of now
    again = run.check(at(4))
    assert [n.event for n in again.notices] == ["repeated"]
    run.deliver(at(4))
    assert _told(http, smtp) == (2, 2, 2)
    assert http.bodies("/hook")[1]["cost"] == "8.00"
    assert http.bodies("/hook")[1]["alert_id"] == hook["alert_id"]

    # the job ends: the next evaluation resolves the alert, once
    squat.end("j-squat", "ml/vision", ["GPU-s"], at(0), at(4, 5))
    done = run.check(at(4, 10))
    assert [n.event for n in done.notices] == ["resolved"] and done.open_alerts == 0
    run.deliver(at(4, 10))
    assert run.check(at(4, 11)).notices == ()
    assert _told(http, smtp) == (3, 3, 3)
    resolved = http.bodies("/hook")[2]
    assert (resolved["event"], resolved["state"], resolved["alert_id"]) == (
        "resolved",
        "resolved",
        hook["alert_id"],
    )
    assert resolved["text"].startswith("[RESOLVED] GPU idle in a job: ")
    assert http.bodies("/slack")[2]["text"].startswith(":white_check_mark: [RESOLVED]")
    assert smtp.messages[2]["Subject"].startswith("[gpuledger RESOLVED]")

    # the history holds every notice of the one alert, and nothing is open
    history = alert_history(squat.wh)
    assert [(r.event, r.state) for r in reversed(history)] == [
        ("fired", "firing"),
        ("repeated", "firing"),
        ("resolved", "resolved"),
    ]
    assert {r.alert_id for r in history} == {hook["alert_id"]}
    assert {r.notified for r in history} == {("log", "webhook", "slack", "email")}
    assert history[-1].cost is not None and str(history[-1].cost) == "6.00"
    assert open_alert_rows(squat.wh) == [] and pending_outbox(squat.wh) == []


def test_a_notifier_that_is_down_gets_the_notice_when_it_comes_back(
    squat: Cluster, receivers: tuple[HttpReceiver, SmtpReceiver]
) -> None:
    http, smtp = receivers
    settings = _settings(http, smtp)
    http.down = True  # answers 500
    smtp.stop()  # refuses connections
    run = alerting(squat.wh, settings)

    assert [n.event for n in run.check(at(3)).notices] == ["fired"]
    first = {d.notifier: d for d in run.deliver(at(3))}
    assert {n: d.outcome for n, d in first.items()} == {
        "log": "delivered",
        "webhook": "failed",
        "slack": "failed",
        "email": "failed",
    }
    assert "answered 500" in first["webhook"].error
    assert first["email"].next_try == at(3) + 30 * SECOND
    assert http.refused == 2

    # within the back-off nothing is tried; after it, each is tried again and waits twice as long
    assert run.deliver(at(3) + 10 * SECOND) == []
    second = {d.notifier: d for d in run.deliver(at(3) + 40 * SECOND)}
    assert {(d.outcome, d.attempts) for d in second.values()} == {("failed", 2)}
    assert second["webhook"].next_try == at(3) + 100 * SECOND
    assert http.refused == 4 and smtp.messages == []

    # a restart meanwhile: the open alert and the undelivered notices come back from the tables
    assert len(pending_outbox(squat.wh)) == 3
    restarted = alerting(squat.wh, settings)
    http.down = False
    smtp.start()
    assert restarted.check(at(3) + 2 * MINUTE).notices == ()  # still the same open alert
    came = restarted.deliver(at(3) + 2 * MINUTE)
    assert sorted((d.notifier, d.outcome, d.attempts) for d in came) == [
        ("email", "delivered", 3),
        ("slack", "delivered", 3),
        ("webhook", "delivered", 3),
    ]
    assert _told(http, smtp) == (1, 1, 1)
    assert http.bodies("/hook")[0]["event"] == "fired"
    assert http.bodies("/hook")[0]["jobs"] == ["j-squat"]
    assert restarted.deliver(at(3) + 3 * MINUTE) == []
    assert pending_outbox(squat.wh) == []
    assert _told(http, smtp) == (1, 1, 1)
