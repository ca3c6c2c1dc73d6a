"""``usage.json``: how often and when each note went into a request.

    {"version": 1, "notes": {"<id>": {"total": 3, "last": "...Z", "recent": ["...Z"]}}}

``recent`` keeps the injection times of the last ``KEEP_DAYS`` days, enough to answer
"uses in 7 days" for any moment in that window; ``total`` counts every use.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from conductor.storage.atomic import atomic_write
from conductor.storage.clock import format_time, parse_time

KEEP_DAYS = 30
MAX_KEPT = 100_000  # uses kept in memory for the write-behind at most (a disk that fails)


class UsageBook:
    """Reads and updates one user's ``usage.json`` (callers hold the user's lock to write)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Uses counted but not yet written: (note ids, when), oldest first. The store
        # writes them a batch at a time on the write-behind thread (usage_counts.py).
        self._kept: list[tuple[list[str], datetime]] = []
        self._kept_lock = threading.Lock()
        self.flushing = threading.Lock()  # one batch written at a time
        self._changes = 0  # uses kept and rewrites made by this process (see `stamp`)

    def keep(self, note_ids: list[str], when: datetime) -> None:
        with self._kept_lock:
            self._kept.append((note_ids, when))
            del self._kept[:-MAX_KEPT]
            self._changes += 1

    def stamp(self) -> tuple[int, int, int]:
        """Changes when the counts could: a use kept or a rewrite by this process, or the
        file's mtime and size (another process's rewrite). One stat, no read."""
        try:
            st = os.stat(self.path)
        except OSError:
            return self._changes, 0, -1
        return self._changes, st.st_mtime_ns, st.st_size

    def take(self) -> list[tuple[list[str], datetime]]:
        with self._kept_lock:
            kept, self._kept = self._kept, []
        return kept

    def put_back(self, kept: list[tuple[list[str], datetime]]) -> None:
        """A batch whose write failed, ahead of what was kept meanwhile."""
        with self._kept_lock:
            self._kept = [*kept, *self._kept][-MAX_KEPT:]

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        notes = data.get("notes") if isinstance(data, dict) else None
        return notes if isinstance(notes, dict) else {}

    def save(self, notes: dict[str, dict[str, Any]]) -> None:
        self._changes += 1
        atomic_write(self.path, json.dumps({"version": 1, "notes": notes}, indent=1) + "\n",
                     kind="usage")

    def record(self, note_ids: Iterable[str], when: datetime) -> None:
        self.record_many([(list(note_ids), when)])

    def record_many(self, uses: list[tuple[list[str], datetime]]) -> None:
        """Count each of `uses` (note ids, when): one read and one rewrite of the file."""
        notes = self.load()
        for note_ids, when in uses:
            stamp = format_time(when)
            for note_id in dict.fromkeys(note_ids):
                entry = notes.setdefault(note_id, {"total": 0, "last": None, "recent": []})
                entry["total"] = int(entry.get("total", 0)) + 1
                entry["last"] = stamp
                entry["recent"] = [*entry.get("recent", []), stamp]
        if uses:
            horizon = max(when for _, when in uses) - timedelta(days=KEEP_DAYS)
            for note_id in {i for ids, _ in uses for i in ids}:
                _drop_before(notes[note_id]["recent"], horizon)
        self.save(notes)

    def forget(self, note_ids: Iterable[str]) -> None:
        notes = self.load()
        changed = False
        for note_id in note_ids:
            changed |= notes.pop(note_id, None) is not None
        if changed:
            self.save(notes)

    @staticmethod
    def uses_within(entry: dict[str, Any] | None, now: datetime, days: int = 7) -> int:
        """Uses in the ``days`` before ``now`` (inclusive of now)."""
        if not entry:
            return 0
        start = now - timedelta(days=days)
        return sum(1 for t in entry.get("recent", []) if start <= parse_time(t) <= now)


def _drop_before(recent: list[str], horizon: datetime) -> None:
    """Drop the times before `horizon` from the front of `recent` (oldest first, as
    written): a use parses the few it drops, not a month of them (it parsed every one,
    on every use, which grew with the note's uses)."""
    gone = 0
    while gone < len(recent) and parse_time(recent[gone]) < horizon:
        gone += 1
    del recent[:gone]
