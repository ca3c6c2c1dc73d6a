"""Helpers shared by the note store tests."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from conductor.notes import NoteStore, WriteResult
from conductor.notes.note_format import Note, render


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def words(i: int, n: int, tag: str = "w") -> str:
    """``n`` words that no other ``i`` shares, so BM25 never sees two notes as one fact."""
    return " ".join(f"{tag}{i}x{j}" for j in range(n))


def add_distinct(store: NoteStore, i: int, **kw: object) -> WriteResult:
    """Add a note whose words are unique to ``i``."""
    fields: dict[str, object] = {
        "title": f"Fact {words(i, 3, 't')}",
        "body": words(i, 8, "b"),
        "kind": "reference",
        "scope": "user",
    }
    fields.update(kw)
    return store.add(**fields)  # type: ignore[arg-type]


def write_raw_notes(store: NoteStore, count: int, start: int = 0, **kw: object) -> list[str]:
    """Write ``count`` live user notes straight to disk (no index, no journal), fast."""
    folder = store.layout.scope_dir("user", None)
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for i in range(start, start + count):
        note = Note(
            id=f"raw{i:07d}",
            title=f"Raw {words(i, 3, 'r')}",
            kind="reference",
            scope="user",
            body=words(i, 6, "s"),
            changelog=[{"when": "2025-01-01T00:00:00Z", "by": "model", "what": "add"}],
            **kw,  # type: ignore[arg-type]
        )
        path = folder / note.file_name()
        path.write_text(render(note), encoding="utf-8")
        os.chmod(path, 0o600)
        ids.append(note.id)
    return ids


def read_front(path: Path) -> dict[str, Any]:
    """A note file's frontmatter, read without the store's parser."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    front, _sep, _body = text[4:].partition("\n---\n")
    data = yaml.safe_load(front)
    assert isinstance(data, dict)
    return data
