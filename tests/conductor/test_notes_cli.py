"""``tandem notes ...`` through an argparse parser built like the real one."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from conductor.notes import NoteStore
from server.cli import notes as notes_cli


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tandem")
    commands = parser.add_subparsers(dest="command", required=True)
    notes_cli.register(commands)
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "tandem"


@pytest.fixture
def cli_store(home: Path) -> NoteStore:
    return NoteStore(home / "memory", "carol")


def opts(home: Path) -> list[str]:
    return ["--user", "carol", "--home", str(home)]


def test_list_shows_live_notes(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    note = cli_store.add(title="Prefers tea", kind="reference", scope="user").note
    assert note is not None
    assert run(["notes", "list", *opts(home)]) == 0
    out = capsys.readouterr().out
    assert note.id in out and "Prefers tea" in out and "provisional" in out


def test_list_json_and_filters(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_store.add(title="Prefers tea", kind="reference", scope="user")
    cli_store.add(title="Use uv", kind="gotcha", scope="project", project="/w/app")
    assert run(["notes", "list", *opts(home), "--scope", "project", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["title"] for d in data] == ["Use uv"]
    assert data[0]["usage"]["uses_7d"] == 0


def test_show_prints_the_note_file(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    note = cli_store.add(
        title="Prefers tea", body="Green, no sugar.", kind="reference", scope="user"
    ).note
    assert note is not None
    assert run(["notes", "show", note.id, *opts(home)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("---\n") and "Green, no sugar." in out


def test_search_prints_scores(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    note = cli_store.add(title="Prefers green tea", kind="reference", scope="user").note
    assert note is not None
    assert run(["notes", "search", "green", "tea", *opts(home)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[0]
    assert float(line.split()[0]) > 0 and note.id in line


def test_ratify_and_archive(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    note = cli_store.add(title="Prefers tea", kind="reference", scope="user").note
    assert note is not None
    assert run(["notes", "ratify", note.id, *opts(home)]) == 0
    assert cli_store.get(note.id).status == "ratified"  # type: ignore[union-attr]
    assert run(["notes", "archive", note.id, "--reason", "moved on", *opts(home)]) == 0
    archived = cli_store.get(note.id)
    assert archived is not None and archived.archived
    assert archived.changelog[-1]["source"] == "cli"


def test_delete_one_and_all(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    a = cli_store.add(title="a", kind="gotcha", scope="user").note
    cli_store.add(title="b", kind="gotcha", scope="user")
    assert a is not None
    assert run(["notes", "delete", a.id, *opts(home)]) == 0
    assert cli_store.get(a.id) is None
    assert run(["notes", "delete", "--all", *opts(home)]) == 2
    assert "--yes" in capsys.readouterr().err
    assert len(cli_store.list()) == 1
    assert run(["notes", "delete", "--all", "--yes", *opts(home)]) == 0
    assert cli_store.list() == []


def test_export_writes_a_zip_of_the_users_tree(
    home: Path, cli_store: NoteStore, tmp_path: Path
) -> None:
    note = cli_store.add(title="Prefers tea", kind="reference", scope="user").note
    assert note is not None
    out = tmp_path / "out" / "notes.zip"
    assert run(["notes", "export", "--out", str(out), *opts(home)]) == 0
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
    assert f"carol/user/reference-prefers-tea--{note.id}.md" in names
    assert out.stat().st_mode & 0o777 == 0o600


def nightly_runs(store: NoteStore) -> list[str]:
    """The users of the nightly runs in the memory root's journal, in order."""
    return [e["user"] for e in store.journal.entries() if e["op"] == "nightly"]


