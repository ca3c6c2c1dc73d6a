"""The notes' scans: reads inside one scan share one look at the files, and a scan stands
until a note tree changes or its second passes, then stands again on the files' stats; an
export that fails midway leaves the old zip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from notes_helpers import FakeClock

from conductor.notes import NoteStore, snapshot
from conductor.storage import atomic


def test_reads_inside_one_scan_share_one_look_at_the_files(
        store: NoteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "SCAN_STANDS_S", 0.0)  # no scan stands past its reads
    note = store.add(title="Parquet files", body="Use pyarrow.", kind="reference",
                     scope="user").note
    assert note is not None and note.path is not None
    with store.one_scan():
        note.path.write_text(note.path.read_text().replace("Use pyarrow.", "Use polars."))
        with store.one_scan():  # nested: still the outer scan
            assert store.get(note.id).body == "Use pyarrow."
        assert [n.body for n in store.list()] == ["Use pyarrow."]
        assert [n.id for n, _ in store.search("pyarrow")] == [note.id]
    # The block is over: the next read looks at the files again.
    assert store.get(note.id).body == "Use polars."
    assert [n.id for n, _ in store.search("polars")] == [note.id]


def test_one_scan_pins_reads_of_its_own_thread_only(
        store: NoteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr(snapshot, "SCAN_STANDS_S", 0.0)

    note = store.add(title="Parquet files", body="Use pyarrow.", kind="reference",
                     scope="user").note
    assert note is not None and note.path is not None
    seen: list[str] = []
    with store.one_scan():
        note.path.write_text(note.path.read_text().replace("Use pyarrow.", "Use polars."))
        reader = threading.Thread(target=lambda: seen.append(store.get(note.id).body))
        reader.start()
        reader.join()
    assert seen == ["Use polars."]


def test_an_export_that_fails_midway_leaves_the_old_zip_and_no_temp_file(
    store: NoteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conductor.storage import export

    store.add(title="Prefers tea", kind="reference", scope="user")
    dest = tmp_path / "out" / "notes.zip"
    dest.parent.mkdir()
    dest.write_bytes(b"the previous export")

    def unreadable(*args: object, **kwargs: object) -> None:
        raise OSError(5, "simulated read error")

    monkeypatch.setattr(export.zipfile.ZipFile, "write", unreadable)
    with pytest.raises(OSError):
        export.export_tree(store.layout.user_dir, store.user, dest)
    assert dest.read_bytes() == b"the previous export"
    assert [p.name for p in dest.parent.iterdir()] == ["notes.zip"]


def test_a_scan_stands_until_a_folder_changes_or_a_second_passes(
        root: Path, store: NoteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read stats the folders, not every file, while the last scan stands (90 ms of
    stats on 10,000 notes): a note another process writes (a rename into its folder) is
    seen at once; an edit made in place by hand, which changes no folder, within
    SCAN_STANDS_S."""
    import time

    monkeypatch.setattr(snapshot, "SCAN_STANDS_S", 1.5)
    note = store.add(title="Parquet files", body="Use pyarrow.", kind="reference",
                     scope="user").note
    assert note is not None and note.path is not None
    time.sleep(2 * snapshot.COARSE_MTIME_S)  # past the folder's coarse time, the scan stands
    assert store.get(note.id).body == "Use pyarrow."
    calls: list[str] = []
    real_walk = snapshot._walk
    monkeypatch.setattr(snapshot, "_walk", lambda *a: calls.append(a[0]) or real_walk(*a))
    assert store.get(note.id).body == "Use pyarrow." and calls == []  # no file was statted

    other = NoteStore(root, "alice").add(title="Arrow IPC", body="Zero-copy reads.",
                                         kind="reference", scope="user").note
    assert other is not None and store.get(other.id) is not None  # at once: its folder moved

    time.sleep(2 * snapshot.COARSE_MTIME_S)
    assert store.get(note.id) is not None  # a scan that stands again
    note.path.write_text(note.path.read_text().replace("Use pyarrow.", "Use polars."))
    assert store.get(note.id).body == "Use pyarrow."  # in place: no folder changed
    time.sleep(snapshot.SCAN_STANDS_S)
    assert store.get(note.id).body == "Use polars."


