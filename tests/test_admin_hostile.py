"""The admin routes and the API keys under hostile use (issue 53): guesses sent at once,
guesses from addresses without end, the session route asked without credentials, and
random bodies, sizes and orders of logins, logouts and guesses. Every request goes to the
real app (on the session's engine) through its ASGI interface, many at once on the
server's loop, each from the client address the test names."""

from __future__ import annotations

import asyncio
import itertools
import string

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from server.access import admin as admin_rule
from server.access import admin_password
from server.access import keys as keys_module
from server.access.admin_password import AdminPassword
from server.access.auth import Auth
from server.access.keys import KeyStore
from tests.inprocess import InProcessApp

PASSWORD = "correct horse battery"
LOGIN = "/v1/conductor/admin/login"
LOGOUT = "/v1/conductor/admin/logout"
SESSION = "/v1/conductor/admin/session"
NOTES = "/v1/conductor/memory/notes"
REQUEST_TIMEOUT_S = 120


async def send(app: InProcessApp, host: str, method: str, path: str,
               **kwargs) -> httpx.Response:
    transport = httpx.ASGITransport(app=app.app, client=(host, 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                 timeout=REQUEST_TIMEOUT_S) as client:
        response = await client.request(method, path, **kwargs)
        await response.aread()
        return response


def at_once(app: InProcessApp, calls: list[tuple]) -> list[httpx.Response]:
    """Each (host, method, path, kwargs) sent at once; the answers in the same order."""
    async def go() -> list[httpx.Response]:
        return await asyncio.gather(*(send(app, host, method, path, **kwargs)
                                      for host, method, path, kwargs in calls))
    return app._served.run(go(), REQUEST_TIMEOUT_S * 2)


def statuses(responses: list[httpx.Response]) -> dict[int, int]:
    counted: dict[int, int] = {}
    for response in responses:
        counted[response.status_code] = counted.get(response.status_code, 0) + 1
    return counted


@pytest.fixture
def quick_waits(monkeypatch):
    """The lockout as it is, its waits shortened (the app is made after this)."""
    monkeypatch.setattr(admin_rule, "MAX_DELAY_S", 0.05)


def test_forty_wrong_passwords_at_once_get_ten_checks_and_the_rest_429(
        served, tmp_path, quick_waits):
    app = InProcessApp(served, tmp_path)
    AdminPassword(tmp_path).set(PASSWORD)
    limit = admin_rule.MAX_FAILURES
    logins = at_once(app, [("192.168.7.1", "POST", LOGIN, {"json": {"password": f"guess {i}"}})
                           for i in range(40)])
    assert statuses(logins) == {401: limit, 429: 40 - limit}
    for response in logins:
        assert response.json()["error"]["code"] in ("wrong_admin_password",
                                                    "too_many_failures")
    # the same through the bearer of an admin route, from another address
    bearers = at_once(app, [("192.168.7.2", "GET", NOTES,
                             {"headers": {"Authorization": f"Bearer guess {i}"}})
                            for i in range(40)])
    assert statuses(bearers) == {401: limit, 429: 40 - limit}
    # the lockout holds for the right password too, by either way in
    right = at_once(app, [("192.168.7.1", "POST", LOGIN, {"json": {"password": PASSWORD}}),
                          ("192.168.7.2", "GET", NOTES,
                           {"headers": {"Authorization": f"Bearer {PASSWORD}"}})])
    assert [response.status_code for response in right] == [429, 429]
    signed_in = at_once(app, [("192.168.7.3", "POST", LOGIN,
                               {"json": {"password": PASSWORD}})])[0]
    assert signed_in.status_code == 200  # another address is not locked out


def test_the_right_password_sent_many_times_at_once_is_checked_once_and_served(
        served, tmp_path, quick_waits, monkeypatch):
    """Counting checks in flight must not refuse a script's own burst: the same secret in
    flight is checked once and shared."""
    app = InProcessApp(served, tmp_path)
    AdminPassword(tmp_path).set(PASSWORD)
    calls: list[int] = []
    real = admin_password._hash
    monkeypatch.setattr(admin_password, "_hash",
                        lambda text, salt: calls.append(1) or real(text, salt))
    burst = at_once(app, [("192.168.8.1", "GET", NOTES,
                           {"headers": {"Authorization": f"Bearer {PASSWORD}"}})] * 30)
    assert statuses(burst) == {200: 30}
    assert len(calls) == 1


def test_forty_wrong_api_keys_at_once_for_one_key_id_run_scrypt_five_times(
        served, tmp_path, monkeypatch):
    store = KeyStore(tmp_path)
    bob = store.add("bob")
    app = InProcessApp(served, tmp_path, auth=Auth(keys=store))
    calls: list[int] = []
    real = keys_module._hash
    monkeypatch.setattr(keys_module, "_hash",
                        lambda secret, salt: calls.append(1) or real(secret, salt))
    guesses = at_once(app, [("10.9.0.66", "GET", "/v1/models",
                             {"headers": {"Authorization": f"Bearer {bob[:-4]}{i:04d}"}})
                            for i in range(40)])
    assert statuses(guesses) == {401: 40}
    assert len(calls) == keys_module.MAX_FAILURES  # the rest refused without scrypt
    # bob's own key, from his own address, all at once and not yet verified
    before = len(calls)
    own = at_once(app, [("10.9.0.7", "GET", "/v1/models",
                         {"headers": {"Authorization": f"Bearer {bob}"}})] * 30)
    assert statuses(own) == {200: 30}
    assert len(calls) == before + 1


def test_the_failure_map_stays_bounded_after_many_addresses(served, tmp_path, quick_waits,
                                                           monkeypatch):
    monkeypatch.setattr(admin_rule, "MAX_TRACKED", 32, raising=False)
    # a cheap hash for the password, so three hundred addresses cost no scrypt each
    monkeypatch.setattr(admin_password, "_hash", lambda text, salt: (text + salt.hex()
                                                                     ).encode())
    app = InProcessApp(served, tmp_path)
    AdminPassword(tmp_path).set(PASSWORD)
    gate = app.app.state.tandem.admin
    first = "172.16.0.1"
    locked = [at_once(app, [(first, "POST", LOGIN, {"json": {"password": f"guess {i}"}})])[0]
              for i in range(admin_rule.MAX_FAILURES + 1)]  # one by one
    assert statuses(locked) == {401: admin_rule.MAX_FAILURES, 429: 1}
    hosts = [f"172.16.{1 + n // 200}.{1 + n % 200}" for n in range(300)]
    for chunk in (hosts[start:start + 50] for start in range(0, len(hosts), 50)):
        answers = at_once(app, [(host, "POST", LOGIN, {"json": {"password": "guess"}})
                                for host in chunk])
        assert statuses(answers) == {401: len(chunk)}
    # the oldest address was forgotten to keep the bound; the newest is remembered (its
    # one failure counts towards its lockout)
    assert at_once(app, [(first, "POST", LOGIN, {"json": {"password": "again"}})]
                   )[0].status_code == 401
    assert len(gate.attempts) <= 32
    newest = at_once(app, [(hosts[-1], "POST", LOGIN, {"json": {"password": f"more {i}"}})
                           for i in range(admin_rule.MAX_FAILURES)])
    assert statuses(newest) == {401: admin_rule.MAX_FAILURES - 1, 429: 1}
    assert len(gate.attempts) <= 32


def session_of(app: InProcessApp, host: str, headers: dict | None = None) -> httpx.Response:
    return at_once(app, [(host, "GET", SESSION, {"headers": headers or {}})])[0]


SIGN_IN_ONLY = {"password_set", "signed_in", "csrf", "allowed", "reason"}


def test_the_session_route_tells_a_caller_without_credentials_only_to_sign_in(
        served, tmp_path):
    app = InProcessApp(served, tmp_path)
    # no password: this machine is the admin and sees the user and profile; others not
    local = session_of(app, "127.0.0.1").json()
    assert local["allowed"] and local["user"] == "tester" and local["profile"]
    for host in ("192.168.9.1", "10.0.0.2"):
        remote = session_of(app, host)
        assert remote.status_code == 200
        assert set(remote.json()) == SIGN_IN_ONLY and not remote.json()["allowed"]
        assert "tester" not in remote.text
    # a password set: nobody without it, this machine included, learns more than "sign in"
    AdminPassword(tmp_path).set(PASSWORD)
    for host in ("127.0.0.1", "192.168.9.1"):
        for headers in ({}, {"Authorization": "Bearer not it"}, {"Cookie": "tandem_admin=x"}):
            answer = session_of(app, host, headers)
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"password_set": True, "signed_in": False, "csrf": None,
                                     "allowed": False, "reason": answer.json()["reason"]}
            assert "tester" not in answer.text and "tiny" not in answer.text
    bearer = session_of(app, "192.168.9.1", {"Authorization": f"Bearer {PASSWORD}"}).json()
    assert bearer["allowed"] and bearer["user"] == "tester"
    signed = at_once(app, [("192.168.9.2", "POST", LOGIN, {"json": {"password": PASSWORD}})])[0]
    cookie = {"Cookie": signed.headers["set-cookie"].split(";", 1)[0]}
    state = session_of(app, "192.168.9.2", cookie).json()
    assert state["signed_in"] and state["allowed"] and state["csrf"] == signed.json()["csrf"]


