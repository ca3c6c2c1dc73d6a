"""``INDEX.md``: one line per live note, grouped by scope, for people and for the model."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from conductor.notes.note_format import Note, format_time
from conductor.notes.usage import UsageBook


def index_line(note: Note, uses_7d: int, now: datetime) -> str:
    """``- <title> — <kind>, <status>[, pinned][, stale][, uses 7d: n] · <id>``"""
    flags = [note.kind, note.status]
    if note.pin_active:
        flags.append("pinned")
    if note.is_stale(now):
        flags.append("stale")
    if note.archive_proposed:
        flags.append("archive proposed")
    if uses_7d:
        flags.append(f"uses 7d: {uses_7d}")
    return f"- {note.title} — {', '.join(flags)} · `{note.id}`"


def render_index_md(
    user: str, notes: Iterable[Note], usage: dict[str, dict[str, Any]], now: datetime
) -> str:
    """The text of ``INDEX.md`` for the live ``notes`` of ``user``."""
    live = sorted((n for n in notes if not n.archived), key=lambda n: n.title.casefold())
    groups: dict[str, list[Note]] = {}
    for note in live:
        if note.scope == "user":
            heading = "About you"
        elif note.scope == "project":
            heading = f"Project {note.project}"
            if note.project_path:
                heading += f" ({note.project_path})"
        else:
            heading = f"Session {note.session}"
        groups.setdefault(heading, []).append(note)
    lines = [
        f"# Memory index: {user}",
        "",
        f"{len(live)} live notes · generated {format_time(now)}",
    ]
    order = sorted(groups, key=lambda h: (not h.startswith("About"), h))
    for heading in order:
        lines += ["", f"## {heading}", ""]
        for note in groups[heading]:
            uses = UsageBook.uses_within(usage.get(note.id), now, 7)
            lines.append(index_line(note, uses, now))
    return "\n".join(lines) + "\n"
