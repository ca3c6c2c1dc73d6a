"""The note store: notes, their format, the rules that refuse a write, and the result of a write.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/notes/`, and nothing deeper."""

from __future__ import annotations

from conductor.notes import NoteStore, WriteResult
from conductor.notes.note_format import KINDS, SCOPES, STATUSES, Note, format_time, parse_time
from conductor.notes.rules import NoteCaps, Reason

__all__ = [
    "KINDS",
    "Note",
    "NoteCaps",
    "NoteStore",
    "Reason",
    "SCOPES",
    "STATUSES",
    "WriteResult",
    "format_time",
    "parse_time",
]
