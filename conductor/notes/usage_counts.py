"""How often each note went into a request: record injections, read the counts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from conductor.notes.core import StoreCore
from conductor.notes.usage import UsageBook


class NoteUsage(StoreCore):
    """Injection counts kept in ``usage.json``."""

    def record_injection(self, note_ids: Iterable[str], request_id: str | None = None) -> int:
        """Count that these notes went into a request; returns how many were counted."""
        ids = [i for i in dict.fromkeys(note_ids)]
        with self._lock:
            known = self._cache.load().notes
            counted = [i for i in ids if i in known]
            if counted:
                self._usage.record(counted, self._now())
            self._journal("inject", ok=True, ids=counted, request_id=request_id)
        return len(counted)

    def usage(self, note_id: str, now: datetime | None = None) -> dict[str, Any]:
        """``{"total": n, "last": iso or None, "uses_7d": n}`` for one note."""
        entry = self._usage.load().get(note_id) or {}
        return {
            "total": int(entry.get("total", 0)),
            "last": entry.get("last"),
            "uses_7d": UsageBook.uses_within(entry, now or self._now(), 7),
        }

    def uses_in_days(self, note_id: str, days: int = 7, now: datetime | None = None) -> int:
        """How many requests this note went into in the last ``days`` days."""
        entry = self._usage.load().get(note_id)
        return UsageBook.uses_within(entry, now or self._now(), days)

    def uses_of(self, note_ids: Iterable[str], days: int = 7,
                now: datetime | None = None) -> dict[str, int]:
        """Uses in the last ``days`` days of each of ``note_ids``, from one read of the book
        (a page of the Memory screen's list)."""
        book, at = self._usage.load(), now or self._now()
        return {i: UsageBook.uses_within(book.get(i), at, days) for i in note_ids}
