"""Logins in front of everything ``gpuledger serve`` shows: the dashboard, its callbacks and
any page to come. Only ``/healthz``, ``/metrics`` (no tenant figures) and the agents' ingest
(which has its own tokens) answer without one.

A person logs in with the form at ``/login`` (a signed session cookie: HttpOnly, SameSite=Lax;
the form carries a CSRF token) or, for scripts and ``curl -u``, with HTTP Basic on each
request. A request without a login gets a redirect to the form when a browser asks for a page,
else 401 with ``WWW-Authenticate: Basic``. Logins and failed logins go to the audit log.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hmac
import html
import os
import secrets
from pathlib import Path
from urllib.parse import quote, urlsplit

import flask

from gpuledger.auditing import Refusals
from gpuledger.oidc import OidcConfig, add_oidc
from gpuledger.users import User, UserBook
from warehouse.client import Warehouse, WarehouseError

#: Paths that answer without a login.
OPEN_PATHS = frozenset(
    {
        "/healthz",
        "/metrics",
        "/api/v1/ingest",
        "/admission",  # the API server calls it (over TLS), with no user's login
        "/login",
        "/login/oidc",
        "/login/oidc/callback",
    }
)


def session_key(path: Path) -> bytes:
    """The key that signs session cookies: made once (32 random bytes, mode 0600) and kept, so
    a restart does not log everyone out."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


def current_user() -> User | None:
    """Who is asking (every callback that returns tenant figures checks this itself)."""
    user = flask.g.get("user")
    return user if isinstance(user, User) else None


def protect(
    server: flask.Flask,
    users: UserBook,
    wh: Warehouse,
    key: bytes,
    *,
    secure_cookie: bool,
    oidc: OidcConfig | None = None,
) -> None:
    """Require a login for every route of ``server`` but :data:`OPEN_PATHS`; the session
    cookie is sent over HTTPS only when ``secure_cookie`` (the server speaks TLS). With
    ``oidc``, people may also log in through that provider (see :mod:`gpuledger.oidc`)."""
    server.secret_key = key
    server.config.update(
        SESSION_COOKIE_NAME="gpuledger_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SECURE=secure_cookie,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=dt.timedelta(hours=12),
    )
    failed = Refusals(wh, "login.failed")

    def start_session(name: str, role: str, via: str) -> flask.typing.ResponseReturnValue:
        target = _safe_next(str(flask.session.get("next", "/")))
        flask.session.clear()
        flask.session.permanent = True
        flask.session["user"] = name
        if via == "oidc":  # not in the users file: the provider vouched for name and role
            flask.session["oidc_role"] = role
        _audit(wh, name, "login", "ok", via)
        return flask.redirect(target)

    if oidc is not None:
        add_oidc(
            server,
            oidc,
            lambda name, role: start_session(name, role, "oidc"),
            lambda name, why: failed.note(name, why),
        )

    @server.before_request
    def require_login() -> flask.typing.ResponseReturnValue | None:
        if flask.request.path in OPEN_PATHS:
            return None
        name = flask.session.get("user")
        role = flask.session.get("oidc_role")
        if isinstance(name, str) and isinstance(role, str):
            user: User | None = User(name, role, argon2="")
        else:
            user = users.get(name) if isinstance(name, str) else None
        if user is None and (basic := flask.request.authorization) is not None:
            user = users.verify(basic.username or "", basic.password or "")
            if user is None:
                failed.note(basic.username or "", "wrong user name or password (HTTP Basic)")
                return _unauthorized("wrong user name or password")
        if user is not None:
            flask.g.user = user
            return None
        # a browser asking for a page goes to the form; scripts and callbacks get 401
        wants_page = (
            flask.request.method == "GET"
            and "text/html" in flask.request.headers.get("Accept", "")
            and not flask.request.path.startswith("/_dash")
        )
        if wants_page:
            return flask.redirect(f"/login?next={quote(flask.request.full_path)}")
        return _unauthorized("log in: HTTP Basic, or the form at /login")

    @server.route("/login", methods=["GET", "POST"])
    def login() -> flask.typing.ResponseReturnValue:
        target = _safe_next(flask.request.values.get("next", "/"))
        sso = oidc is not None
        if flask.request.method == "GET":
            flask.session["next"] = target  # where single sign-on comes back to
            return _form(target, "", sso)
        if not _csrf_ok():
            return _form(target, "The form expired: log in again.", sso), 400
        name = flask.request.form.get("user", "")
        user = users.verify(name, flask.request.form.get("password", ""))
        if user is None:
            failed.note(name, "wrong user name or password (form)")
            return _form(target, "Wrong user name or password.", sso), 401
        flask.session["next"] = target
        return start_session(user.name, user.role, "password")

    @server.post("/logout")
    def logout() -> flask.typing.ResponseReturnValue:
        if not _csrf_ok():
            return flask.jsonify(error="the logout form expired: reload the page"), 400
        user = current_user()
        flask.session.clear()
        if user is not None:
            _audit(wh, user.name, "logout", "ok", "")
        return flask.redirect("/login")


def _unauthorized(why: str) -> flask.typing.ResponseReturnValue:
    reply = flask.jsonify(error=why)
    reply.headers["WWW-Authenticate"] = 'Basic realm="gpuledger", charset="UTF-8"'
    return reply, 401


def _csrf_token() -> str:
    token = flask.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        flask.session["csrf"] = token
    return token


def _csrf_ok() -> bool:
    sent, kept = flask.request.form.get("csrf", ""), flask.session.get("csrf")
    return isinstance(kept, str) and hmac.compare_digest(sent.encode(), kept.encode())


def _safe_next(target: str) -> str:
    """Only a path on this server: never another site (an open redirect)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _form(target: str, message: str, sso: bool) -> str:
    note = f'<p class="error">{html.escape(message)}</p>' if message else ""
    if sso:
        note += '<p><a href="/login/oidc">Log in with single sign-on</a></p>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpuledger: log in</title></head>
<body><main style="max-width:22rem;margin:4rem auto;font-family:sans-serif">
<h1>gpuledger</h1>{note}
<form method="post" action="/login">
<input type="hidden" name="csrf" value="{html.escape(_csrf_token())}">
<input type="hidden" name="next" value="{html.escape(target)}">
<p><label>User <input name="user" autocomplete="username" required autofocus></label></p>
<p><label>Password <input name="password" type="password" autocomplete="current-password"
required></label></p>
<p><button type="submit">Log in</button></p>
</form></main></body></html>"""


def _audit(wh: Warehouse, actor: str, action: str, outcome: str, via: str) -> None:
    with contextlib.suppress(WarehouseError):  # best effort: the login stands without it
        wh.audit(actor, action, flask.request.remote_addr or "", via, outcome=outcome)