def test_nightly_by_hand_runs_for_the_one_user(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_store.add(title="Prefers tea", kind="reference", scope="user")
    dave = cli_store.for_user("dave")
    dave.add(title="Prefers coffee", kind="reference", scope="user")
    assert run(["notes", "nightly", *opts(home)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "carol: 1 live notes, 0 old archives deleted, 0 marked stale, 0 leftovers removed"
    ]
    assert "Prefers tea" in cli_store.layout.index_md.read_text(encoding="utf-8")
    assert not dave.layout.index_md.exists()
    assert nightly_runs(cli_store) == ["carol"]


def test_nightly_all_users_runs_for_every_user_under_the_home(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each user's INDEX.md is written, their crash leftovers cleared and the run
    journaled; no ``--user`` is needed."""
    stores = {"carol": cli_store, "dave": cli_store.for_user("dave")}
    leftovers: dict[str, Path] = {}
    for user, store in stores.items():
        for i in range(1 if user == "carol" else 2):
            store.add(title=f"{user.title()} keeps record {i}", body=f"Entry {i} of {user}.",
                      kind="reference", scope="user")
        folder = store.layout.scope_dir("user", None)
        leftovers[user] = folder / f".reference-half--{user}.md.k2j3.tmp"
        leftovers[user].write_text("half a note")
        two_hours_ago = time.time() - 2 * 3600
        os.utime(leftovers[user], (two_hours_ago, two_hours_ago))
        assert not store.layout.index_md.exists()
    assert run(["notes", "nightly", "--all-users", "--home", str(home)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "carol: 1 live notes, 0 old archives deleted, 0 marked stale, 1 leftovers removed",
        "dave: 2 live notes, 0 old archives deleted, 0 marked stale, 1 leftovers removed",
    ]
    for user, store in stores.items():
        index = store.layout.index_md.read_text(encoding="utf-8")
        titles = [n.title for n in store.list()]
        assert titles and all(title in index for title in titles)
        other = "dave" if user == "carol" else "carol"
        assert other.title() not in index
        assert not leftovers[user].exists()
    assert nightly_runs(cli_store) == ["carol", "dave"]


def test_unknown_id_is_a_clear_error_not_a_traceback(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (["show", "nope"], ["ratify", "nope"], ["archive", "nope"], ["delete", "nope"]):
        assert run(["notes", *command, *opts(home)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("tandem notes:") and "Traceback" not in err
        assert "nope" in err or "not_found" in err


def test_home_inside_a_git_tree_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    code = run(["notes", "list", "--home", str(tmp_path / "repo" / "home")])
    assert code == 1
    assert "git work tree" in capsys.readouterr().err


def test_without_flags_the_notes_are_the_os_users_under_tandem_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--home`` defaults to ``$TANDEM_HOME`` and ``--user`` to the OS user name: list
    shows that user's note with its whole title, show prints its file, title and body."""
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "envhome"))
    monkeypatch.delenv("TANDEM_USER", raising=False)
    monkeypatch.setattr(getpass, "getuser", lambda: "dave")
    root = tmp_path / "envhome" / "memory"
    note = NoteStore(root, "dave").add(
        title="Deploys go out on Thursdays", body="Never on a Friday afternoon.",
        kind="gotcha", scope="user",
    ).note
    assert note is not None
    NoteStore(root, "erin").add(title="Erin takes lunch at noon", kind="gotcha", scope="user")
    assert run(["notes", "list"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{note.id}  provisional ")
    assert line.endswith("  Deploys go out on Thursdays")
    assert run(["notes", "show", note.id]) == 0
    shown = capsys.readouterr().out
    path = root / "notes" / "dave" / "user" / f"gotcha-deploys-go-out-on-thursdays--{note.id}.md"
    assert shown == path.read_text(encoding="utf-8")
    assert "\ntitle: Deploys go out on Thursdays\n" in shown
    assert shown.endswith("\n---\nNever on a Friday afternoon.\n")


def test_odd_os_user_name_is_the_engines_own_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TANDEM_USER", raising=False)
    monkeypatch.setattr(getpass, "getuser", lambda: "we ird/name")
    assert notes_cli.default_user() == "we-ird-name"  # as `tandem serve` names its user


def test_bad_user_name_is_a_clear_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["notes", "list", "--user", "a\x07b", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem notes: ") and "control character" in err


def test_split_restores_a_merged_revision_as_a_note_of_its_own(
    home: Path, cli_store: NoteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    first = cli_store.add(title="Staging database port is 5433", kind="registry",
                          body="The staging database listens on port 5433.", scope="user")
    merged = cli_store.add(title="Port 5433 for the staging database", kind="registry",
                           body="Use port 5433 when connecting to the staging database.",
                           scope="user")
    assert merged.revised_existing and merged.note.id == first.note.id
    assert run(["notes", "split", first.note.id, "1", *opts(home)]) == 0
    assert capsys.readouterr().out.startswith("split: ")
    notes = {n.title: n for n in cli_store.list()}
    assert set(notes) == {"Staging database port is 5433", "Port 5433 for the staging database"}
    restored = notes["Staging database port is 5433"]
    assert restored.id != first.note.id and restored.changelog[-1]["what"] == "split"
    assert run(["notes", "split", first.note.id, "7", *opts(home)]) == 1  # no such revision
    assert "no revision 7" in capsys.readouterr().err
