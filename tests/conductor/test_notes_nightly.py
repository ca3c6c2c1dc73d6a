"""The nightly job and its scheduler."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from notes_helpers import FakeClock

from conductor.cognition.nightly import nightly_loop, run_nightly, run_nightly_all, seconds_until
from conductor.notes import NoteStore


def test_archives_older_than_30_days_are_deleted(store: NoteStore, clock: FakeClock) -> None:
    old = store.add(title="old", body="one", kind="gotcha", scope="user").note
    young = store.add(title="young", kind="gotcha", scope="user").note
    assert old is not None and young is not None
    store.update(old.id, body="two")
    store.user_archive(old.id)
    clock.advance(days=20)
    store.user_archive(young.id)
    clock.advance(days=10, seconds=1)  # old: 30 days + 1 s; young: 10 days
    report = run_nightly(store)
    assert report.archives_deleted == 1
    assert store.get(old.id) is None
    assert not (store.layout.revisions_dir / old.id).exists()
    remaining = store.get(young.id)
    assert remaining is not None and remaining.archived


def test_archive_of_exactly_30_days_is_kept(store: NoteStore, clock: FakeClock) -> None:
    note = store.add(title="old", kind="gotcha", scope="user").note
    assert note is not None
    store.user_archive(note.id)
    clock.advance(days=30)
    assert run_nightly(store).archives_deleted == 0


def test_program_state_past_verify_by_is_marked_stale(store: NoteStore, clock: FakeClock) -> None:
    note = store.add(
        title="Deploy running", kind="program_state", scope="user", verify_by="2025-03-11"
    ).note
    assert note is not None and not note.is_stale(clock.now)
    assert run_nightly(store).marked_stale == 0
    clock.now = datetime(2025, 3, 11, 23, 59, tzinfo=UTC)
    assert run_nightly(store).marked_stale == 0  # a date lasts to the end of its day
    clock.now = datetime(2025, 3, 12, 0, 1, tzinfo=UTC)
    assert run_nightly(store).marked_stale == 1
    marked = store.get(note.id)
    assert marked is not None and marked.stale and marked.changelog[-1]["what"] == "mark_stale"
    assert "stale" in store.layout.index_md.read_text()
    assert run_nightly(store).marked_stale == 0


def test_new_verify_by_clears_stale(store: NoteStore, clock: FakeClock) -> None:
    note = store.add(
        title="Deploy running", kind="program_state", scope="user", verify_by="2025-03-11"
    ).note
    assert note is not None
    clock.advance(days=3)
    run_nightly(store)
    revised = store.update(note.id, verify_by="2025-03-20").note
    assert revised is not None and not revised.stale and not revised.is_stale(clock.now)


def test_nightly_regenerates_index_md_and_journals(store: NoteStore) -> None:
    store.add(title="Prefers tea", kind="reference", scope="user")
    assert not store.layout.index_md.exists()
    report = run_nightly(store)
    assert report.live_notes == 1
    assert "Prefers tea" in store.layout.index_md.read_text()
    assert [e["op"] for e in store.journal.entries()][-1] == "nightly"


def test_nightly_removes_old_temp_files(store: NoteStore, clock: FakeClock) -> None:
    folder = store.layout.scope_dir("user", None)
    folder.mkdir(parents=True, exist_ok=True)
    leftover = folder / ".gotcha-x--abc.md.k2j3.tmp"
    leftover.write_text("half a note")
    fresh = folder / ".gotcha-y--abd.md.k2j4.tmp"
    fresh.write_text("being written")
    hours_ago = time.time() - 2 * 3600
    os.utime(leftover, (hours_ago, hours_ago))
    clock.now = datetime.now(UTC)
    assert run_nightly(store).leftovers_removed == 1
    assert not leftover.exists() and fresh.exists()


def test_run_nightly_all_covers_every_user(store: NoteStore, clock: FakeClock) -> None:
    store.add(title="a", kind="gotcha", scope="user")
    store.for_user("bob").add(title="b", kind="gotcha", scope="user")
    reports = run_nightly_all(store.root, clock=clock)
    assert sorted(r.user for r in reports) == ["alice", "bob"]
    assert (store.root / "notes" / "bob" / "INDEX.md").exists()


def test_seconds_until_the_configured_hour() -> None:
    tz = timezone(timedelta(hours=2))
    assert seconds_until(3, datetime(2025, 3, 10, 1, 30, tzinfo=tz)) == 90 * 60
    assert seconds_until(3, datetime(2025, 3, 10, 3, 0, tzinfo=tz)) == 24 * 3600
    assert seconds_until(3, datetime(2025, 3, 10, 23, 0, tzinfo=tz)) == 4 * 3600
    assert 0 < seconds_until(3) <= 24 * 3600
    with pytest.raises(ValueError):
        seconds_until(24)


def test_nightly_loop_sleeps_until_the_hour_then_runs(store: NoteStore) -> None:
    store.add(title="a", kind="gotcha", scope="user")
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    asyncio.run(nightly_loop(store.root, 4, sleep=fake_sleep, runs=2))
    assert len(slept) == 2 and all(0 < s <= 24 * 3600 for s in slept)
    assert [e["op"] for e in store.journal.entries()].count("nightly") == 2
