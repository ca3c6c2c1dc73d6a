"""Upkeep: INDEX.md (rendered here), archive purge, stale marks, crash leftovers, export,
nightly log."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from conductor.notes.core import StoreCore
from conductor.notes.helpers import _check_via, _entry
from conductor.notes.note_format import Note
from conductor.notes.usage import UsageBook
from conductor.storage.atomic import atomic_write, clean_temp_files
from conductor.storage.clock import format_time
from conductor.storage.export import export_tree
from conductor.storage.write_behind import AFTER_ANSWER

TEMP_FILE_AGE = timedelta(hours=1)


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


class Maintenance(StoreCore):
    """The nightly job's helpers (``conductor.cognition.nightly``) and the user's export."""

    def regenerate_index(self, now: datetime | None = None) -> Path:
        """Write ``INDEX.md``: one line per live note."""
        AFTER_ANSWER.drain(self._usage)  # uses the write-behind keeps: counted (not locked)
        with self._lock:
            notes = [n for n in self._cache.load().notes.values() if not n.archived]
            usage = self._usage.load()
            moment = now or self._now()
            text = render_index_md(self.user, notes, usage, moment)
            atomic_write(self.layout.index_md, text, kind="index")
        return self.layout.index_md

    def purge_archives(self, now: datetime | None = None) -> int:
        """Delete archived notes older than ``caps.archive_days``; returns how many."""
        moment = now or self._now()
        horizon = moment - timedelta(days=self.caps.archive_days)
        with self._writing() as snap:
            expired = [
                n
                for n in snap.notes.values()
                if n.archived_at is not None and n.archived_at < horizon
            ]
            for note in expired:
                self._erase(note)
            if expired:
                self._cache.reindex([n.id for n in expired])
            self._prune_empty_dirs(self.layout.archive_dir)
        return len(expired)

    def mark_stale(self, now: datetime | None = None) -> int:
        """Mark live notes past their ``verify_by`` stale; returns how many were marked."""
        moment = now or self._now()
        with self._writing() as snap:
            due = [
                n
                for n in snap.notes.values()
                if not n.archived and not n.stale and n.is_stale(moment)
            ]
            for note in due:
                marked = replace(
                    note,
                    stale=True,
                    updated=moment,
                    changelog=[
                        *note.changelog,
                        _entry(moment, "nightly", "mark_stale", "past verify_by", None),
                    ],
                )
                self._write(marked, old_path=note.path)
            if due:
                self._cache.reindex([n.id for n in due])
        return len(due)

    def clean_leftovers(self, now: datetime | None = None) -> int:
        """Remove temp files a crash left behind (a dead writer's at once, any after an
        hour) and stale copies."""
        moment = (now or self._now()).timestamp()
        with self._writing():  # also removes older duplicate copies of a note
            removed = clean_temp_files(self.layout.user_dir, moment,
                                       TEMP_FILE_AGE.total_seconds())
            known = self._cache.load().notes
            stale_usage = [i for i in self._usage.load() if i not in known]
            if stale_usage:
                self._usage.forget(stale_usage)
        return removed

    def export_zip(self, dest: Path | str, *, via: str = "cli") -> Path:
        """Write a zip of the user's tree to ``dest`` (mode 0600); returns its path."""
        _check_via(via)
        dest = Path(os.path.abspath(Path(dest).expanduser()))
        if dest.is_relative_to(self.layout.user_dir):
            raise ValueError("the export cannot be written inside the tree it exports")
        with self._lock:
            export_tree(self.layout.user_dir, self.user, dest)
        self._journal("export", ok=True, via=via, by="user")
        return dest

    def log_nightly(self, counts: dict[str, int]) -> None:
        self._journal("nightly", ok=True, by="nightly", counts=counts)

    def _prune_empty_dirs(self, top: Path) -> None:
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            if Path(dirpath) != top:
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
