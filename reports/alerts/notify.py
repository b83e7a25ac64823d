"""Where alert notices go: a generic webhook (the notice as JSON), a Slack-compatible webhook
(``{"text": ...}`` with optional blocks), e-mail over SMTP, and the log.

A notifier's :meth:`send` takes the notice's payload (:meth:`reports.alerts.book.Notice.payload`,
JSON types, as the outbox keeps it) and either returns, delivered, or raises
:class:`NotifyError` saying why not; the outbox retries later. Sending blocks for at most the
notifier's timeout, and is never done on the evaluation's thread.
"""

from __future__ import annotations

import dataclasses
import logging
import smtplib
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Protocol
from urllib.parse import urlsplit

from gpuledger_errors import GpuledgerError, InputError

log = logging.getLogger(__name__)


class NotifyError(GpuledgerError):
    """A notifier did not take a notice (down, refused, timed out); the outbox tries again."""


class Notifier(Protocol):
    @property
    def name(self) -> str: ...

    def send(self, payload: Mapping[str, Any]) -> None: ...


def _link(payload: Mapping[str, Any]) -> str:
    return str(payload.get("url") or "")


@dataclasses.dataclass(frozen=True)
class LogNotifier:
    """Writes each notice to the ``gpuledger.alerts`` log (a warning while firing, info once
    resolved); never fails."""

    name: str = "log"

    def send(self, payload: Mapping[str, Any]) -> None:
        level = logging.INFO if payload.get("event") in ("resolved", "report") else logging.WARNING
        link = f" {_link(payload)}" if _link(payload) else ""
        logging.getLogger("gpuledger.alerts").log(level, "%s%s", payload.get("text"), link)


def _post(url: str, body: Mapping[str, Any], timeout_s: float, what: str) -> None:
    import requests  # here: the settings build notifiers, and need no HTTP client to do so

    try:
        reply = requests.post(url, json=body, timeout=timeout_s)
    except requests.RequestException as exc:
        raise NotifyError(f"{what} {_redact(url)} could not be reached: {exc}") from exc
    if not 200 <= reply.status_code < 300:
        raise NotifyError(
            f"{what} {_redact(url)} answered {reply.status_code}: {reply.text[:200]!r}"
        )


