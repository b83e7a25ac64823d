"""Single sign-on: a real `gpuledger serve` logs people in through a stand-in OpenID Connect
provider (discovery, authorize, token, JWKS; ID tokens signed with RS256), mapping their
groups to roles; a person with no mapped group is refused and audited."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import flask
import pytest
import requests
from conftest import serving
from joserfc import jwt
from joserfc.jwk import RSAKey
from werkzeug.serving import make_server

from gpuledger.oidc import OidcSettingsError, parse_roles, role_for
from gpuledger.settings import SettingsError, load_settings

pytestmark = pytest.mark.integration

ROLES = "gpu-admins=admin;finance=manager;ml-vision=tenant:ml/vision"


def test_groups_map_to_the_widest_role() -> None:
    roles = parse_roles(ROLES)
    assert role_for(["ml-vision", "finance"], roles) == "manager"
    assert role_for("ml-vision", roles) == "tenant:ml/vision"
    assert role_for(["ml-vision", "gpu-admins"], roles) == "admin"
    assert role_for(["strangers"], roles) is None and role_for(None, roles) is None
    with pytest.raises(OidcSettingsError, match="is not group=role"):
        parse_roles("gpu-admins")
    with pytest.raises(OidcSettingsError, match="is not a role"):
        parse_roles("x=owner")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"OIDC_ISSUER": "https://idp.example"}, "needs server.oidc_client_id"),
        ({"OIDC_ISSUER": "idp.example", "OIDC_CLIENT_ID": "c", "OIDC_ROLES": ROLES}, "not a URL"),
        (
            {"OIDC_ISSUER": "https://idp.example", "OIDC_CLIENT_ID": "c", "OIDC_ROLES": "a=root"},
            "'a=root': --role 'root' is not a role",
        ),
    ],
)
def test_oidc_settings_are_checked(env: dict[str, str], needle: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(needle)):
        load_settings(env={f"GPULEDGER_SERVER__{k}": v for k, v in env.items()})
    assert load_settings(env={}).server.oidc() is None


class Provider:
    """An OpenID Connect provider that logs in whoever ``person`` names, at once."""

    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "k1", "use": "sig"})
        self.person: dict[str, Any] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        app = flask.Flask("provider")

        @app.get("/.well-known/openid-configuration")
        def discovery() -> Any:
            return flask.jsonify(
                issuer=self.url,
                authorization_endpoint=f"{self.url}/authorize",
                token_endpoint=f"{self.url}/token",
                jwks_uri=f"{self.url}/jwks",
                response_types_supported=["code"],
                subject_types_supported=["public"],
                id_token_signing_alg_values_supported=["RS256"],
            )

        @app.get("/jwks")
        def jwks() -> Any:
            return flask.jsonify(keys=[self.key.as_dict(private=False)])

        @app.get("/authorize")
        def authorize() -> Any:
            q = flask.request.args
            code = secrets.token_urlsafe(16)
            self.codes[code] = {"nonce": q.get("nonce"), "client_id": q["client_id"]}
            query = urlencode({"code": code, "state": q["state"]})
            return flask.redirect(f"{q['redirect_uri']}?{query}")

        @app.post("/token")
        def token() -> Any:
            grant = self.codes.pop(flask.request.form["code"])
            now = int(time.time())
            claims = {
                "iss": self.url,
                "sub": self.person["preferred_username"],
                "aud": grant["client_id"],
                "iat": now,
                "exp": now + 300,
                "nonce": grant["nonce"],
                **self.person,
            }
            id_token = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, self.key)
            return flask.jsonify(access_token="at", token_type="Bearer", id_token=id_token)

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider()
    yield p
    p.close()


def test_single_sign_on_maps_groups_to_roles(
    provider: Provider, tmp_path: Path, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    env = {
        **cli_env,
        "GPULEDGER_SERVER__OIDC_ISSUER": provider.url,
        "GPULEDGER_SERVER__OIDC_CLIENT_ID": "gpuledger",
        "GPULEDGER_SERVER__OIDC_CLIENT_SECRET": "s3cret",
        "GPULEDGER_SERVER__OIDC_ROLES": ROLES,
    }
    with serving(gpuledger_cmd, env, data) as url:
        assert "/login/oidc" in requests.get(f"{url}/login", timeout=10).text
        provider.person = {"preferred_username": "ana", "groups": ["ml-vision", "finance"]}
        with requests.Session() as s:
            landed = s.get(f"{url}/login/oidc", timeout=30)  # provider and back, redirects
            assert landed.status_code == 200 and landed.url == f"{url}/"
            assert s.get(f"{url}/_dash-layout", timeout=10).status_code == 200
        provider.person = {"preferred_username": "eve", "groups": ["strangers"]}
        with requests.Session() as s:
            refused = s.get(f"{url}/login/oidc", timeout=30)
            assert refused.status_code == 403 and "no gpuledger role" in refused.json()["error"]
            assert s.get(f"{url}/_dash-layout", timeout=10).status_code == 401
    audit = subprocess.run(
        [*gpuledger_cmd, "audit", "--action", "login", "--format", "json", "--data-dir", str(data)],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    entries = {(e["actor"], e["action"], e["detail"]) for e in json.loads(audit.stdout)}
    assert ("ana", "login", "oidc") in entries
    assert any(a == "eve" and act == "login.failed" for a, act, _ in entries)
