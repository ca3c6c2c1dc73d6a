"""A client's own note writes, whatever carries them (`POST /v1/memory`, the MCP tools):
add, update and archive through the store's model-side writes, so each passes the same
rules (caps, kinds, scopes), secret check, dedupe, journal and revision history as a
`<tandem_memory>` block; an update or archive reaches only a note the request may read
(`conductor.hidden.shared_context.visible_note_ids`).

Blocking (the store's rules and file writes): callers on an event loop run it in a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from conductor.hidden.shared_context import visible_note_ids
from conductor.notes import NoteStore, WriteResult
from conductor.notes.note_format import Note

WriteOp = Literal["add", "update", "archive"]


class NoteIdRequired(ValueError):
    """An update or archive without a note id."""


class NoteNotVisible(LookupError):
    """The id names no note this request may read (none, archived, another project's or
    session's): told as "no note", never as which."""


def write_note(store: NoteStore, op: WriteOp, *, note_id: str | None = None,
               title: str | None = None, body: str = "", kind: str | None = None,
               scope: str | None = None, tags: Sequence[str] = (), reason: str | None = None,
               project: str | None = None, session: str | None = None,
               source: str = "route") -> WriteResult:
    """One client write. An update keeps what it leaves empty (title, body, tags, kind);
    a refusal by the store's rules is a WriteResult with `ok` False and its reason."""
    if op == "add":
        return store.add(title=title or "", body=body, kind=kind or "", scope=scope or "",
                         tags=list(tags), project=project, session=session, source=source)
    if note_id is None:
        raise NoteIdRequired(f"{op} needs an id")
    if note_id not in visible_note_ids(store, project, session):
        raise NoteNotVisible(f"no note {note_id!r}")
    if op == "update":
        return store.update(note_id, title=title, body=body or None, tags=list(tags) or None,
                            kind=kind, source=source)
    return store.archive(note_id, reason or "", source=source)


def note_json(note: Note) -> dict[str, Any]:
    """A note as the memory routes and tools give it out."""
    return {"id": note.id, "title": note.title, "kind": note.kind, "scope": note.scope,
            "status": note.status, "tags": list(note.tags), "body": note.body,
            "updated": str(note.updated)}
