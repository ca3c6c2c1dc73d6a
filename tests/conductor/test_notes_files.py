"""The files are the truth: layout, modes, atomic writes, crash leftovers, git refusal."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from notes_helpers import FakeClock, read_front

from conductor.notes import NoteStore
from conductor.notes.note_format import Note, parse, render
from conductor.storage import atomic
from conductor.storage.paths import StoreRootError, project_key


def test_notes_land_in_their_scope_folders(store: NoteStore) -> None:
    user = store.add(title="Prefers tea", kind="reference", scope="user").note
    project = store.add(
        title="Use uv", kind="gotcha", scope="project", project="/home/a/src/tandem"
    ).note
    session = store.add(
        title="Debugging the cache",
        kind="program_state",
        scope="session",
        session="sess-42",
        verify_by="2025-03-11",
    ).note
    assert user and project and session
    base = store.root / "notes" / "alice"
    assert user.path == base / "user" / f"reference-prefers-tea--{user.id}.md"
    key, path = project_key("/home/a/src/tandem")
    assert key.startswith("tandem-") and len(key) == len("tandem-") + 8
    assert project.path == base / "projects" / key / f"gotcha-use-uv--{project.id}.md"
    assert project.project_path == path
    assert session.path == base / "sessions" / "sess-42" / (
        f"program_state-debugging-the-cache--{session.id}.md"
    )


def test_two_projects_with_one_base_name_stay_apart() -> None:
    assert project_key("/a/app")[0] != project_key("/b/app")[0]


def test_note_file_has_the_frontmatter_fields(store: NoteStore, clock: FakeClock) -> None:
    note = store.add(
        title="Deploy running",
        body="Deploy 12 in progress.",
        kind="program_state",
        scope="user",
        tags="deploy, ops",
        verify_by="2025-03-11",
        source="writer",
        session="s1",
    ).note
    assert note is not None and note.path is not None
    front = read_front(note.path)
    for key in (
        "id",
        "title",
        "kind",
        "scope",
        "tags",
        "status",
        "pinned",
        "created",
        "updated",
        "revision",
        "source",
        "verify_by",
        "changelog",
    ):
        assert key in front
    assert front["tags"] == ["deploy", "ops"]
    assert front["status"] == "provisional" and front["source"] == "writer"
    assert front["changelog"][0]["by"] == "model" and front["changelog"][0]["what"] == "add"
    assert note.path.read_text().endswith("---\nDeploy 12 in progress.\n")


def test_render_and_parse_round_trip() -> None:
    note = Note(
        id="abc",
        title="Colon: quotes ' \" and # hash",
        kind="gotcha",
        scope="user",
        body="---\nA body with a fence line.\n\n- list",
        tags=["a: b", "c"],
    )
    again = parse(render(note))
    assert again == note


def test_files_are_0600_and_folders_0700(store: NoteStore) -> None:
    note = store.add(title="t", body="one", kind="gotcha", scope="project", project="/w/x").note
    assert note is not None
    store.update(note.id, body="two")
    store.archive(store.add(title="u", kind="gotcha", scope="user").note.id, "r")  # type: ignore[union-attr]
    store.record_injection([note.id], "r1")
    store.regenerate_index()
    checked_files = 0
    for dirpath, _dirs, files in os.walk(store.root):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o700, dirpath
        for name in files:
            mode = stat.S_IMODE(os.stat(Path(dirpath) / name).st_mode)
            assert mode == 0o600, (dirpath, name, oct(mode))
            checked_files += 1
    assert checked_files > 8
    for expected in (
        store.layout.index_md,
        store.layout.usage_json,
        store.layout.journal_path,
        store.layout.revision_path(note.id, 1),
    ):
        assert expected.exists()


def test_root_inside_a_git_work_tree_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    with pytest.raises(StoreRootError, match="git work tree"):
        NoteStore(repo / "sub" / "memory", "alice")
    assert not (repo / "sub").exists()


def test_root_inside_a_git_worktree_checkout_is_refused(tmp_path: Path) -> None:
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text("gitdir: /elsewhere/.git/worktrees/wt\n")
    with pytest.raises(StoreRootError):
        NoteStore(tmp_path / "wt" / "memory", "alice")


def test_root_beside_a_git_work_tree_keeps_notes_and_leaves_the_tree_alone(
    tmp_path: Path,
) -> None:
    """A root next to a repository (even one whose name starts like it) is a root like any
    other: the note is written, found and read back there, and the repository is untouched."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    root = tmp_path / "repo-notes" / "memory"
    note = NoteStore(root, "alice").add(
        title="Notes beside a repository", body="Kept out of git.", kind="reference", scope="user"
    ).note
    assert note is not None and note.path is not None
    assert note.path.is_relative_to(root / "notes" / "alice")
    assert "Kept out of git." in note.path.read_text(encoding="utf-8")
    again = NoteStore(root, "alice")
    assert [n.id for n in again.list()] == [note.id]
    assert [n.id for n, _ in again.search("repository")] == [note.id]
    assert [p.relative_to(repo) for p in repo.rglob("*")] == [Path(".git")]


