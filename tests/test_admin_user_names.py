"""Any name a request may give (josé, o'brien, 山田) is a user on the admin routes and in
`tandem keys` too: `?user=` and the engine's own user are mapped to their folder by
`user_folder`, as the chat routes map a key's label and a relayed X-Tandem-User, so a
server started as `tandem serve --user josé` answers its Memory screen, and a key labelled
josé reads and writes the folder `tandem notes --user josé` does. A name that is no one's
is a 400 `invalid_user` saying why. On the real app and engine (scripted tiny model)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from conductor.memory.settings import MemorySettings
from conductor.memory.types import user_folder
from server.access.auth import Auth
from server.access.keys import KeysError, KeyStore
from server.cli import notes as notes_cli
from server.cli.main import main
from tests.inprocess import InProcessApp

JOSE = "josé"
JOSE_NFD = "JOSE\u0301"  # the same name, decomposed and upper-cased: one user
BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n\n'
         "{title} is what the user keeps.\n</tandem_memory>")
BAD = "bad\x01name"  # a control character: no one's name
ENGINE_KEY = "engine-key-for-tests"


def app_for(served, home, user_name: str, auth=None,
            trusted_proxies: frozenset[str] = frozenset()) -> InProcessApp:
    """An app over the session's engine whose own user is `user_name` (`tandem serve
    --user <name>`)."""
    from server.app import create_app

    engine = served.app.state.tandem.engine
    profile = dataclasses.replace(engine.profile, scripted=True)
    settings = MemorySettings(user_name=user_name, trusted_proxies=trusted_proxies)
    app = create_app(profile, home, engine=engine, memory_settings=settings, auth=auth)
    return InProcessApp.over(served, app)


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def working_memory(app: InProcessApp, name: str, text: str) -> None:
    """Write `name`'s working memory in their folder, as the jobs would."""
    path = app.memory.layers(user_folder(name)).files.working_memory
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def read_working(app: InProcessApp, **params) -> str:
    response = app.request("GET", "/v1/conductor/memory/layers/working/WORKING_MEMORY.md",
                           params=params)
    assert response.status_code == 200, response.text
    return response.json()["text"]


def test_with_serve_user_jose_the_admin_routes_answer_for_josés_folder(served, tmp_path):
    app = app_for(served, tmp_path, JOSE)
    folder = user_folder(JOSE)
    working_memory(app, JOSE, "# Working memory\n\njosé's own\n")
    listed = app.request("GET", "/v1/conductor/memory/layers")
    assert listed.status_code == 200, listed.text
    assert listed.json()["user"] == folder
    assert "josé's own" in read_working(app)
    assert "josé's own" in read_working(app, user=JOSE)  # ?user= named as the engine's
    jobs = app.request("GET", "/v1/conductor/jobs")
    assert jobs.status_code == 200 and jobs.json()["user"] == folder, jobs.text
    runs = app.request("GET", "/v1/conductor/jobs/runs", params={"user": JOSE})
    assert runs.status_code == 200, runs.text
    tree = app.request("GET", "/v1/conductor/memory/tree")  # admin.user(): the notes side
    assert tree.status_code == 200 and tree.json()["user"] == folder, tree.text
    found = app.request("GET", "/v1/conductor/memory/search", params={"q": "own"})
    assert found.status_code == 200, found.text


def test_any_user_name_in_the_query_is_that_users_folder(served, tmp_path):
    app = app_for(served, tmp_path, "tester")
    for name in ("o'brien", "山田"):
        working_memory(app, name, f"# Working memory\n\n{name} only\n")
    assert "o'brien only" in read_working(app, user="O'Brien")  # one user whatever the case
    assert "山田 only" in read_working(app, user="山田")
    jobs = app.request("GET", "/v1/conductor/jobs", params={"user": "o'brien"})
    assert jobs.status_code == 200 and jobs.json()["user"] == user_folder("o'brien")
    # The screen lists the folders and sends one back as ?user=: the same user
    app.memory.store(user_folder("o'brien")).add(title="O'Brien's gate code", kind="reference",
                                                 scope="user", has_user_message=True)
    folders = app.request("GET", "/v1/conductor/memory/tree").json()["users"]
    assert user_folder("o'brien") in folders
    assert "o'brien only" in read_working(app, user=user_folder("o'brien"))


@pytest.mark.parametrize("method, path, field", [
    ("GET", "/v1/conductor/memory/layers", "query"),
    ("GET", "/v1/conductor/memory/layers/working/WORKING_MEMORY.md", "query"),
    ("GET", "/v1/conductor/memory/search", "query"),
    ("GET", "/v1/conductor/jobs", "query"),
    ("GET", "/v1/conductor/jobs/runs", "query"),
    ("GET", "/v1/conductor/memory/tree", "query"),
    ("POST", "/v1/conductor/jobs/consolidate/run", "body"),
    ("POST", "/v1/conductor/writer/run", "body"),
], ids=["layers", "layer-file", "search", "jobs", "runs", "tree", "job-run", "writer-run"])
def test_a_name_that_is_no_ones_is_a_400_saying_why(served, tmp_path, method, path, field):
    app = app_for(served, tmp_path, "tester")
    app.app.state.tandem.writer.writer.mode = "on"
    for bad in (BAD, "x" * 129):
        if field == "query":
            response = app.request(method, path, params={"user": bad, "q": "x"})
        else:
            session = {"session": "s"} if "writer" in path else {}
            response = app.request(method, path, json={"user": bad, **session})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_user" and error["param"] == "user"
        assert "control character" in error["message"] or "128" in error["message"]


def test_the_writer_runs_on_the_engine_users_folder(served, tmp_path):
    app = app_for(served, tmp_path, JOSE)
    app.app.state.tandem.writer.writer.mode = "on"
    history = [{"role": "user", "content": "The integration tests need the database."}]
    app.chat(history, "Start it first.", headers={"X-Tandem-Session": "w"})
    response = app.request("POST", "/v1/conductor/writer/run", json={
        "session": "w", "gate_script": "yes",
        "script": BLOCK.format(title="tests need the database")})
    assert response.status_code == 200, response.text
    assert response.json()["outcome"] == "wrote", response.json()
    (note,) = app.memory.store(user_folder(JOSE)).list()
    assert note.title == "tests need the database"


def test_a_key_labelled_jose_is_added_and_files_notes_where_the_relay_and_cli_do(
        served, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    monkeypatch.setenv("TANDEM_USER", "owner")
    assert main(["keys", "add", JOSE]) == 0, capsys.readouterr().err
    key = capsys.readouterr().out.strip()
    keys = KeyStore(tmp_path)
    assert keys.label_for(key) == JOSE
    app = app_for(served, tmp_path, "owner", auth=Auth(api_key=ENGINE_KEY, keys=keys),
                  trusted_proxies=frozenset({"10.9.9.9"}))
    content, _, _ = app.chat([{"role": "user", "content": "Remember my locker."}],
                             "Ok. " + BLOCK.format(title="josé locker"), headers=bearer(key))
    assert content.endswith("› remembered: josé locker")
    # A trusted proxy relaying X-Tandem-User josé: the same folder
    relay = InProcessApp.over(served, app.app, client_host="10.9.9.9")
    content, _, _ = relay.chat([{"role": "user", "content": "Remember my bike."}],
                               "Ok. " + BLOCK.format(title="josé bike"),
                               headers={**bearer(ENGINE_KEY),
                                        "X-Tandem-User": JOSE.encode()})  # UTF-8
    assert content.endswith("› remembered: josé bike")
    # `tandem notes --user josé` opens that folder too
    folder = notes_cli.user_of(JOSE)
    assert folder == user_folder(JOSE)
    assert {n.title for n in app.memory.store(folder).list()} == {"josé locker", "josé bike"}
    assert (tmp_path / "memory" / "notes" / folder).is_dir()


def test_keys_take_any_name_and_refuse_one_that_is_no_ones_saying_why(tmp_path):
    keys = KeyStore(tmp_path)
    for name in (JOSE, "o'brien", "山田", "no spaces/here"):
        assert keys.label_for(keys.add(name)) == name
    with pytest.raises(KeysError, match="exists"):
        keys.add(JOSE_NFD)  # josé again, spelled otherwise
    for bad, why in ((BAD, "control character"), ("", "empty"), ("x" * 129, "128")):
        with pytest.raises(KeysError, match=why):
            keys.add(bad)
    # The user's delete (by folder, as the admin routes resolve it) revokes josé's key
    assert keys.revoke_user(user_folder(JOSE)) == 1
    assert JOSE not in {e.label for e in keys.list()}


def test_a_label_in_the_hashed_folder_form_is_refused_in_any_case(tmp_path):
    """A label shaped like the folder user_folder files a hashed name under
    (`<slug>--<16 hex>`) would be two users at once: `?user=` and the delete's confirm take
    that form as a folder as it is (user_named), while the key files under a hash of it.
    Refused, in any case, saying why; a label that merely holds `--` is a name like any."""
    keys = KeyStore(tmp_path)
    folder = user_folder(JOSE)  # jose--<16 hex>
    for reserved in (folder, folder.upper(), "Ann--0123456789ABCDEF"):
        with pytest.raises(KeysError, match="hashed user folder"):
            keys.add(reserved)
    assert keys.list() == []
    # not a folder's form (user_named maps these as names): a hex too short, a character a
    # folder cannot hold, a leading dash
    for fine in ("ann--dev", "ann--0123456789abcde", "josé--0123456789abcdef",
                 "--0123456789abcdef"):
        assert keys.label_for(keys.add(fine)) == fine


def test_keys_command_refuses_the_engine_users_name_in_any_spelling(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    monkeypatch.setenv("TANDEM_USER", JOSE)
    assert main(["keys", "add", JOSE_NFD]) == 2
    assert "engine's own user" in capsys.readouterr().err
    assert main(["keys", "add", BAD]) == 2
    assert "control character" in capsys.readouterr().err


def test_a_key_of_the_engine_user_in_another_spelling_may_use_the_admin_routes(
        served, tmp_path):
    keys = KeyStore(tmp_path)
    key = keys.add(JOSE_NFD)
    app = app_for(served, tmp_path, JOSE, auth=Auth(keys=keys))
    response = app.request("GET", "/v1/conductor/memory/layers", headers=bearer(key))
    assert response.status_code == 200, response.text


def test_proxy_counts_users_by_folder(tmp_path, monkeypatch):
    from server.cli.proxy import users_at_start

    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    for name in ("TANDEM_API_KEY", "TANDEM_USER", "TANDEM_TRUSTED_PROXIES"):
        monkeypatch.delenv(name, raising=False)
    KeyStore(tmp_path).add(JOSE_NFD)
    args = argparse.Namespace(trusted_proxy=[], api_key="engine-key", user=JOSE)
    users = users_at_start(args)
    assert users is not None and len(users) == 1, users  # josé's key is the engine user's
    KeyStore(tmp_path).add("o'brien")
    assert len(users_at_start(args)) == 2