def test_on_a_server_with_keys_the_session_route_wants_the_engine_users_key(served,
                                                                             tmp_path):
    """Loopback without a password is the admin only with the engine user's key, as on the
    other admin routes: without a key, or with another user's, nothing is said."""
    store = KeyStore(tmp_path)
    mallory = store.add("mallory")
    app = InProcessApp(served, tmp_path, auth=Auth(api_key="engine-key", keys=store))
    keyless = session_of(app, "127.0.0.1")
    assert keyless.status_code == 401 and "tester" not in keyless.text
    other = session_of(app, "127.0.0.1", {"Authorization": f"Bearer {mallory}"})
    assert set(other.json()) == SIGN_IN_ONLY and not other.json()["allowed"]
    engine = session_of(app, "127.0.0.1", {"Authorization": "Bearer engine-key"}).json()
    assert engine["allowed"] and engine["user"] == "tester"
    AdminPassword(tmp_path).set(PASSWORD)  # then the password, with or without a key
    for headers in ({}, {"Authorization": "Bearer engine-key"}):
        answer = session_of(app, "127.0.0.1", headers).json()
        assert set(answer) == SIGN_IN_ONLY and answer["password_set"]
        assert not answer["allowed"] and not answer["signed_in"]


# -- the admin routes driven at random ------------------------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8)
GUESS = st.text(min_size=1, max_size=24).filter(lambda text: text != PASSWORD)
# a bearer is a header's value: printable ASCII, no spaces (the check strips them)
TOKEN = st.text(string.ascii_letters + string.digits + string.punctuation, min_size=1,
                max_size=24)