def test_bad_user_name_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        NoteStore(tmp_path / "m", "../bob")


def test_write_interrupted_between_temp_file_and_rename_leaves_old_note_whole(
    store: NoteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    note = store.add(title="Keep me whole", body="the old text", kind="gotcha", scope="user").note
    assert note is not None and note.path is not None
    before = note.path.read_bytes()
    real_replace = os.replace

    def crash(src: str, dst: str) -> None:
        if str(dst) == str(note.path):
            raise OSError(5, "simulated crash before rename")
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", crash)
    result = store.update(note.id, body="the new text")
    assert (result.ok, result.reason) == (False, "io_error")
    assert note.path.read_bytes() == before
    assert not [p for p in note.path.parent.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    assert store.get(note.id).body == "the old text"  # type: ignore[union-attr]
    assert store.search("old text")[0][0].id == note.id
    retry = store.update(note.id, body="the new text")
    assert retry.ok and retry.note is not None and retry.note.revision == 2


def test_crash_between_new_file_and_unlink_keeps_the_newest_copy(store: NoteStore) -> None:
    note = store.add(title="Old title", body="v1", kind="gotcha", scope="user").note
    assert note is not None and note.path is not None
    old_copy = note.path.read_text()
    store.edit(note.id, title="New title", body="v2")
    # Put the old file back, as if the process died before unlinking it.
    note.path.write_text(old_copy)
    assert store.get(note.id).body == "v2"  # type: ignore[union-attr]
    assert len(store.list()) == 1
    store.ratify(note.id)  # any write clears the older copy
    assert not note.path.exists()


def test_unreadable_file_is_skipped_not_fatal(store: NoteStore) -> None:
    store.add(title="good", kind="gotcha", scope="user")
    bad = store.layout.scope_dir("user", None) / "gotcha-bad--zzz.md"
    bad.write_text("no frontmatter here")
    assert [n.title for n in store.list()] == ["good"]


def test_index_is_rebuilt_when_missing(store: NoteStore) -> None:
    note = store.add(
        title="Parquet files", body="Use pyarrow for parquet.", kind="reference", scope="user"
    ).note
    assert note is not None
    store._index.wipe()  # noqa: SLF001 - simulate a lost index
    fresh = NoteStore(store.root, "alice")
    assert [n.id for n, _ in fresh.search("pyarrow")] == [note.id]


def test_index_is_rebuilt_after_a_hand_edit(store: NoteStore) -> None:
    note = store.add(
        title="Parquet files", body="Use pyarrow.", kind="reference", scope="user"
    ).note
    assert note is not None and note.path is not None
    text = note.path.read_text().replace("Use pyarrow.", "Use polars instead.")
    note.path.write_text(text)
    assert [n.id for n, _ in store.search("polars")] == [note.id]
    assert store.search("pyarrow") == []


def test_another_store_object_sees_the_writes(store: NoteStore) -> None:
    other = NoteStore(store.root, "alice")
    assert other.search("zebra") == []
    note = store.add(title="Zebra crossing", kind="reference", scope="user").note
    assert note is not None
    assert [n.id for n, _ in other.search("zebra")] == [note.id]
