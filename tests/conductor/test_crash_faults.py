"""kill -9 at every point of every kind of write, then a restart: the store loads, no
partial file is read as a note, leftover temp files go, a torn journal line is skipped
and counted, and each write is found either not done or done whole; run again, it
completes.

Each case runs the write in a child process (`tests/crash_driver.py`) armed with
``TANDEM_FAULT=<kind>:<point>``, so the child dies exactly there (conductor/storage/faults.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conductor.layers.user_layers import UserLayers
from conductor.notes import NoteStore
from conductor.notes.note_format import parse
from conductor.search.index import SYNC_MARK, SearchIndex
from conductor.storage.faults import (
    AFTER_RENAME,
    BEFORE_RENAME,
    BEFORE_UNLINK,
    FAULT_ENV,
    LINE_PARTIAL,
    TEMP_OPEN,
    TEMP_PARTIAL,
)
from conductor.storage.journal import Journal
from conductor.storage.recovery import recover
from tests import crash_driver as driver

REPO = Path(__file__).resolve().parents[2]

WRITE_POINTS = (TEMP_OPEN, TEMP_PARTIAL, BEFORE_RENAME, AFTER_RENAME)
CASES = [
    *[("note_add", "note", p) for p in WRITE_POINTS],
    ("note_add", "journal", LINE_PARTIAL),
    ("note_add", "note_index", BEFORE_RENAME),
    *[("note_update", "revision", p) for p in (TEMP_PARTIAL, AFTER_RENAME)],
    *[("note_update", "note", p) for p in (TEMP_PARTIAL, BEFORE_RENAME, AFTER_RENAME)],
    *[("note_archive", "archive", p) for p in (TEMP_PARTIAL, AFTER_RENAME, BEFORE_UNLINK)],
    *[("index_md", "index", p) for p in (TEMP_PARTIAL, BEFORE_RENAME)],
    *[("usage", "usage", p) for p in (TEMP_PARTIAL, BEFORE_RENAME)],
    *[("history", "history", p) for p in WRITE_POINTS],
    *[("artifact", "artifact", p) for p in (TEMP_PARTIAL, AFTER_RENAME)],
    *[("sync", "sync", p) for p in (TEMP_OPEN, BEFORE_RENAME, BEFORE_UNLINK)],
]


def run_driver(scenario: str, root: Path, fault: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault is not None:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "tests.crash_driver", scenario, str(root)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*.tmp") if p.is_file()]


def note_files_parse(root: Path) -> None:
    """Every Markdown file in the notes tree is a whole note (a partial one would not
    parse, or would lose its closing changelog)."""
    for path in (root / "notes" / driver.USER).rglob("*.md"):
        if path.name == "INDEX.md":
            continue
        note = parse(path.read_text(encoding="utf-8"), path)
        assert note.changelog, f"{path.name}: a note without its changelog"


def outcome(scenario: str, root: Path) -> str:
    """"old" or "new" for what the scenario writes; anything else fails the test."""
    notes = NoteStore(root, driver.USER)
    every = notes.list(state="all")
    seeded = [n for n in every if n.title == driver.SEEDED_TITLE]
    assert len(seeded) == 1, "the seeded note is there exactly once"
    if scenario == "note_add":
        added = [n for n in every if n.title == driver.NEW_TITLE]
        assert not added or (len(added) == 1 and added[0].body.strip() == driver.NEW_BODY)
        return "new" if added else "old"
    if scenario in ("note_update", "index_md"):
        body = seeded[0].body.strip()
        assert body in (driver.REVISED_BODY, "Deploys go out on Fridays after the review.")
        if scenario == "index_md":
            index = (root / "notes" / driver.USER / "INDEX.md").read_text(encoding="utf-8")
            assert index.count(driver.SEEDED_TITLE) == 1, "INDEX.md whole, the note once"
        return "new" if body == driver.REVISED_BODY else "old"
    if scenario == "note_archive":
        return "new" if seeded[0].archived else "old"
    if scenario == "usage":
        total = notes.usage(seeded[0].id)["total"]
        assert total in (1, 2)
        return "new" if total == 2 else "old"
    if scenario == "history":
        layers = UserLayers(root, driver.USER)
        assert not layers.files.quarantine_dir.exists() or not any(
            layers.files.quarantine_dir.rglob("*.json")), "no turn set aside as unreadable"
        last = layers.history.read(layers.history.last_seq)
        assert last is not None and last.user_text in ("the first question", driver.TURN_TEXT)
        return "new" if last.user_text == driver.TURN_TEXT else "old"
    if scenario == "artifact":
        text = UserLayers(root, driver.USER).working_memory()
        assert text == driver.ARTIFACT_TEXT or driver.ARTIFACT_TEXT not in text
        return "new" if text == driver.ARTIFACT_TEXT else "old"
    if scenario == "sync":
        index = SearchIndex(root, driver.USER, None)
        index.sync()  # after a crash: rebuilt; either way complete and without doubles
        manifest = json.loads((index.dir / "manifest.json").read_text())
        chunks = sum(len(f["chunks"]) for s in manifest.values() for f in s.values())
        assert index.count() == chunks, "every point is one the manifest lists"
        hits = [h.path for h in index.search("5433", "sparse", limit=10)]
        assert hits == ["staging.md"], hits
        assert not (index.dir / SYNC_MARK).exists()
        index.close()
        return "new"
    raise AssertionError(scenario)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("seed") / "memory"
    driver.seed(root)
    return root


@pytest.mark.parametrize(("scenario", "kind", "point"), CASES,
                         ids=[f"{s}-{k}-{p}" for s, k, p in CASES])
def test_a_kill_at_any_point_of_a_write_leaves_a_store_that_loads_whole(
        seeded: Path, tmp_path: Path, scenario: str, kind: str, point: str) -> None:
    root = tmp_path / "memory"
    shutil.copytree(seeded, root)
    journal = Journal(root / "journal.jsonl")
    lines_before = len(journal.read().entries)

    crashed = run_driver(scenario, root, f"{kind}:{point}")
    assert crashed.returncode == -signal.SIGKILL, (
        f"the child never reached {kind}:{point}: {crashed.stderr[-2000:]}")

    left = temp_files(root)
    if point in (TEMP_OPEN, TEMP_PARTIAL, BEFORE_RENAME):
        assert left, "the kill came while a temp file was there"
    recovered = recover(root)  # what a restart does first
    assert recovered.temp_files_removed == len(left)
    assert temp_files(root) == []
    read = journal.read()
    assert read.torn == (1 if kind == "journal" else 0)
    assert len(read.entries) >= lines_before
    note_files_parse(root)
    first = outcome(scenario, root)
    assert first in ("old", "new")

    done = run_driver(scenario, root, None)  # the same write again, no fault: it completes
    assert done.returncode == 0, done.stderr[-2000:]
    assert outcome(scenario, root) == "new"
    note_files_parse(root)
    assert journal.read().torn == read.torn, "an append after a torn line stays whole"
    assert temp_files(root) == []


def test_a_live_writers_temp_file_is_kept_and_a_dead_ones_goes(tmp_path: Path) -> None:
    """A restart must not take a temp file from under a writer that is still running
    (another process on the same folder): only a dead process's, or an hour-old one."""
    from conductor.storage.atomic import writer_tag

    folder = tmp_path / "notes"
    folder.mkdir()
    live = folder / f".a.md.{writer_tag()}.abc123.tmp"
    live.write_text("being written")
    dead = folder / ".b.md.p999999999s1.abc123.tmp"  # no such process
    dead.write_text("left by a crash")
    untagged_new = folder / ".c.md.abc123.tmp"
    untagged_new.write_text("an older release's temp, just written")
    untagged_old = folder / ".d.md.abc123.tmp"
    untagged_old.write_text("an older release's temp, long ago")
    os.utime(untagged_old, (1, 1))
    from conductor.storage.atomic import clean_temp_files

    assert clean_temp_files(folder) == 2
    assert live.exists() and untagged_new.exists()
    assert not dead.exists() and not untagged_old.exists()


def test_an_entry_appended_after_a_torn_line_is_whole_and_the_torn_line_counted(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append(op="add", ok=True)
    with journal.path.open("a") as handle:
        handle.write('{"at": "2026-11-30T12:00:00Z", "op": "ad')  # what a kill leaves
    journal.append(op="archive", ok=True)
    read = journal.read()
    assert [e["op"] for e in read.entries] == ["add", "archive"]
    assert read.torn == 1
