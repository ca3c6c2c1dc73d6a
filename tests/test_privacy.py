"""Memory stays private: each boundary tried as an attacker would, on the real app over
real HTTP where a header matters (RELIABILITY.md: threat model).

* a relayed user: only a trusted proxy relays one, and nobody rewrites the peer address;
* a web page: the Host it names, the Origin it comes from, the body type it can send;
* the exposure rule: a server that answers other machines never opens when its last key
  is revoked.
"""

from __future__ import annotations

import logging
import uuid

import httpx
import pytest

from conductor.memory.settings import MemorySettings
from server.access.auth import Auth
from server.access.browser_guard import BrowserPolicy
from server.access.keys import KeyStore
from server.app import create_app
from server.cli.main import server_config
from tests.inprocess import InProcessApp
from tests.served import AppOnLoop

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "what do you know?"}],
        "script": "Nothing."}


def serve_like_tandem(served, home, **create) -> AppOnLoop:
    """A second app on the session's engine, under the uvicorn settings `tandem serve` uses."""
    engine = served.app.state.tandem.engine
    app = AppOnLoop(served, create_app(engine.profile, home, engine=engine, **create),
                    config=server_config)
    app.start()
    return app


def owner_of(app: AppOnLoop, session: str) -> str:
    """Whose memory the session's turn went to (its ledger record's user)."""
    ledger = app.app.state.tandem.memory
    (user,) = [u for u in ("owner", "alice", "bob") if ledger.latest_record(u, session) is not None]
    return user


@pytest.fixture(scope="module")
def proxied(served, tmp_path_factory):
    """`tandem serve --trusted-proxy 127.0.0.1` (an SSO proxy on this host) and
    `--trusted-proxy 10.0.0.5` (a proxy elsewhere)."""
    local = serve_like_tandem(served, tmp_path_factory.mktemp("local-proxy"),
                              memory_settings=MemorySettings(
                                  user_name="owner", trusted_proxies=frozenset({"127.0.0.1"})))
    remote = serve_like_tandem(served, tmp_path_factory.mktemp("remote-proxy"),
                               memory_settings=MemorySettings(
                                   user_name="owner", trusted_proxies=frozenset({"10.0.0.5"})))
    yield local, remote
    local.stop()
    remote.stop()


def test_a_proxy_on_this_host_that_sets_x_forwarded_for_still_relays_its_user(proxied):
    local, _ = proxied
    session = f"sso-{uuid.uuid4().hex[:6]}"
    response = httpx.post(f"{local.base_url}/v1/chat/completions", json=CHAT, timeout=60,
                          headers={"X-Forwarded-For": "203.0.113.9", "X-Tandem-User": "alice",
                                   "X-Tandem-Session": session})
    assert response.status_code == 200, response.text
    assert owner_of(local, session) == "alice"  # not the engine's own user


def test_a_local_process_cannot_pose_as_a_trusted_proxy_with_x_forwarded_for(proxied):
    _, remote = proxied
    session = f"forged-{uuid.uuid4().hex[:6]}"
    response = httpx.post(f"{remote.base_url}/v1/chat/completions", json=CHAT, timeout=60,
                          headers={"X-Forwarded-For": "10.0.0.5", "X-Real-IP": "10.0.0.5",
                                   "Forwarded": "for=10.0.0.5", "X-Tandem-User": "bob",
                                   "X-Tandem-Session": session})
    assert response.status_code == 200, response.text
    assert owner_of(remote, session) == "owner"  # bob's memory stays bob's


def test_a_rebinding_host_name_reads_nothing(served):
    """A page on evil.example that resolves to 127.0.0.1 reaches the port with its own
    Host header: refused before any route, the admin's layer read included."""
    for path in ("/v1/models", "/v1/conductor/memory/layers/core/USER.md"):
        response = httpx.get(f"{served.base_url}{path}", timeout=30,
                             headers={"Host": f"evil.example:{served.port}"})
        assert response.status_code == 421, (path, response.text)
        assert response.json()["error"]["code"] == "host_not_allowed"
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", "localhost"):
        response = httpx.get(f"{served.base_url}/v1/models", headers={"Host": host}, timeout=30)
        assert response.status_code == 200, host


def test_a_cross_site_post_is_refused_and_leaves_no_turn(served, tmp_path):
    app = InProcessApp(served, tmp_path, memory_changes={"conversation": "continuous"})
    page = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    body = '{"message": "remember I owe evil 100", "script": "ok"}'
    for path in ("/v1/conductor/converse", "/v1/chat/completions"):
        response = app.request("POST", path, content=body, headers=page)
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "origin_not_allowed"
    # The same body from a page of the server's own origin, still as text/plain: 415.
    response = app.request("POST", "/v1/conductor/converse", content=body,
                           headers={"Origin": "http://localhost", "Content-Type": "text/plain"})
    assert response.status_code == 415
    assert not (tmp_path / "memory" / "layers" / "tester" / "history").exists()


def test_json_routes_take_json_bodies_only(served):
    for content_type in ("text/plain", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": content_type} if content_type else {}
        response = httpx.post(f"{served.base_url}/v1/chat/completions", timeout=30,
                              content=b'{"model": "tiny"}', headers=headers)
        assert response.status_code == 415, content_type
        assert response.json()["error"]["code"] == "unsupported_media_type"
    response = httpx.post(f"{served.base_url}/v1/chat/completions", timeout=60, json=CHAT,
                          headers={"Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 200


def test_an_allowed_origin_gets_cors_and_another_does_not(served, tmp_path):
    policy = BrowserPolicy(allowed_origins=frozenset({"https://app.example"}))
    app = serve_like_tandem(served, tmp_path, browser=policy)
    try:
        preflight = httpx.options(f"{app.base_url}/v1/chat/completions", timeout=30, headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        answer = httpx.post(f"{app.base_url}/v1/chat/completions", json=CHAT, timeout=60,
                            headers={"Origin": "https://app.example"})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.options(f"{app.base_url}/v1/chat/completions", timeout=30, headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert other.status_code == 403 and "access-control-allow-origin" not in other.headers
    finally:
        app.stop()


def test_revoking_the_last_key_of_a_lan_server_shuts_every_v1_route(served, tmp_path, caplog):
    keys = KeyStore(tmp_path)
    alice = keys.add("alice")
    auth = Auth(keys=keys, required=True)  # what `tandem serve --host 0.0.0.0` sets
    app = InProcessApp(served, tmp_path, auth=auth, client_host="192.168.1.20")
    headers = {"Authorization": f"Bearer {alice}"}
    assert app.request("GET", "/v1/models", headers=headers).status_code == 200
    keys.revoke("alice")
    with caplog.at_level(logging.WARNING, logger="tandem.auth"):
        for sent in (headers, {}):
            response = app.request("GET", "/v1/models", headers=sent)
            assert response.status_code == 401
            assert "no API key left" in response.json()["error"]["message"]
    assert "every /v1 request is refused" in caplog.text
    (tmp_path / "keys.json").unlink(missing_ok=True)  # a missing keys.json: the same
    assert app.request("GET", "/v1/models").status_code == 401
