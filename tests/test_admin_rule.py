"""The admin rule of the `/v1/conductor/...` routes and the Memory screen, tried as an
attacker would: another machine, no password, a wrong one many times, a write without
the CSRF token, a session after the password changed, a forged Origin or Host."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from server.access import admin as admin_rule
from server.access.admin_password import AdminPassword
from server.access.auth import Auth
from tests.inprocess import InProcessApp

PASSWORD = "correct horse battery"
NOTES = "/v1/conductor/memory/notes"


def note(app: InProcessApp) -> str:
    return app.memory.store("tester").add(title="The gate code is on the fob",
                                          body="Blue fob opens the garden gate.",
                                          kind="reference", scope="user",
                                          source="route").note.id


def login(app: InProcessApp, password: str = PASSWORD):
    return app.request("POST", "/v1/conductor/admin/login", json={"password": password})


def cookie_of(response) -> dict:
    return {"Cookie": response.headers["set-cookie"].split(";", 1)[0]}


def test_without_a_password_only_this_machine_may_use_the_admin_routes(served, tmp_path):
    local = InProcessApp(served, tmp_path)
    remote = InProcessApp(served, tmp_path, client_host="192.168.1.20")
    assert local.request("GET", NOTES).status_code == 200
    for method, path in (("GET", NOTES), ("PUT", "/v1/conductor/memory/settings"),
                         ("GET", "/v1/conductor/memory/export"),
                         ("GET", "/v1/conductor/memory/context?session=x")):
        response = remote.request(method, path, json={} if method == "PUT" else None)
        assert response.status_code == 403, path
        assert response.json()["error"]["code"] == "admin_only"
    session = remote.request("GET", "/v1/conductor/admin/session").json()
    assert not session["allowed"] and not session["password_set"]


def test_once_a_password_is_set_it_is_needed_from_everywhere_and_a_bearer_serves_scripts(
        served, tmp_path):
    local = InProcessApp(served, tmp_path)
    remote = InProcessApp(served, tmp_path, client_host="192.168.1.20")
    AdminPassword(tmp_path).set(PASSWORD)
    refused = local.request("GET", NOTES)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "admin_password_required"
    bearer = {"Authorization": f"Bearer {PASSWORD}"}
    assert local.request("GET", NOTES, headers=bearer).status_code == 200
    assert remote.request("GET", NOTES, headers=bearer).status_code == 200
    wrong = remote.request("GET", NOTES, headers={"Authorization": "Bearer guess"})
    assert wrong.status_code == 401
    # the user's own routes are not admin routes: the converse route needs no password
    _, _, answer = local.converse("hello", "hi")
    assert answer.status_code == 200


def test_a_screen_session_is_a_strict_cookie_and_each_write_needs_its_csrf_token(
        served, tmp_path):
    app = InProcessApp(served, tmp_path)
    note_id = note(app)
    AdminPassword(tmp_path).set(PASSWORD)
    assert login(app, "not it").status_code == 401
    signed_in = login(app)
    assert signed_in.status_code == 200
    cookie = signed_in.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "Secure" not in cookie  # plain HTTP here; over TLS it is Secure
    headers = cookie_of(signed_in)
    csrf = signed_in.json()["csrf"]
    assert app.request("GET", f"{NOTES}/{note_id}", headers=headers).status_code == 200
    forged = app.request("PATCH", f"{NOTES}/{note_id}", headers=headers,
                         json={"body": "The fob is red now and opens the gate."})
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "csrf_failed"
    assert "Blue fob" in app.memory.store("tester").get(note_id).body
    edited = app.request("PATCH", f"{NOTES}/{note_id}", headers={**headers, "X-CSRF-Token": csrf},
                         json={"body": "The fob is red now and opens the gate."})
    assert edited.status_code == 200
    state = app.request("GET", "/v1/conductor/admin/session", headers=headers).json()
    assert state["signed_in"] and state["allowed"] and state["csrf"] == csrf
    app.request("POST", "/v1/conductor/admin/logout", headers=headers)
    assert app.request("GET", NOTES, headers=headers).status_code == 401


def test_a_new_password_ends_the_sessions_signed_in_under_the_old_one(served, tmp_path):
    app = InProcessApp(served, tmp_path)
    AdminPassword(tmp_path).set(PASSWORD)
    headers = cookie_of(login(app))
    assert app.request("GET", NOTES, headers=headers).status_code == 200
    time.sleep(0.01)  # a new file stamp
    AdminPassword(tmp_path).set("another long password")
    assert app.request("GET", NOTES, headers=headers).status_code == 401
    assert AdminPassword(tmp_path).clear()
    assert app.request("GET", NOTES).status_code == 200  # loopback, no password: open


def test_wrong_passwords_are_slowed_then_refused_even_with_the_right_one(
        served, tmp_path, monkeypatch):
    monkeypatch.setattr(admin_rule, "MAX_DELAY_S", 0.2)
    monkeypatch.setattr(admin_rule, "MAX_FAILURES", 6)
    app = InProcessApp(served, tmp_path, client_host="192.168.1.30")
    AdminPassword(tmp_path).set(PASSWORD)
    took = []
    for _ in range(6):
        started = time.monotonic()
        assert login(app, "guess").status_code == 401
        took.append(time.monotonic() - started)
    assert min(took[4:]) >= 0.2  # from the fourth failure on, each answer waits
    locked = login(app)
    assert locked.status_code == 429 and locked.json()["error"]["code"] == "too_many_failures"
    bearer = app.request("GET", NOTES, headers={"Authorization": f"Bearer {PASSWORD}"})
    assert bearer.status_code == 429
    other = InProcessApp(served, tmp_path, client_host="192.168.1.31")
    assert login(other).status_code == 200  # a guesser elsewhere locks no one else out


def test_with_api_keys_the_screen_loads_without_one_and_its_data_needs_the_admin(
        served, tmp_path):
    app = InProcessApp(served, tmp_path, auth=Auth(api_key="engine-key"))
    page = app.request("GET", "/memory")
    assert page.status_code == 200 and "Tandem" in page.text
    assert app.request("GET", NOTES).status_code == 401  # no password: the engine's key
    key = {"Authorization": "Bearer engine-key"}
    assert app.request("GET", NOTES, headers=key).status_code == 200
    AdminPassword(tmp_path).set(PASSWORD)
    assert app.request("GET", NOTES, headers=key).status_code == 401  # now the password
    assert app.request("GET", NOTES, headers={"Authorization": f"Bearer {PASSWORD}"}) \
        .status_code == 200
    assert app.request("GET", "/v1/models").status_code == 401  # the API still needs a key
    chat = app.request("POST", "/v1/chat/completions",
                       headers={"Authorization": f"Bearer {PASSWORD}"},
                       json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 401  # the admin password is no API key


def test_the_page_serves_only_its_own_files_with_a_strict_policy(served, tmp_path):
    app = InProcessApp(served, tmp_path)
    page = app.request("GET", "/memory/context")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert app.request("GET", "/memory/static/screen.js").headers["content-type"].startswith(
        "text/javascript")
    for path in ("/memory/static/..%2F..%2Fapp.py", "/memory/static/index.html",
                 "/memory/secrets", "/memory/static/screen.py"):
        assert app.request("GET", path).status_code == 404, path


@pytest.mark.parametrize("headers,status", [
    ({"Origin": "https://evil.example"}, 403),
    ({"Host": "rebound.evil.example"}, 421),
    ({"Content-Type": "text/plain"}, 415),
])
def test_a_web_page_cannot_sign_in_for_the_user(served, tmp_path, headers, status):
    app = InProcessApp(served, tmp_path)
    AdminPassword(tmp_path).set(PASSWORD)
    body = {"content": f'{{"password": "{PASSWORD}"}}'} if "Content-Type" in headers \
        else {"json": {"password": PASSWORD}}
    response = app.request("POST", "/v1/conductor/admin/login", headers=headers, **body)
    assert response.status_code == status
    assert "set-cookie" not in response.headers


def test_the_admin_password_command_sets_clears_and_refuses_a_short_one(tmp_path):
    env = {**os.environ, "TANDEM_HOME": str(tmp_path)}

    def admin(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "server.cli", "admin", "password", *args],
                              input=stdin, capture_output=True, text=True, env=env, timeout=60)

    short = admin(stdin="short\n")
    assert short.returncode == 2 and "at least 8 characters" in short.stderr
    assert not (tmp_path / "admin.json").exists()
    done = admin(stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    stored = tmp_path / "admin.json"
    assert oct(stored.stat().st_mode & 0o777) == "0o600"
    assert PASSWORD not in stored.read_text()
    assert AdminPassword(tmp_path).verify(PASSWORD)
    assert admin("--clear").returncode == 0 and not stored.exists()
