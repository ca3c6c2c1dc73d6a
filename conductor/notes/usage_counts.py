"""How often each note went into a request: record injections, read the counts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from conductor.notes.core import StoreCore
from conductor.notes.usage import UsageBook
from conductor.storage.write_behind import AFTER_ANSWER


class NoteUsage(StoreCore):
    """Injection counts kept in ``usage.json``."""

    def record_injection(self, note_ids: Iterable[str], request_id: str | None = None) -> int:
        """Count that these notes went into a request; returns how many were counted.

        Called after every answer that hid notes. The count and its journal entry are
        kept in memory and written by the write-behind thread, a batch of answers in one
        rewrite of usage.json and one journal write (it was two fsync'd writes an answer,
        in a thread the next turn's work waited for: issue 58); this store's reads of the
        counts, and the journal's, write what is kept first."""
        ids = list(dict.fromkeys(note_ids))
        known = self._read_snapshot().notes
        counted = [i for i in ids if i in known]
        if counted:
            self._usage.keep(counted, self._now())
            AFTER_ANSWER.later(self._usage, self._write_uses)
        self._journal_file.append_later(user=self.user, op="inject", ok=True, ids=counted,
                                        request_id=request_id)
        return len(counted)

    def _write_uses(self) -> None:
        """The uses kept so far into usage.json, under the user's lock (the write-behind
        thread's flush, or a reader's). A note deleted meanwhile is not counted."""
        with self._usage.flushing:
            kept = self._usage.take()
            if not kept:
                return
            if not self.layout.user_dir.exists():  # the user was deleted meanwhile
                return
            try:
                with self._lock:
                    known = self._cache.load().notes
                    self._usage.record_many([([i for i in ids if i in known], when)
                                             for ids, when in kept])
            except BaseException:
                self._usage.put_back(kept)
                raise

    def written_uses(self) -> None:
        """Write the uses kept for the write-behind now (a reader that must see them).
        Never under the user's lock: the write takes it."""
        AFTER_ANSWER.drain(self._usage)

    def usage(self, note_id: str, now: datetime | None = None) -> dict[str, Any]:
        """``{"total": n, "last": iso or None, "uses_7d": n}`` for one note."""
        self.written_uses()
        entry = self._usage.load().get(note_id) or {}
        return {
            "total": int(entry.get("total", 0)),
            "last": entry.get("last"),
            "uses_7d": UsageBook.uses_within(entry, now or self._now(), 7),
        }

    def uses_in_days(self, note_id: str, days: int = 7, now: datetime | None = None) -> int:
        """How many requests this note went into in the last ``days`` days."""
        self.written_uses()
        entry = self._usage.load().get(note_id)
        return UsageBook.uses_within(entry, now or self._now(), days)

    def totals(self) -> dict[str, int]:
        """Every counted note's uses in all, from one read of the book (the prewarm ranks
        a new session's likely notes by it)."""
        self.written_uses()
        return {i: int(e.get("total", 0)) for i, e in self._usage.load().items()
                if isinstance(e, dict)}

    def uses_of(self, note_ids: Iterable[str], days: int = 7,
                now: datetime | None = None) -> dict[str, int]:
        """Uses in the last ``days`` days of each of ``note_ids``, from one read of the book
        (a page of the Memory screen's list)."""
        self.written_uses()
        book, at = self._usage.load(), now or self._now()
        return {i: UsageBook.uses_within(book.get(i), at, days) for i in note_ids}
