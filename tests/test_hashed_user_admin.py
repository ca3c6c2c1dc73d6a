"""A user whose name files under a hashed folder (josé: `jose--<hash>`) is one user on the
Memory screen: the delete takes their name typed back (or the folder, as before), never
another user's, and the tree route names each folder's user where the server knows the
name (the engine's own user, a key's label), so the screen's picker shows one entry per
folder. On the real app and engine (scripted tiny model)."""

from __future__ import annotations

import dataclasses

import pytest

from conductor.memory.settings import MemorySettings
from conductor.memory.types import user_folder
from server.access.keys import KeyStore
from tests.inprocess import InProcessApp

JOSE = "josé"
JOSE_NFD = "JOSE\u0301"  # the same name, decomposed and upper-cased
DELETE = "/v1/conductor/memory/delete-user"
TREE = "/v1/conductor/memory/tree"


def app_for(served, home, user_name: str) -> InProcessApp:
    """An app over the session's engine whose own user is `user_name`."""
    from server.app import create_app

    engine = served.app.state.tandem.engine
    profile = dataclasses.replace(engine.profile, scripted=True)
    app = create_app(profile, home, engine=engine,
                     memory_settings=MemorySettings(user_name=user_name))
    return InProcessApp.over(served, app)


def note_for(app: InProcessApp, name: str, title: str) -> str:
    result = app.memory.store(user_folder(name)).add(
        title=title, body=f"{title}, kept.", kind="reference", scope="user",
        source="route", has_user_message=True)
    assert result.ok, result.reason
    return result.note.id


def refused(response) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "confirmation_mismatch" and error["param"] == "confirm"


@pytest.mark.parametrize("confirm", [JOSE, " José ", JOSE_NFD, "folder"],
                         ids=["name", "case-spaces", "decomposed", "folder"])
def test_a_hashed_users_delete_takes_their_name_typed_back(served, tmp_path, confirm):
    app = app_for(served, tmp_path, "tester")
    folder = user_folder(JOSE)
    note = note_for(app, JOSE, "Jose's locker code")
    typed = folder if confirm == "folder" else confirm
    done = app.request("POST", DELETE, json={"user": JOSE, "confirm": typed})
    assert done.status_code == 200, done.text
    assert done.json()["user"] == folder and done.json()["notes_deleted"] == 1
    assert app.memory.store(folder).get(note) is None


def test_the_engine_users_delete_takes_their_name_as_the_screen_sends_it(served, tmp_path):
    app = app_for(served, tmp_path, JOSE)
    folder = user_folder(JOSE)
    note = note_for(app, JOSE, "Jose's bike lock")
    done = app.request("POST", DELETE, json={"user": folder, "confirm": JOSE})  # the picker's
    assert done.status_code == 200, done.text
    assert app.memory.store(folder).get(note) is None


def test_a_confirm_that_names_someone_else_or_no_one_is_refused(served, tmp_path):
    app = app_for(served, tmp_path, JOSE)
    note = note_for(app, JOSE, "Jose's passport")
    note_for(app, "o'brien", "O'Brien's passport")
    for typed in ("o'brien", user_folder("o'brien"), "jose", "tester", "", "   ",
                  "jos\x01é", "x" * 129):
        refused(app.request("POST", DELETE, json={"user": JOSE, "confirm": typed}))
    assert app.memory.store(user_folder(JOSE)).get(note) is not None


def test_the_tree_names_each_folders_user_once_where_the_server_knows_it(served, tmp_path):
    keys = KeyStore(tmp_path)
    keys.add("O'Brien")  # a key's label is its user's name
    engine_key = keys.add(JOSE)  # with keys, the admin routes want the engine user's
    app = app_for(served, tmp_path, JOSE)
    note_for(app, JOSE, "Jose's garden")
    note_for(app, "o'brien", "O'Brien's garden")
    note_for(app, "tester", "Tester's garden")
    note_for(app, "山田", "Yamada's garden")
    tree = app.request("GET", TREE, params={"user": JOSE},
                       headers={"Authorization": f"Bearer {engine_key}"})
    assert tree.status_code == 200, tree.text
    answer = tree.json()
    folders = sorted(user_folder(n) for n in (JOSE, "o'brien", "tester", "山田"))
    assert answer["user"] == user_folder(JOSE) and answer["users"] == folders  # as before
    named = {entry["folder"]: entry["name"] for entry in answer["user_entries"]}
    assert len(answer["user_entries"]) == len(named) == 4  # one entry per folder
    assert named == {user_folder(JOSE): JOSE, user_folder("o'brien"): "O'Brien",
                     "tester": "tester", user_folder("山田"): user_folder("山田")}


def test_the_tree_lists_the_engine_user_before_they_have_a_note(served, tmp_path):
    app = app_for(served, tmp_path, JOSE)
    answer = app.request("GET", TREE).json()
    assert answer["user_entries"] == [{"folder": user_folder(JOSE), "name": JOSE}]
