"""API keys on the real app and engine: who may talk to the engine, and whose memory it is."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from server.access.auth import Auth, exposure_problem
from server.access.keys import HAS_KEYS_STAT_S, KeysError, KeyStore
from server.cli.main import main
from tests.inprocess import InProcessApp

BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n\n'
         "{title} is what the user keeps private.\n</tandem_memory>")
ENGINE_KEY = "engine-key-for-tests"


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keys(tmp_path) -> KeyStore:
    return KeyStore(tmp_path)


@pytest.fixture
def app(served, tmp_path, keys) -> InProcessApp:
    return InProcessApp(served, tmp_path, auth=Auth(api_key=ENGINE_KEY, keys=keys))


def chat_status(app: InProcessApp, headers: dict) -> httpx.Response:
    return app.request("POST", "/v1/chat/completions", headers=headers, json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "script": "Hi."})


def test_every_v1_route_needs_a_valid_key(app, keys):
    alice = keys.add("alice")
    for headers in ({}, bearer("wrong"), {"Authorization": alice}):  # none, wrong, no Bearer
        response = chat_status(app, headers)
        assert response.status_code == 401, headers
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert app.request("GET", "/v1/models", headers=headers).status_code == 401
    assert chat_status(app, bearer(ENGINE_KEY)).status_code == 200
    assert chat_status(app, bearer(alice)).status_code == 200
    assert app.request("GET", "/healthz").status_code == 200
    assert app.request("GET", "/readyz").status_code == 200


def test_a_revoked_key_stops_at_once_even_revoked_by_another_process(app, keys, tmp_path):
    bob = keys.add("bob")
    assert chat_status(app, bearer(bob)).status_code == 200
    KeyStore(tmp_path).revoke("bob")  # what `tandem keys revoke bob` does, elsewhere
    assert chat_status(app, bearer(bob)).status_code == 401


def test_metrics_are_open_on_loopback_and_behind_the_key_elsewhere(served, tmp_path, keys):
    auth = Auth(api_key=ENGINE_KEY, keys=keys)
    local = InProcessApp(served, tmp_path, auth=auth)
    remote = InProcessApp(served, tmp_path, auth=auth, client_host="192.0.2.7")
    assert local.request("GET", "/metrics").status_code == 200
    assert remote.request("GET", "/metrics").status_code == 401
    assert remote.request("GET", "/metrics", headers=bearer(ENGINE_KEY)).status_code == 200


def test_two_named_keys_are_two_users_who_never_see_each_others_notes(app, keys):
    alice, bob = keys.add("alice"), keys.add("bob")
    content, _, response = app.chat([{"role": "user", "content": "Remember my locker code."}],
                                    "Noted. " + BLOCK.format(title="alice locker code"),
                                    headers=bearer(alice))
    assert content.endswith("› remembered: alice locker code")
    (note,) = app.memory.store("alice").list()
    alice_token = response.headers["x-tandem-memory-token"]
    # Bob's chat: his shared context lists none of alice's notes.
    app.chat([{"role": "user", "content": "What is my locker code?"}], "No idea.",
             headers={**bearer(bob), "X-Tandem-Session": "bob-1"})
    record = app.memory.latest_record("bob", "bob-1")
    tokenizer = app.app.state.tandem.engine.tokenizer
    assert "alice locker code" not in tokenizer.decode(list(record.ids))
    assert app.memory.store("bob").list() == []
    # Bob's own token: his search finds nothing of alice's, her note id is not his.
    _, _, bob_chat = app.chat([{"role": "user", "content": "hello"}], "Hi.",
                              headers={**bearer(bob), "X-Tandem-Session": "bob-2"})
    bob_token = {"X-Tandem-Memory-Token": bob_chat.headers["x-tandem-memory-token"],
                 **bearer(bob)}
    found = app.request("GET", "/v1/memory/search", params={"q": "locker code"},
                        headers=bob_token)
    assert found.status_code == 200 and found.json()["data"] == []
    assert app.request("GET", f"/v1/memory/{note.id}", headers=bob_token).status_code == 404
    # Alice's token with bob's key: refused; with hers: her note.
    stolen = {"X-Tandem-Memory-Token": alice_token, **bearer(bob)}
    assert app.request("GET", f"/v1/memory/{note.id}", headers=stolen).status_code == 403
    own = {"X-Tandem-Memory-Token": alice_token, **bearer(alice)}
    assert app.request("GET", f"/v1/memory/{note.id}", headers=own).json()["title"] == (
        "alice locker code")


def test_the_engine_key_is_the_engines_own_user(app):
    app.chat([{"role": "user", "content": "Remember the build host."}],
             "Ok. " + BLOCK.format(title="engine build host"), headers=bearer(ENGINE_KEY))
    assert [n.title for n in app.memory.store("tester").list()] == ["engine build host"]


def test_the_openai_sdk_works_with_api_key(app, served, keys):
    key = keys.add("sdk-user")

    async def ask(api_key: str):
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        client = openai.AsyncOpenAI(base_url="http://localhost/v1", api_key=api_key, max_retries=0,
                                    http_client=httpx.AsyncClient(transport=transport))
        return await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}],
            extra_body={"script": "Hello from the SDK."})

    completion = served.run(ask(key))
    assert completion.choices[0].message.content == "Hello from the SDK."
    with pytest.raises(openai.AuthenticationError):
        served.run(ask("tdm-00000000-not-a-key"))


def test_keys_are_stored_as_hashes_only(keys, tmp_path):
    key = keys.add("carol")
    stored = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    secret = key.split("-", 2)[2]
    assert secret not in stored and key not in stored
    assert "carol" in stored and oct((tmp_path / "keys.json").stat().st_mode)[-3:] == "600"
    assert keys.label_for(key) == "carol"
    assert keys.label_for(key[:-1] + ("A" if key[-1] != "A" else "B")) is None


def test_has_keys_stats_the_key_file_at_most_once_a_second(keys, monkeypatch):
    """has_keys runs on the event loop for every request (issue 58): one stat a second."""
    now = [1000.0]
    keys.clock = lambda: now[0]
    statted = []
    real_stat = Path.stat

    def counted(self, *args, **kwargs):
        if self == keys.path:
            statted.append(now[0])
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", counted)
    keys.add("frank")
    for _ in range(100):
        assert keys.has_keys()
        now[0] += 0.005  # 100 requests in half a second
    assert len(statted) == 1, statted
    now[0] += HAS_KEYS_STAT_S
    assert keys.has_keys() and len(statted) == 2


def test_a_key_file_changed_by_another_process_is_seen_within_a_second(keys, tmp_path):
    now = [1000.0]
    keys.clock = lambda: now[0]
    assert not keys.has_keys()
    other = KeyStore(tmp_path)  # what `tandem keys add` does, elsewhere
    key = other.add("gina")
    assert not keys.has_keys()  # the loop's answer stands for a second...
    now[0] += HAS_KEYS_STAT_S
    assert keys.has_keys()  # ...then the file's change is seen
    assert keys.label_for(key) == "gina"
    other.revoke("gina")
    assert keys.label_for(key) is None  # a key's check stats the file: revoked at once
    keys.add("hana")  # this object's own write: seen at once, whatever the clock
    assert keys.has_keys()
    other.revoke("hana")
    now[0] += HAS_KEYS_STAT_S
    assert not keys.has_keys()


def test_keys_refuse_a_bad_label_a_duplicate_and_an_unknown_revoke(keys):
    keys.add("dave")
    with pytest.raises(KeysError):
        keys.add("dave")
    with pytest.raises(KeysError, match="control character"):
        keys.add("no\nnewlines")  # any name a request may give, but none that is no one's
    with pytest.raises(KeysError):
        keys.revoke("nobody")


def test_keys_command_adds_lists_and_revokes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    assert main(["keys", "add", "erin"]) == 0
    key = capsys.readouterr().out.strip()
    assert KeyStore(tmp_path).label_for(key) == "erin"
    assert main(["keys", "list"]) == 0 and capsys.readouterr().out.startswith("erin\t")
    assert main(["keys", "revoke", "erin"]) == 0
    assert KeyStore(tmp_path).label_for(key) is None
    assert main(["keys", "revoke", "erin"]) == 2
    assert "no key labelled" in capsys.readouterr().err


def test_a_non_loopback_host_needs_a_key_or_an_explicit_insecure_flag(tmp_path):
    keys = KeyStore(tmp_path)
    no_keys = Auth(keys=keys)
    assert "--api-key" in exposure_problem("0.0.0.0", no_keys, insecure=False)
    assert exposure_problem("0.0.0.0", no_keys, insecure=True) is None
    assert exposure_problem("127.0.0.1", no_keys, insecure=False) is None
    assert exposure_problem("::1", no_keys, insecure=False) is None
    assert exposure_problem("0.0.0.0", Auth(api_key="k", keys=keys), insecure=False) is None
    keys.add("frank")
    assert exposure_problem("0.0.0.0", Auth(keys=keys), insecure=False) is None


def test_serve_refuses_to_start_on_a_lan_without_a_key(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    monkeypatch.delenv("TANDEM_API_KEY", raising=False)
    assert main(["serve", "--profile", "tiny", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--api-key" in err and "tandem keys add" in err and "--insecure-no-auth" in err


def test_a_wrong_secret_never_holds_up_a_verified_key(tmp_path, monkeypatch):
    """scrypt runs outside the store's lock: a guess in flight (held here inside scrypt)
    does not make a key already verified wait."""
    import threading

    from server.access import keys as keys_module

    store = KeyStore(tmp_path)
    alice = store.add("alice")
    assert store.label_for(alice) == "alice"  # verified once: remembered
    inside, release = threading.Event(), threading.Event()
    real_hash = keys_module._hash

    def slow_hash(secret: str, salt: bytes) -> bytes:
        inside.set()
        release.wait(10)
        return real_hash(secret, salt)

    monkeypatch.setattr(keys_module, "_hash", slow_hash)
    guess = threading.Thread(target=store.label_for, args=(alice[:-4] + "zzzz",))
    guess.start()
    assert inside.wait(10)
    answered: list = []
    check = threading.Thread(target=lambda: answered.append(store.label_for(alice)))
    check.start()
    check.join(2)  # with the lock held through scrypt it would wait for the guess
    assert answered == ["alice"]
    release.set()
    guess.join(10)


def test_repeated_wrong_secrets_for_a_key_id_are_refused_without_scrypt(tmp_path,
                                                                       monkeypatch):
    from server.access import keys as keys_module

    store = KeyStore(tmp_path)
    bob = store.add("bob")
    assert store.label_for(bob) == "bob"
    calls: list[int] = []
    real_hash = keys_module._hash
    monkeypatch.setattr(keys_module, "_hash",
                        lambda secret, salt: calls.append(1) or real_hash(secret, salt))
    wrong = bob[:-4] + "zzzz"
    for _ in range(keys_module.MAX_FAILURES + 3):
        assert store.label_for(wrong, "10.0.0.66") is None
    assert len(calls) == keys_module.MAX_FAILURES  # the rest refused at once
    assert store.label_for(bob) == "bob"  # the verified key keeps working
    # a guesser elsewhere locks out nobody else: bob's key, not yet verified after a
    # change of the file, checks from his own address
    store.add("carol")
    before = len(calls)
    assert store.label_for(bob, "10.0.0.7") == "bob" and len(calls) == before + 1
    assert store.label_for(wrong, "10.0.0.66") is None and len(calls) == before + 1
    now = store.clock()
    store.clock = lambda: now + keys_module.FAILURE_WINDOW_S + 1  # the window has passed
    assert store.label_for(wrong, "10.0.0.66") is None
    assert len(calls) == before + 2  # checked again once the window has passed
