"""``usage.json``: how often and when each note went into a request.

    {"version": 1, "notes": {"<id>": {"total": 3, "last": "...Z", "recent": ["...Z"]}}}

``recent`` keeps the injection times of the last ``KEEP_DAYS`` days, enough to answer
"uses in 7 days" for any moment in that window; ``total`` counts every use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from conductor.storage.atomic import atomic_write
from conductor.storage.clock import format_time, parse_time

KEEP_DAYS = 30


class UsageBook:
    """Reads and updates one user's ``usage.json`` (callers hold the user's lock to write)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        notes = data.get("notes") if isinstance(data, dict) else None
        return notes if isinstance(notes, dict) else {}

    def save(self, notes: dict[str, dict[str, Any]]) -> None:
        atomic_write(self.path, json.dumps({"version": 1, "notes": notes}, indent=1) + "\n",
                     kind="usage")

    def record(self, note_ids: Iterable[str], when: datetime) -> None:
        notes = self.load()
        horizon = when - timedelta(days=KEEP_DAYS)
        stamp = format_time(when)
        for note_id in dict.fromkeys(note_ids):
            entry = notes.setdefault(note_id, {"total": 0, "last": None, "recent": []})
            entry["total"] = int(entry.get("total", 0)) + 1
            entry["last"] = stamp
            recent = [t for t in entry.get("recent", []) if parse_time(t) >= horizon]
            entry["recent"] = [*recent, stamp]
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
