"""Small pure helpers the store's operations share: argument checks, ids, copies, entries."""

from __future__ import annotations

import copy
import os
from datetime import datetime

from conductor.notes.note_format import SOURCES, Note, format_time
from conductor.notes.rules import Content, Reason, Refusal

USER_VIAS = ("dashboard", "cli", "route", "command")


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")


def _check_via(via: str) -> None:
    if via not in USER_VIAS:
        raise ValueError(f"via must be one of {USER_VIAS}, not {via!r}")


def _missing(note: Note | None, note_id: str) -> Refusal | None:
    if note is None:
        return Refusal(Reason.NOT_FOUND, f"no note {note_id}")
    if note.archived:
        return Refusal(Reason.ARCHIVED, f"note {note_id} is archived")
    return None


def _entry(when: datetime, by: str, what: str, why: str | None, source: str | None) -> dict:
    return {"when": format_time(when), "by": by, "what": what, "why": why, "source": source}


def _new_id(existing: dict[str, Note]) -> str:
    while True:
        candidate = os.urandom(5).hex()
        if candidate not in existing:
            return candidate


def _copy(note: Note) -> Note:
    """A copy callers may change without touching the store's cache."""
    # copy.copy, not dataclasses.replace: every read copies every note it returns.
    out = copy.copy(note)
    out.tags = list(note.tags)
    out.changelog = [dict(e) for e in note.changelog]
    return out


def _as_note(content: Content) -> Note:
    return Note(
        id="",
        title=content.title,
        kind=content.kind,
        scope="user",
        body=content.body,
        tags=content.tags,
    )
