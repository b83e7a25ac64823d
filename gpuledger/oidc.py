"""Single sign-on through an OpenID Connect provider (authlib), with the provider's groups
mapped to gpuledger roles.

The mapping is ordered text, ``group=role`` pairs separated by ``;`` (for example
``gpu-admins=admin;finance=manager;ml-vision=tenant:ml/vision``). A person in several mapped
groups gets the widest role (admin, then manager, then the first tenant listed); a person in
none is refused, and the refusal is audited.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flask
from authlib.integrations.flask_client import OAuth

from gpuledger.users import check_role
from gpuledger_errors import ConfigError


class OidcSettingsError(ConfigError):
    """The OIDC settings cannot work as given."""


@dataclasses.dataclass(frozen=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str
    roles: tuple[tuple[str, str], ...]
    groups_claim: str = "groups"
    name_claim: str = "preferred_username"


def parse_roles(text: str) -> tuple[tuple[str, str], ...]:
    """``group=role;group=role`` as ordered pairs (roles checked)."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        group, sep, role = (x.strip() for x in item.partition("="))
        if not sep or not group:
            raise OidcSettingsError(
                f"server.oidc_roles entry {item!r} is not group=role "
                "(e.g. gpu-admins=admin;finance=manager;ml-vision=tenant:ml/vision)"
            )
        try:
            pairs.append((group, check_role(role)))
        except ValueError as exc:
            raise OidcSettingsError(f"server.oidc_roles entry {item!r}: {exc}") from None
    return tuple(pairs)


def role_for(groups: Any, roles: tuple[tuple[str, str], ...]) -> str | None:
    """The widest role the person's groups map to, or None."""
    if isinstance(groups, str):
        groups = [groups]
    held = {str(g) for g in groups} if isinstance(groups, list | tuple) else set()
    mapped = [role for group, role in roles if group in held]
    for wanted in ("admin", "manager"):
        if wanted in mapped:
            return wanted
    return mapped[0] if mapped else None


def add_oidc(
    server: flask.Flask,
    config: OidcConfig,
    start_session: Any,
    refuse: Any,
) -> None:
    """``/login/oidc`` sends the browser to the provider; ``/login/oidc/callback`` takes it
    back, checks the ID token (signature, issuer, audience, nonce, expiry) and calls
    ``start_session(name, role)``, or ``refuse(name, why)`` for a person with no mapped
    group."""
    oauth = OAuth(server)
    client = oauth.register(
        "sso",
        client_id=config.client_id,
        client_secret=config.client_secret,
        server_metadata_url=config.issuer.rstrip("/") + "/.well-known/openid-configuration",
        client_kwargs={"scope": "openid profile email groups"},
    )

    @server.get("/login/oidc")
    def oidc_start() -> flask.typing.ResponseReturnValue:
        return client.authorize_redirect(flask.url_for("oidc_callback", _external=True))

    @server.get("/login/oidc/callback")
    def oidc_callback() -> flask.typing.ResponseReturnValue:
        try:
            token = client.authorize_access_token()
        except Exception as exc:  # authlib raises many kinds: each is a refused login
            refuse("", f"single sign-on failed: {type(exc).__name__}: {exc}")
            return flask.jsonify(error="single sign-on failed: log in again"), 401
        info = token.get("userinfo") or {}
        name = str(info.get(config.name_claim) or info.get("email") or info.get("sub") or "")
        role = role_for(info.get(config.groups_claim), config.roles)
        if not name or role is None:
            why = f"no gpuledger role for the groups of {name or 'this person'}"
            refuse(name, why)
            return flask.jsonify(error=f"{why}: ask an admin to map one (server.oidc_roles)"), 403
        return start_session(name, role)