HUGE = st.integers(1025, 70_000).map(lambda n: "x" * n)
WRONG = st.one_of(st.tuples(st.just("guess"), GUESS),  # a wrong login
                  st.tuples(st.just("bearer"), TOKEN))  # a wrong bearer on an admin route
ACTION = st.one_of(
    WRONG, WRONG, WRONG, WRONG,  # about half the actions are guesses
    st.tuples(st.just("login"), st.just(PASSWORD)),
    st.tuples(st.just("logout"), st.none() | st.just({}) | JSON),
    st.tuples(st.just("body"), JSON),  # any JSON as a login body
    st.tuples(st.just("huge"), HUGE),  # a password past the field's bound
    st.tuples(st.just("session"), st.none()),
    st.tuples(st.just("write"), TOKEN),  # a write with some CSRF token
)
HOSTS = itertools.count()


def request_for(action: tuple, cookie: dict) -> tuple[str, str, dict]:
    kind, value = action
    if kind in ("guess", "login", "huge"):
        return "POST", LOGIN, {"json": {"password": value}}
    if kind == "bearer":
        return "GET", NOTES, {"headers": {"Authorization": f"Bearer {value}"}}
    if kind == "logout":
        return "POST", LOGOUT, {"headers": cookie, **({} if value is None else {"json": value})}
    if kind == "body":
        return "POST", LOGIN, {"json": value}
    if kind == "session":
        return "GET", SESSION, {"headers": cookie}
    return "PUT", "/v1/conductor/memory/settings", {"headers": {**cookie,
                                                                "X-CSRF-Token": value},
                                                    "json": {}}


@pytest.fixture(scope="module")
def guarded(served, tmp_path_factory):
    home = tmp_path_factory.mktemp("admin-fuzz")
    app = InProcessApp(served, home)
    AdminPassword(home).set(PASSWORD)
    return app


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(st.lists(ACTION, min_size=1, max_size=40), min_size=1, max_size=4),
       hosts=st.integers(1, 2))
@example(batches=[[("guess", f"guess {i}") for i in range(30)]], hosts=1)  # all at once
def test_the_admin_routes_at_random_answer_4xx_with_a_reason_and_the_lockout_holds(
        guarded, monkeypatch, batches, hosts):
    """Batches of actions sent at once, the batches one after another, from one or two
    fresh addresses: every answer is a 2xx or a 4xx with a JSON reason, never a 5xx; an
    address gets at most MAX_FAILURES different wrong passwords checked (401), and once it
    has had them, its every later password, the right one too, is a 429."""
    monkeypatch.setattr(admin_rule, "MAX_DELAY_S", 0.02)
    addresses = [f"10.{200 + n // 60000}.{n // 250 % 240}.{1 + n % 250}"
                 for n in (next(HOSTS) for _ in range(hosts))]
    cookies = {address: {} for address in addresses}
    wrong = {address: set() for address in addresses}
    for batch in batches:
        locked = {a: len(wrong[a]) >= admin_rule.MAX_FAILURES for a in addresses}
        sent = [(addresses[i % hosts], action) for i, action in enumerate(batch)]
        answers = at_once(guarded, [(address, *request_for(action, cookies[address]))
                                    for address, action in sent])
        for (address, (kind, value)), answer in zip(sent, answers, strict=True):
            what = f"{kind} {str(value)[:60]!r} -> {answer.status_code} {answer.text[:200]}"
            assert 200 <= answer.status_code < 500, what
            body = answer.json()
            if answer.status_code >= 400:
                assert body["error"]["message"], what
            if kind in ("guess", "bearer") and answer.status_code == 401:
                wrong[address].add(value)
            if kind in ("guess", "bearer", "login") and locked[address]:
                assert answer.status_code == 429, what
            if kind == "login" and answer.status_code == 200:
                cookies[address] = {"Cookie": answer.headers["set-cookie"].split(";", 1)[0]}
            if kind == "logout" and answer.status_code == 200:
                cookies[address] = {}
        for address in addresses:
            assert len(wrong[address]) <= admin_rule.MAX_FAILURES, wrong[address]
