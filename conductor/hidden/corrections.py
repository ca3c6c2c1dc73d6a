"""Corrections of notes an open conversation already holds.

A conversation replays its earlier prompts ids for ids, so a note that went into it (a
matched note, a session note, a block the model wrote) stays there as it was. When the
note is updated or archived since (by another session, the writer, the user), the next
turn carries a short hidden update after its new messages: the note's new text, or
"archived: <title>". Once: the update is itself a hidden span of the conversation, which
names the note's version it gave.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from conductor.hidden.prefetch import PREFETCH_KIND
from conductor.hidden.tail_notes import note_block
from conductor.ledger.records import Span
from conductor.notes import NoteStore
from conductor.notes.note_format import Note

CORRECTION_KIND = "correction"
# The hidden spans that hold a note's text (the shared index holds titles only), and of
# them those that list titles alone (the session's own index).
HOLDS_TEXT = ("notes", "session", "block", CORRECTION_KIND, PREFETCH_KIND)
TITLES_ONLY = ("session",)
FRAME = ("Memory update: notes shown earlier in this conversation have changed since. "
         "These versions replace them:")


@dataclass(frozen=True)
class Correction:
    text: str
    note_ids: tuple[str, ...]
    versions: tuple[int, ...]  # each note's version the update gives (note_version)


def note_version(note: Note) -> int:
    """A note's revision, and whether it is archived, as one number."""
    return note.revision * 2 + (1 if note.archived else 0)


def build_corrections(store: NoteStore, spans: Sequence[Span],
                      span_text: Callable[[Span], str]) -> Correction | None:
    """The update for the notes in `spans` (a replayed prompt's hidden spans) that changed
    since they went in; None when none did. `span_text` reads a span's text back."""
    holding: dict[str, list[Span]] = {}
    given: dict[str, set[int]] = {}  # versions earlier updates gave
    for span in spans:
        if span.kind not in HOLDS_TEXT:
            continue
        for note_id in span.note_ids:
            holding.setdefault(note_id, []).append(span)
        for note_id, version in zip(span.note_ids, span.versions, strict=False):
            given.setdefault(note_id, set()).add(version)
    lines, ids, versions = [], [], []
    for note_id, held in holding.items():
        note = store.get(note_id)
        if note is None:  # deleted: a record holding it is not replayed at all
            continue
        version = note_version(note)
        if version in given.get(note_id, ()):
            continue
        shown = _plain(" ".join(span_text(span) for span in held))
        if note.archived:
            line = f"archived: {note.title}"
            if _plain(line) in shown:
                continue
        elif all(span.kind in TITLES_ONLY for span in held):
            # only its title was shown: a body it never showed is no change to tell
            if _plain(note.title) in shown:
                continue
            line = note_block(note)
        else:
            if not note.body.strip() or _plain(note.body) in shown:
                continue
            line = note_block(note)
        lines.append(line)
        ids.append(note_id)
        versions.append(version)
    if not lines:
        return None
    return Correction("\n\n".join([FRAME, *lines]), tuple(ids), tuple(versions))


def _plain(text: str) -> str:
    """Text with its whitespace runs made one space: what a decode may change."""
    return re.sub(r"\s+", " ", text).strip()