def test_a_lapsed_scan_of_an_unchanged_tree_lists_no_folder_and_stats_each_file_once(
        store: NoteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once SCAN_STANDS_S has passed, while no folder has changed, a read stats each file
    the last scan saw and lists no folder, and the scan stands again: a user's tree was
    listed, walked, sorted and hashed afresh every second, a fifth of a memory-on
    request's own work in the overhead bench (issue 58, item 4; red before: every folder
    listed again)."""
    import time

    monkeypatch.setattr(snapshot, "SCAN_STANDS_S", 0.2)
    made = [store.add(title="Prefers tea", kind="reference", scope="user").note,
            store.add(title="Use uv", kind="gotcha", scope="project", project="/w/p").note,
            store.add(title="Draft", kind="reference", scope="session", session="s1").note]
    assert all(made)
    files = sorted(str(n.path) for n in made if n and n.path)
    time.sleep(2 * snapshot.COARSE_MTIME_S)  # past the folders' coarse time: a scan stands
    assert store.get(made[0].id) is not None
    listed: list[str] = []
    statted: list[str] = []
    real_listdir, real_stat = os.listdir, os.stat
    monkeypatch.setattr(os, "listdir", lambda path: listed.append(path) or real_listdir(path))
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: statted.append(os.fspath(path))
                        or real_stat(path, *a, **k))
    for _ in range(2):  # it lapses, stands on the files' stats, lapses again
        time.sleep(snapshot.SCAN_STANDS_S + 0.05)
        statted.clear()
        assert [store.get(n.id).title for n in made if n] == ["Prefers tea", "Use uv", "Draft"]
        assert listed == []
        assert sorted(p for p in statted if p.endswith(".md")) == files


def test_a_write_beside_the_notes_leaves_the_scan_standing_and_a_new_tree_is_seen(
        root: Path, store: NoteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """usage.json and INDEX.md, written beside the note trees after answers and by the
    nightly job, change the user folder but no folder of notes: the scan stands (red
    before: the user folder's own mtime was watched, and each write sent the next read to
    a scan of the whole tree). A tree made after the scan (the user's first project
    note, written by another process) is still seen at once, by its own folder."""
    import time

    monkeypatch.setattr(snapshot, "SCAN_STANDS_S", 60.0)
    note = store.add(title="Prefers tea", kind="reference", scope="user").note
    assert note is not None and not (store.layout.user_dir / "projects").exists()
    time.sleep(2 * snapshot.COARSE_MTIME_S)
    assert store.get(note.id) is not None  # a scan that stands
    user_dir = os.stat(store.layout.user_dir).st_mtime_ns
    atomic.atomic_write(store.layout.usage_json, '{"uses": {}}')
    atomic.atomic_write(store.layout.index_md, "# Index\n")
    assert os.stat(store.layout.user_dir).st_mtime_ns != user_dir
    walked: list[str] = []
    real_walk = snapshot._walk
    monkeypatch.setattr(snapshot, "_walk", lambda *a: walked.append(a[0]) or real_walk(*a))
    assert store.get(note.id) is not None and walked == []  # no tree walked again
    other = NoteStore(root, "alice").add(title="Use uv", kind="gotcha", scope="project",
                                         project="/w/p").note
    assert other is not None and store.get(other.id) is not None  # at once: a new tree


def test_a_lapsed_scan_still_sees_an_edit_in_place_and_a_note_going_stale(
        store: NoteStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a lapsed scan's stats keep is what a scan would find: an edit made in place by
    hand (no folder changes), one that keeps the file's size too, is seen once the scan
    lapses; and the visible ids are filtered afresh each time it stands again (a note
    past its verify_by leaves them, as it did when each second was a new scan)."""
    import time

    monkeypatch.setattr(snapshot, "SCAN_STANDS_S", 0.2)
    note = store.add(title="Parquet files", body="Use pyarrow.", kind="reference",
                     scope="user").note
    due = store.add(title="Debugging the cache", kind="program_state", scope="user",
                    verify_by="2025-03-11").note
    assert note is not None and note.path is not None and due is not None
    time.sleep(2 * snapshot.COARSE_MTIME_S)
    assert store.get(note.id).body == "Use pyarrow."
    assert due.id in store.ids(include_stale=False)
    time.sleep(snapshot.SCAN_STANDS_S + 0.05)
    assert store.get(note.id).body == "Use pyarrow."  # stands again on the files' stats
    folder = os.stat(note.path.parent).st_mtime_ns
    text = note.path.read_text()
    with open(note.path, "r+", encoding="utf-8") as file:  # in place, the same size
        file.write(text.replace("Use pyarrow.", "Use polars!"))
    assert os.stat(note.path.parent).st_mtime_ns == folder  # no folder changed
    time.sleep(snapshot.SCAN_STANDS_S + 0.05)
    assert store.get(note.id).body == "Use polars!"
    assert due.id in store.ids(include_stale=False)  # filtered with this scan
    clock.advance(days=2)  # past verify_by
    time.sleep(2 * (snapshot.SCAN_STANDS_S + 0.05))  # the scan lapses and stands again
    assert store.get(note.id) is not None
    assert due.id not in store.ids(include_stale=False)


def test_the_visible_ids_are_the_listed_notes_ids_and_follow_each_write(
        root: Path, store: NoteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """visible_note_ids filters ids alone (no copy of each note: 43 ms a search on 10,000
    notes) and keeps them with the snapshot; it must name exactly the notes `shared_notes`
    and `session_notes` list, and a write must show in the next call."""
    from conductor.hidden.shared_context import session_notes, shared_notes, visible_note_ids

    made = {
        "user": store.add(title="Tabs", body="Tabs, not spaces.", kind="reference",
                          scope="user").note,
        "project": store.add(title="Port", body="It listens on 8003.", kind="reference",
                             scope="project", project="/work/p1").note,
        "other": store.add(title="Region", body="eu-west-1.", kind="reference",
                           scope="project", project="/work/p2").note,
        "session": store.add(title="Draft", body="The draft is in a.md.", kind="reference",
                             scope="session", session="s1").note,
    }
    assert all(made.values())
    import time

    monkeypatch.setattr(snapshot, "SCAN_STANDS_S", 60.0)  # one scan, and its id sets, stand
    time.sleep(2 * snapshot.COARSE_MTIME_S)
    for project, session in (("/work/p1", "s1"), (None, None), ("/work/p2", "s2")):
        listed = {n.id for n in shared_notes(store, project)}
        if session:
            listed |= {n.id for n in session_notes(store, session)}
        assert visible_note_ids(store, project, session) == listed
    assert visible_note_ids(store, "/work/p1", "s1") == {
        made["user"].id, made["project"].id, made["session"].id}
    store.user_archive(made["user"].id)
    assert made["user"].id not in visible_note_ids(store, "/work/p1", "s1")
    later = store.add(title="Editor", body="Helix.", kind="reference", scope="user").note
    assert later is not None and later.id in visible_note_ids(store, None, None)
