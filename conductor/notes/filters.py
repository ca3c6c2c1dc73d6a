"""Which notes a read asks for: scope, list and search filters, and the match test."""

from __future__ import annotations

import os

from conductor.notes.note_format import Note
from conductor.storage.paths import project_key

STATES = ("live", "archived", "all")


def _scope_filters(scope: str, key: str | None) -> dict[str, str | None]:
    return {
        "scope": scope,
        "project": key if scope == "project" else None,
        "session": key if scope == "session" else None,
    }


def _project_filter(project: str | os.PathLike[str] | None) -> str | None:
    """A project filter is a key (``name-1a2b3c4d``) or a path."""
    if project is None:
        return None
    text = os.fspath(project)
    if "/" not in text and len(text) > 9 and text[-9] == "-":
        try:
            int(text[-8:], 16)
            return text
        except ValueError:
            pass
    return project_key(text)[0]


def _filters(
    scope: str | None,
    kind: str | None,
    status: str | None,
    project: str | os.PathLike[str] | None,
    session: str | None,
    state: str,
) -> dict[str, str | None]:
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}")
    return {
        "scope": scope,
        "kind": kind,
        "status": status,
        "project": _project_filter(project),
        "session": session,
        "state": state,
    }


def _matches(note: Note, filters: dict[str, str | None]) -> bool:
    state = filters.get("state") or "live"
    if state == "live" and note.archived or state == "archived" and not note.archived:
        return False
    for name in ("scope", "kind", "status", "project", "session"):
        wanted = filters.get(name)
        if wanted is not None and getattr(note, name) != wanted:
            return False
    return True
