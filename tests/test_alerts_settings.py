"""The [alerts] settings: what they turn into, and each mistake named with its key and value."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from gpuledger.settings import SettingsError, load_settings
from reports.alerts.notify import EmailNotifier, SlackNotifier, build_notifiers
from reports.alerts.rules import IdleLimit, build_rules, parse_duration


def test_a_settings_file_turns_into_rules_and_notifiers(tmp_path: Path) -> None:
    path = tmp_path / "gpuledger.toml"
    path.write_text(
        "[alerts]\n"
        'rules = "idle, unhealthy"\n'
        "idle_util_percent = 3\n"
        "idle_for_s = 7200\n"
        'idle_overrides = "ml=10%/30m, ml/vision=1%, research/nlp=0.5%/1.5h"\n'
        'idle_exempt = "ops, ml/notebooks"\n'
        'unhealthy_xids = "79, 48, 79"\n'
        'dashboard_url = "https://gpuledger.example.com/"\n'
        'slack_webhook_url = "https://hooks.slack.example/T1/B2/secret"\n'
        "slack_blocks = false\n"
        'smtp_host = "mail.example.com"\n'
        'smtp_from = "gpuledger@example.com"\n'
        'smtp_to = "ops@example.com,lead@example.com"\n',
        encoding="utf-8",
    )
    values = dataclasses.asdict(load_settings(path, env={}).alerts)
    rules = build_rules(values)
    assert rules.rules == ("idle", "unhealthy") and rules.unhealthy_xids == (48, 79)
    assert rules.idle == IdleLimit(3.0, 7200)
    # the most specific entry wins; a project without one takes its org's; the rest the default
    assert rules.idle_limit("ml/vision") == IdleLimit(1.0, 7200)
    assert rules.idle_limit("ml/audio") == IdleLimit(10.0, 1800)
    assert rules.idle_limit("research/nlp") == IdleLimit(0.5, 5400)
    assert rules.idle_limit("research/cv") == IdleLimit(3.0, 7200)
    assert rules.idle_limit("ops/batch") is None and rules.idle_limit("ml/notebooks") is None
    assert rules.link("/gpu/G1", cluster="c1", pool="") == (
        "https://gpuledger.example.com/gpu/G1?cluster=c1"
    )
    notifiers = build_notifiers(values)
    assert [n.name for n in notifiers] == ["log", "slack", "email"]
    slack, mail = notifiers[1], notifiers[2]
    assert isinstance(slack, SlackNotifier) and "blocks" not in slack.body({"text": "x"})
    assert isinstance(mail, EmailNotifier)
    assert (mail.host, mail.port, mail.starttls) == ("mail.example.com", 587, True)
    assert mail.to == ("ops@example.com", "lead@example.com")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rules", "idle,squatting", "alerts.rules entry 'squatting' is not a rule"),
        ("idle_util_percent", 150.0, "alerts.idle_util_percent '150.0' is not a percentage"),
        ("idle_for_s", 10, "alerts.idle_for_s 10 must be a number, at least 60"),
        ("idle_overrides", "ml/vision:2%", "alerts.idle_overrides entry 'ml/vision:2%' is not"),
        ("idle_overrides", "ml=2%/2w", "alerts.idle_overrides entry 'ml=2%/2w': duration '2w'"),
        ("idle_overrides", "ml=x%", "alerts.idle_overrides entry 'ml=x%': percentage 'x%'"),
        ("idle_overrides", "ml=1%, ml=2%", "alerts.idle_overrides names tenant 'ml' twice"),
        ("idle_overrides", "a/b/c=1%", "alerts.idle_overrides tenant 'a/b/c' is not an org"),
        ("idle_exempt", "ops, ml vision", "alerts.idle_exempt tenant 'ml vision' is not an org"),
        ("unhealthy_xids", "79,x", "alerts.unhealthy_xids entry 'x' is not an Xid number"),
        ("unhealthy_xids", ",", "alerts.unhealthy_xids ',' names no Xid"),
        ("cooldown_s", -5, "alerts.cooldown_s -5 must be a number, at least 0"),
        ("interval_s", -1, "alerts.interval_s -1 must not be negative"),
        ("borrowed_min_gpus", 0.0, "alerts.borrowed_min_gpus 0.0 must be a number, at least 0.01"),
        ("dashboard_url", "gpuledger.example.com", "alerts.dashboard_url 'gpuledger.example.com'"),
        ("webhook_url", "hooks.example/x", "alerts.webhook_url 'hooks.example/x' is not an http"),
        ("slack_webhook_url", "ftp://x/y", "alerts.slack_webhook_url 'ftp://x/y' is not an http"),
        ("smtp_to", "ops@example.com", "alerts.smtp_to 'ops@example.com' needs alerts.smtp_host"),
        ("timeout_s", 0.0, "alerts.timeout_s 0.0 must be within 0-300 seconds"),
        ("retry_max_s", 5.0, "alerts.retry_max_s 5 is less than alerts.retry_initial_s 30"),
    ],
)
def test_a_bad_setting_is_named_with_its_value(key: str, value: object, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(env={}, overrides={"alerts": {key: value}})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ({"smtp_to": "ops"}, "alerts.smtp_to entry 'ops' is not an e-mail address"),
        ({"smtp_to": "ops@example.com"}, "alerts.smtp_from is empty"),
        ({"smtp_to": ""}, "alerts.smtp_host is set but alerts.smtp_to is empty"),
        ({"smtp_to": "a@b.c", "smtp_from": "g@b.c", "smtp_port": 0}, "alerts.smtp_port 0 is not"),
        (
            {"smtp_to": "a@b.c", "smtp_from": "g@b.c", "smtp_password": "pw"},
            "alerts.smtp_password is set but alerts.smtp_user is empty",
        ),
    ],
)
def test_email_settings_hold_together(more: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        load_settings(env={}, overrides={"alerts": {"smtp_host": "mail.example.com", **more}})


def test_unknown_keys_and_variables_are_refused() -> None:
    with pytest.raises(SettingsError, match=r"unknown key in \[alerts\] 'idle_util'.*idle_util"):
        load_settings(env={}, overrides={"alerts": {"idle_util": 3}})
    # a bad value from the environment is named like one from a file
    named = re.escape("alerts.idle_overrides entry 'ml=oops': percentage")
    with pytest.raises(SettingsError, match=named):
        load_settings(env={"GPULEDGER_ALERTS__IDLE_OVERRIDES": "a=1%/2h, ml=oops"})
    with pytest.raises(SettingsError, match="GPULEDGER_ALERTS__COOLDOWN"):
        load_settings(env={"GPULEDGER_ALERTS__COOLDOWN": "60"})


def test_durations() -> None:
    assert [parse_duration(t, "x") for t in ("90", "90s", "30m", "1.5h", "2d")] == [
        90,
        90,
        1800,
        5400,
        172_800,
    ]
    with pytest.raises(Exception, match="x '-5m' is not a duration"):
        parse_duration("-5m", "x")
