"""Reading notes: ``get``, ``list``, ``search`` and ``dedupe_match``, sharing one scan."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TypeVar

from conductor.notes import dedupe
from conductor.notes.core import StoreCore
from conductor.notes.filters import _filters, _matches, _scope_filters
from conductor.notes.helpers import _copy
from conductor.notes.note_format import Note, clean_tags, verify_deadline
from conductor.notes.rules import Refusal, resolve_scope
from conductor.notes.snapshot import _Snapshot
from conductor.search.notes_bm25 import note_text

T = TypeVar("T")
MAX_DERIVED = 64  # values kept a store by while_unchanged (a few a project and kind)


def _next_deadline(notes: Iterable[Note], now: datetime) -> datetime | None:
    """The first moment after `now` that one of `notes` turns stale (its verify_by)."""
    deadlines = [verify_deadline(n.verify_by) for n in notes if n.verify_by and not n.stale]
    return min((d for d in deadlines if d > now), default=None)


class NoteReads(StoreCore):
    """Reads: the files are the truth, so each read scans them (parsing only changed
    files) unless it runs inside ``one_scan()``."""

    @contextmanager
    def one_scan(self) -> Iterator[None]:
        """Reads (get, list, search) in this thread inside the block share one scan of
        the files: a request that reads several times pays for one. Not for writes."""
        if getattr(self._pinned, "snapshot", None) is not None:
            yield  # nested: the outer block's scan stands
            return
        self._pinned.snapshot = self._cache.load()
        try:
            yield
        finally:
            self._pinned.snapshot = None

    def _read_snapshot(self) -> _Snapshot:
        return getattr(self._pinned, "snapshot", None) or self._cache.load()

    def while_unchanged(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`'s value for `key`, kept until this store's reads could give another:
        a note's file changed (the scan's fingerprint), a use counted or usage.json
        rewritten, or a note's verify_by passed. For what is derived from the store alone
        and asked for far more often than the store changes (the idle loop's ranking of a
        group's likely notes, every idle second: issue 58, item 4). The value is shared:
        `compute` returns something its callers do not change (a tuple)."""
        snap = self._read_snapshot()
        stamp = (snap.fingerprint, self._usage.stamp())
        now = self._now()
        kept = self._derived.get(key)
        if kept is not None and kept[0] == stamp and (kept[1] is None or now < kept[1]):
            return kept[2]
        value = compute()
        if len(self._derived) >= MAX_DERIVED:
            self._derived.clear()
        self._derived[key] = (stamp, _next_deadline(snap.notes.values(), now), value)
        return value

    def get(self, note_id: str) -> Note | None:
        """A note by id, live or archived."""
        note = self._read_snapshot().notes.get(note_id)
        return _copy(note) if note is not None else None

    def missing(self, note_ids: Iterable[str]) -> set[str]:
        """The ids among `note_ids` that no note has, live or archived (deleted): one
        look at the snapshot and no copies. A replayed record's shared context names
        every note of the index, and copying each of them to learn it exists was a tenth
        of a request's own time under load (bench/overhead)."""
        notes = self._read_snapshot().notes
        return {note_id for note_id in note_ids if note_id not in notes}

    def list(
        self,
        *,
        scope: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
        state: str = "live",
        include_stale: bool = True,
    ) -> list[Note]:
        """Notes matching every given filter, newest update first.

        ``include_stale=False`` drops notes past ``verify_by`` (never injected).
        """
        filters = _filters(scope, kind, status, project, session, state)
        return [_copy(n) for n in self._newest_first(filters, include_stale)]

    def ids(
        self,
        *,
        scope: str | None = None,
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
        include_stale: bool = True,
    ) -> frozenset[str]:
        """The ids of the live notes matching every filter, as ``list`` would give them,
        with no copy and no sort: what a visibility check needs. Kept with the snapshot
        they came from, so a 10,000-note store is filtered once a scan, not once a search."""
        snap = self._read_snapshot()
        key = (scope, None if project is None else os.fspath(project), session, include_stale)
        found = snap.id_sets.get(key)
        if found is None:
            filters = _filters(scope, None, None, project, session, "live")
            now = self._now()
            found = frozenset(n.id for n in snap.notes.values() if _matches(n, filters)
                              and (include_stale or not n.is_stale(now)))
            snap.id_sets[key] = found
        return found

    def page(
        self,
        *,
        offset: int = 0,
        limit: int = 50,
        scope: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
        state: str = "live",
    ) -> tuple[list[Note], int]:
        """One page of ``list`` (newest update first) and how many notes match in all:
        only the page's notes are copied, so a screen pages a large store cheaply."""
        filters = _filters(scope, kind, status, project, session, state)
        matching = self._newest_first(filters, include_stale=True)
        return [_copy(n) for n in matching[offset:offset + limit]], len(matching)

    def _newest_first(self, filters: dict, include_stale: bool) -> list[Note]:
        """The snapshot's own notes (not copies) that match, newest update first."""
        now = self._now()
        notes = [n for n in self._read_snapshot().notes.values()
                 if _matches(n, filters) and (include_stale or not n.is_stale(now))]
        notes.sort(key=lambda n: n.updated, reverse=True)
        return notes

    def scope_counts(self) -> dict[tuple[str, str | None], dict[str, int]]:
        """Live and archived notes of each scope (user, each project, each session)."""
        counts: dict[tuple[str, str | None], dict[str, int]] = {}
        for note in self._read_snapshot().notes.values():
            entry = counts.setdefault((note.scope, note.scope_key), {"live": 0, "archived": 0})
            entry["archived" if note.archived else "live"] += 1
        return counts

    def revisions(self, note_id: str) -> list[tuple[int, str]]:
        """The earlier texts of a note, oldest first: ``(revision, file text)``. The note's
        own file is the newest revision."""
        folder = self.layout.revisions_dir / note_id
        if not folder.is_dir():
            return []
        found = []
        for path in folder.glob("*.md"):
            if path.stem.isascii() and path.stem.isdigit():
                found.append((int(path.stem), path.read_text(encoding="utf-8")))
        return sorted(found)

    def search(
        self,
        query: str,
        *,
        scope: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
        state: str = "live",
        limit: int = 10,
        include_stale: bool = True,
    ) -> list[tuple[Note, float]]:
        """BM25 over title, tags and body: ``(note, score)`` pairs, best first.

        ``include_stale=False`` drops notes past ``verify_by`` (never injected).
        """
        filters = _filters(scope, kind, status, project, session, state)
        now = self._now()
        snap = self._read_snapshot()
        if not snap.notes:  # nothing to find: skip building a query from a long message
            return []
        if not self._index.is_fresh(snap.fingerprint):
            with self._lock:
                snap = self._cache.fresh()
        index_filters = {k: v for k, v in filters.items() if k != "state" or v != "all"}
        hits = self._index.search(query, index_filters, limit=max(limit, 0) * 2 + 5)
        out: list[tuple[Note, float]] = []
        for note_id, score in hits:
            note = snap.notes.get(note_id)
            # The files are the truth: check the filters again on the note itself.
            if note is None or not _matches(note, filters):
                continue
            if include_stale or not note.is_stale(now):
                out.append((_copy(note), score))
                if 0 < limit <= len(out):  # the rest would be copied to be dropped
                    break
        return out[:limit]

    def dedupe_match(
        self,
        *,
        title: str,
        body: str = "",
        tags: Iterable[str] | str | None = None,
        scope: str = "user",
        project: str | os.PathLike[str] | None = None,
        session: str | None = None,
    ) -> tuple[Note, float] | None:
        """The live note in the scope that this text covers best, with its normalised BM25
        ratio (see ``conductor.notes.dedupe``). For tuning and for the dashboard; no write."""
        where = resolve_scope(scope, project, session)
        if isinstance(where, Refusal):
            raise ValueError(where.detail)
        with self._lock:
            snap = self._cache.fresh()
        probe = Note(
            id="", title=title, kind="reference", scope=scope, body=body, tags=clean_tags(tags)
        )
        return dedupe.closest(
            self._index, snap.notes, note_text(probe), _scope_filters(where.scope, where.key)
        )
