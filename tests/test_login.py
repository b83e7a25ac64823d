"""Logins in front of the dashboard, against a real `gpuledger serve` over HTTP: the form with
its CSRF token and a signed cookie, HTTP Basic for scripts, open health and metrics, users
changed while it runs, and the audit log."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from pathlib import Path

import pytest
import requests
from cli_runner import Cli
from conftest import make_token, serving

from collector.pipeline import HttpSink
from collector.records import Batch, GpuInventory
from gpuledger.users import UserBook, UserError, UserStore

pytestmark = pytest.mark.integration

PASSWORD = "correct horse battery"


def _cli(cli: Cli, env: dict[str, str], *args: str, stdin: str = "") -> str:
    got = cli(*args, env=env, stdin=stdin, timeout=120)
    assert got.returncode == 0, got.stderr
    return got.stdout


def test_roles_and_passwords_are_checked(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.json")
    with pytest.raises(UserError, match="is not a role"):
        store.add("bob", "tenant:", PASSWORD)
    with pytest.raises(UserError, match="at least 12 characters"):
        store.add("bob", "admin", "short")
    lead = store.add("lead", "tenant:ml/vision", PASSWORD)
    assert lead.tenant == "ml/vision" and PASSWORD not in store.path.read_text()
    book = UserBook(store)
    assert book.verify("lead", PASSWORD) == lead
    assert book.verify("lead", PASSWORD + "x") is None and book.verify("nobody", PASSWORD) is None
    with pytest.raises(UserError, match="exists"):
        store.add("lead", "admin", PASSWORD)


def test_the_dashboard_needs_a_login(
    tmp_path: Path, run_cli: Cli, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    _cli(
        run_cli,
        cli_env,
        "user",
        "add",
        "alice",
        "--role",
        "manager",
        "--password-stdin",
        *d,
        stdin=PASSWORD + "\n",
    )
    made = _cli(run_cli, cli_env, "user", "add", "bob", "--role", "tenant:ml", *d).strip()
    assert len(made) >= 20  # a password made for bob, shown once
    with serving(gpuledger_cmd, cli_env, data) as url:
        assert requests.get(f"{url}/metrics", timeout=10).status_code == 200  # open
        page = requests.get(f"{url}/", headers={"Accept": "text/html"}, allow_redirects=False)
        assert page.status_code == 302 and page.headers["Location"].startswith("/login?next=")
        for method, path in (("GET", "/_dash-layout"), ("POST", "/_dash-update-component")):
            bare = requests.request(method, f"{url}{path}", json={}, timeout=10)
            assert bare.status_code == 401 and "log in" in bare.json()["error"]
            assert bare.headers["WWW-Authenticate"].startswith("Basic")
        layout = requests.get(f"{url}/_dash-layout", auth=("alice", PASSWORD), timeout=10)
        assert layout.status_code == 200
        assert requests.get(f"{url}/_dash-layout", auth=("bob", made), timeout=10).ok
        wrong = requests.get(f"{url}/_dash-layout", auth=("alice", "nope"), timeout=10)
        assert wrong.status_code == 401

        with requests.Session() as s:
            form = s.get(f"{url}/login?next=/_dash-layout", timeout=10).text
            csrf = re.search(r'name="csrf" value="([^"]+)"', form)[1]  # type: ignore[index]
            forged = s.post(f"{url}/login", data={"user": "alice", "password": PASSWORD})
            assert forged.status_code == 400  # no CSRF token: refused
            bad = s.post(f"{url}/login", data={"user": "alice", "password": "x", "csrf": csrf})
            assert bad.status_code == 401 and "Wrong user name or password" in bad.text
            ok = s.post(
                f"{url}/login",
                data={"user": "alice", "password": PASSWORD, "csrf": csrf, "next": "/_dash-layout"},
                allow_redirects=False,
            )
            assert ok.status_code == 302 and ok.headers["Location"] == "/_dash-layout"
            cookie = ok.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
            assert s.get(f"{url}/_dash-layout", timeout=10).status_code == 200
            # another site as `next` is never followed (a login turns the CSRF token over)
            form = s.get(f"{url}/login", timeout=10).text
            csrf = re.search(r'name="csrf" value="([^"]+)"', form)[1]  # type: ignore[index]
            away = s.post(
                f"{url}/login",
                data={
                    "user": "alice",
                    "password": PASSWORD,
                    "csrf": csrf,
                    "next": "//evil.example/",
                },
                allow_redirects=False,
            )
            assert away.headers["Location"] == "/"
            # alice removed while the server runs: her session ends
            _cli(run_cli, cli_env, "user", "remove", "alice", *d)
            deadline = time.monotonic() + 30
            while s.get(f"{url}/_dash-layout", timeout=10).status_code == 200:
                assert time.monotonic() < deadline, "a removed user still reads"
                time.sleep(0.2)
    listed = _cli(run_cli, cli_env, "user", "list", *d)
    assert "bob" in listed and "tenant:ml" in listed and "alice" not in listed
    audit = json.loads(_cli(run_cli, cli_env, "audit", "--action", "login", "--format", "json", *d))
    assert {(e["action"], e["outcome"]) for e in audit} == {
        ("login", "ok"),
        ("login.failed", "denied"),
    }


def test_https_with_a_configured_certificate(
    tmp_path: Path, run_cli: Cli, gpuledger_cmd: list[str], cli_env: dict[str, str]
) -> None:
    """With server.tls_cert_file and tls_key_file, serve speaks HTTPS (checked against the test
    CA), and the login cookie is Secure."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    chain, key, ca_file = tmp_path / "chain.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_pem.write_to_path(str(key))
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(ca_file))
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    _cli(
        run_cli,
        cli_env,
        "user",
        "add",
        "ana",
        "--role",
        "admin",
        "--password-stdin",
        *d,
        stdin=PASSWORD + "\n",
    )
    # made before the server starts: one made while it runs is seen within a second
    token = make_token(run_cli, cli_env, data, "c1")
    env = {
        **cli_env,
        "GPULEDGER_SERVER__TLS_CERT_FILE": str(chain),
        "GPULEDGER_SERVER__TLS_KEY_FILE": str(key),
    }
    with serving(gpuledger_cmd, env, data, tls_ca=ca_file) as url:
        assert requests.get(f"{url}/healthz", verify=str(ca_file), timeout=10).ok
        with pytest.raises(requests.ConnectionError):  # plain HTTP on the HTTPS port
            requests.get(url.replace("https:", "http:") + "/healthz", timeout=5)
        with requests.Session() as s:
            # verify= on each request: a session's own is overridden by REQUESTS_CA_BUNDLE
            form = s.get(f"{url}/login", verify=str(ca_file), timeout=10).text
            csrf = re.search(r'name="csrf" value="([^"]+)"', form)[1]  # type: ignore[index]
            ok = s.post(
                f"{url}/login",
                data={"user": "ana", "password": PASSWORD, "csrf": csrf},
                allow_redirects=False,
                verify=str(ca_file),
            )
            assert ok.status_code == 302 and "Secure" in ok.headers["Set-Cookie"]
        # an agent sends over HTTPS, trusting the test CA
        sink = HttpSink(url, token=token, verify=str(ca_file))
        sink.send(
            Batch(gpus=[GpuInventory(dt.datetime.now(dt.UTC), "c1", "", "n", "g", 0, "H100")]),
            "tls-1",
        )
        sink.close()
