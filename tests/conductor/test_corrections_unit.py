"""The corrections' decision on its own (conductor/hidden/corrections.py): which replayed
notes changed since they went in, read against the text each span showed."""

from __future__ import annotations

from conductor.hidden.corrections import build_corrections, note_version
from conductor.ledger.records import Span
from conductor.notes import NoteStore


def _session_note(store: NoteStore):
    written = store.add(title="The kettle descales on Sundays", kind="reference",
                        body="Descale the kettle with citric acid every Sunday.",
                        scope="session", session="s1")
    assert written.ok
    return written.note


def test_a_note_the_session_index_listed_by_title_is_no_change_when_nothing_changed(tmp_path):
    """The session's own index shows titles only: its notes' bodies were never in the
    prompt, so an untouched note is no 'memory update' (a 49-token one each turn before)."""
    store = NoteStore(tmp_path, "ann")
    note = _session_note(store)
    span = Span(0, 20, "session", (note.id,))
    listed = f"Notes of this session:\n- {note.title}"
    assert build_corrections(store, [span], lambda _span: listed) is None


def test_a_session_note_archived_or_retitled_since_is_told(tmp_path):
    store = NoteStore(tmp_path, "ann")
    note = _session_note(store)
    span = Span(0, 20, "session", (note.id,))
    listed = f"Notes of this session:\n- {note.title}"
    assert store.update(note.id, title="The kettle descales on Saturdays").ok
    retitled = build_corrections(store, [span], lambda _span: listed)
    assert retitled is not None and "Saturdays" in retitled.text
    assert store.archive(note.id, reason="the user forgot it").ok
    archived = build_corrections(store, [span], lambda _span: listed)
    assert archived is not None and "archived: The kettle descales on Saturdays" in archived.text
    assert archived.versions == (note_version(store.get(note.id)),)
