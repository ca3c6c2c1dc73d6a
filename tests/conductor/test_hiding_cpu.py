"""The hiding decision's CPU a request (issue 58, item 4): what it reads of a note is kept
by the note's text, so a request reads only its own message, and an edit is seen at once."""

from __future__ import annotations

from conductor.hidden import tail_notes
from conductor.hidden.tail_notes import NotesShown, build_matches
from conductor.notes import NoteStore
from tests.conductor.notes_helpers import FakeClock, add_distinct

SHOWN = NotesShown(max_matches=3)
MESSAGE = "how do we rotate the staging database password on the replica?"


def words(text: str) -> int:
    return len(text.split())


def matched(store: NoteStore, allowed: set[str]) -> tuple[str, ...]:
    found = build_matches(store, MESSAGE, allowed, set(), words, SHOWN)
    return found.note_ids if found is not None else ()


def test_a_requests_matching_reads_its_message_alone_and_an_edit_is_read_at_once(
        store: NoteStore, clock: FakeClock, monkeypatch):
    """The search's hits are read into stems once a text: a second request reads the topic
    words of its message only (red before: its message twice and each hit's text again);
    an edit that gives a note the message's words makes it match on the next request, and
    one that takes them away stops it."""
    for i in range(4):
        add_distinct(store, i)
    target = store.add(title="Laptop setup", body="The laptop runs Fedora 40.",
                       kind="reference", scope="user").note.id
    other = store.add(title="Database password rotation", kind="reference", scope="user",
                      body="Rotate the staging database password with vault on Mondays.").note.id
    allowed = set(store.ids(include_stale=False))
    read: list[str] = []
    real = tail_notes.topic_words
    monkeypatch.setattr(tail_notes, "topic_words", lambda text: read.append(text) or real(text))
    first = matched(store, allowed)
    assert other in first and target not in first
    read.clear()
    assert matched(store, allowed) == first
    assert read == [MESSAGE]
    clock.advance(minutes=1)
    assert store.edit(target, body="Rotate its database password on the staging replica "
                      "with the replica runbook.", via="cli").ok
    assert target in matched(store, allowed)
    clock.advance(minutes=1)
    assert store.edit(target, body="The laptop runs Fedora 40.", via="cli").ok
    assert target not in matched(store, allowed)