def _redact(url: str) -> str:
    """The URL without its path: a Slack webhook's path is its secret."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/..."


@dataclasses.dataclass(frozen=True)
class WebhookNotifier:
    """POSTs the notice as JSON to ``url``; any 2xx answer is delivery."""

    url: str
    timeout_s: float = 10.0
    name: str = "webhook"

    def send(self, payload: Mapping[str, Any]) -> None:
        _post(self.url, payload, self.timeout_s, "webhook")


_COLOURS = {"critical": ":red_circle:", "warning": ":large_orange_circle:"}


@dataclasses.dataclass(frozen=True)
class SlackNotifier:
    """POSTs ``{"text": ...}`` (Slack's incoming-webhook format, which Mattermost, Rocket.Chat
    and Teams' Slack-compatible hooks take too), with blocks when ``blocks``."""

    url: str
    timeout_s: float = 10.0
    blocks: bool = True
    name: str = "slack"

    def body(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        resolved = payload.get("event") == "resolved"
        mark = ":white_check_mark:" if resolved else _COLOURS.get(str(payload.get("severity")), "")
        link = _link(payload)
        text = f"{mark} {payload.get('text')}".strip() + (f" <{link}|open>" if link else "")
        body: dict[str, Any] = {"text": text}
        if self.blocks:
            fields = [
                f"*{k}:* {payload[k]}" for k in ("cluster", "node", "tenant") if payload.get(k)
            ]
            if payload.get("jobs"):
                fields.append(f"*jobs:* {', '.join(payload['jobs'][:10])}")
            body["blocks"] = [
                {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
                *(
                    [
                        {
                            "type": "context",
                            "elements": [{"type": "mrkdwn", "text": " · ".join(fields)}],
                        }
                    ]
                    if fields
                    else []
                ),
            ]
        return body

    def send(self, payload: Mapping[str, Any]) -> None:
        _post(self.url, self.body(payload), self.timeout_s, "Slack webhook")


@dataclasses.dataclass(frozen=True)
class EmailNotifier:
    """Sends each notice as a plain-text e-mail through an SMTP server, with STARTTLS when
    ``starttls`` and a login when ``user`` is set."""

    host: str
    port: int
    sender: str
    to: tuple[str, ...]
    user: str = ""
    password: str = dataclasses.field(default="", repr=False)
    starttls: bool = True
    timeout_s: float = 10.0
    name: str = "email"

    def message(self, payload: Mapping[str, Any]) -> EmailMessage:
        msg = EmailMessage()
        state = {"resolved": "RESOLVED", "report": "REPORT"}.get(
            str(payload.get("event")), "FIRING"
        )
        msg["Subject"] = f"[gpuledger {state}] {payload.get('title')}: {payload.get('subject')}"
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.to)
        msg["Date"] = formatdate(usegmt=True)
        msg["Message-ID"] = make_msgid(domain=self.sender.rpartition("@")[2] or None)
        lines = [str(payload.get("text")), ""]
        for key in ("cluster", "node", "tenant", "since", "cost", "alert_id"):
            if payload.get(key):
                value = payload[key]
                if key == "cost":
                    value = f"{payload.get('currency')} {value}"
                lines.append(f"{key}: {value}")
        if payload.get("gpus"):
            lines.append(f"gpus: {', '.join(payload['gpus'])}")
        if payload.get("jobs"):
            lines.append(f"jobs: {', '.join(payload['jobs'])}")
        if _link(payload):
            lines += ["", _link(payload)]
        msg.set_content("\n".join(lines) + "\n")
        return msg

    def send(self, payload: Mapping[str, Any]) -> None:
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
                if self.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if self.user:
                    smtp.login(self.user, self.password)
                smtp.send_message(self.message(payload))
        except (smtplib.SMTPException, OSError) as exc:
            raise NotifyError(
                f"e-mail through {self.host}:{self.port} was not sent: {exc}"
            ) from exc


def build_notifiers(values: Mapping[str, Any]) -> list[Notifier]:
    """The notifiers the ``[alerts]`` settings' values turn on: each whose address is set, and
    the log when ``log`` is on. An InputError names the key and value that are wrong."""
    timeout = float(values["timeout_s"])
    if not 0 < timeout <= 300:
        raise InputError(f"alerts.timeout_s {values['timeout_s']!r} must be within 0-300 seconds")
    out: list[Notifier] = []
    if values["log"]:
        out.append(LogNotifier())
    if values["webhook_url"]:
        out.append(WebhookNotifier(_url(values, "webhook_url"), timeout))
    if values["slack_webhook_url"]:
        url = _url(values, "slack_webhook_url")
        out.append(SlackNotifier(url, timeout, blocks=bool(values["slack_blocks"])))
    if values["smtp_host"] or values["smtp_to"]:
        out.append(_email(values, timeout))
    return out


def _url(values: Mapping[str, Any], key: str) -> str:
    url = str(values[key])
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise InputError(f"alerts.{key} {url!r} is not an http(s) URL")
    return url


def _email(values: Mapping[str, Any], timeout: float) -> EmailNotifier:
    to = _addresses(values["smtp_to"], "alerts.smtp_to")
    if not values["smtp_host"]:
        raise InputError(
            f"alerts.smtp_to {values['smtp_to']!r} needs alerts.smtp_host: the SMTP server to "
            "send through"
        )
    if not to:
        raise InputError("alerts.smtp_host is set but alerts.smtp_to is empty: give recipients")
    (sender,) = _addresses(values["smtp_from"], "alerts.smtp_from") or ("",)
    if not sender:
        raise InputError("alerts.smtp_from is empty: give the address alerts come from")
    if not 0 < values["smtp_port"] < 65536:
        raise InputError(f"alerts.smtp_port {values['smtp_port']!r} is not a TCP port")
    if values["smtp_password"] and not values["smtp_user"]:
        raise InputError("alerts.smtp_password is set but alerts.smtp_user is empty")
    return EmailNotifier(
        values["smtp_host"],
        values["smtp_port"],
        sender,
        to,
        values["smtp_user"],
        values["smtp_password"],
        values["smtp_starttls"],
        timeout,
    )


def _addresses(text: str, label: str) -> tuple[str, ...]:
    out = tuple(a.strip() for a in text.split(",") if a.strip())
    for address in out:
        local, at, domain = address.partition("@")
        if not (local and at and domain) or any(c.isspace() or c in "<>" for c in address):
            raise InputError(
                f"{label} entry {address!r} is not an e-mail address (name@example.com)"
            )
    return out


def names(notifiers: Sequence[Notifier]) -> list[str]:
    return [n.name for n in notifiers]


def tell_each(
    notifiers: Sequence[Notifier],
    payload: Mapping[str, Any],
    *,
    attempts: int = 3,
    first_delay_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str | None]:
    """Send one notice (not an alert: nothing to keep in the outbox, such as a report written)
    to every notifier, each tried ``attempts`` times with a doubling wait; what each said:
    None for delivered, else its last error."""
    said: dict[str, str | None] = {}
    for notifier in notifiers:
        delay, error = first_delay_s, None
        for attempt in range(attempts):
            try:
                notifier.send(payload)
            except NotifyError as exc:
                error = str(exc)
                if attempt + 1 < attempts:
                    sleep(delay)
                    delay *= 2
            else:
                error = None
                break
        said[notifier.name] = error
    return said
