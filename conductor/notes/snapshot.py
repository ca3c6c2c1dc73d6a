"""The user's notes as the files say now: scan, parse cache, and the index kept in step."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from conductor.notes.note_format import Note, NoteFormatError, parse
from conductor.search.notes_bm25 import NoteIndex
from conductor.storage.atomic import remove_file

log = logging.getLogger(__name__)

# The folders a user's notes live in, in scan order, and whether they hold archived notes.
_TREES = (("user", False), ("projects", False), ("sessions", False), ("archive", True))


@dataclass
class _Snapshot:
    """The user's notes as the files say now."""

    notes: dict[str, Note]  # id -> newest copy
    stale_copies: list[Path]  # older copies left by a crash between write and unlink
    fingerprint: str


class NoteCache:
    """Loads one user's notes from the files, parsing only the files that changed, and
    keeps the search index in step with them."""

    def __init__(self, user_dir: Path, index: NoteIndex) -> None:
        self._user_dir = os.fspath(user_dir)
        self._index = index
        self._parsed: dict[str, tuple[tuple[int, int, int], Note]] = {}

    def forget(self) -> None:
        """Drop every parsed note (the tree was deleted)."""
        self._parsed.clear()

    def fresh(self) -> _Snapshot:
        """A snapshot with no stale copies left and an index that matches it."""
        snap = self.load()
        if snap.stale_copies:
            for path in snap.stale_copies:
                remove_file(path)
            snap = self.load()
        if not self._index.is_fresh(snap.fingerprint):
            try:
                self._index.rebuild(snap.notes.values(), snap.fingerprint)
            except (OSError, ValueError):
                log.exception("rebuilding the search index failed")
        return snap

    def reindex(self, ids: Iterable[str]) -> None:
        """Bring the index up to date with a write that touched ``ids``."""
        snap = self.load()
        upserts = [snap.notes[i] for i in ids if i in snap.notes]
        removed = [i for i in ids if i not in snap.notes]
        try:
            self._index.apply(upserts, removed, snap.fingerprint)
        except (OSError, ValueError):
            # The write stands; the index is derived and is rebuilt when next used.
            log.exception("updating the search index failed")
            self._index.wipe()

    def load(self) -> _Snapshot:
        """Scan the tree; parse only files changed since the last scan.

        Runs on every read (the files are the truth), so it works on path strings:
        pathlib objects made it several times slower on a 50-note store.
        """
        user_dir = self._user_dir
        skip = len(user_dir) + 1  # path[skip:] is the path relative to the user folder
        stamps: list[str] = []  # hashed once at the end: one update a file cost 10% here
        best: dict[str, Note] = {}
        losers: list[Path] = []
        seen: set[str] = set()
        for path, archived, st in self._scan(user_dir):
            signature = (st.st_ino, st.st_mtime_ns, st.st_size)
            stamps.append(f"{path[skip:]}\0{signature}\n")
            seen.add(path)
            note = self._parse_cached(path, signature)
            if note is None:
                continue
            if archived and note.archived_at is None:
                # Moved into the archive without its metadata: date it by the file.
                note.archived_at = datetime.fromtimestamp(st.st_mtime).astimezone()
            elif not archived:
                note.archived_at = None
            current = best.get(note.id)
            if current is None:
                best[note.id] = note
                continue
            newer = _newest(current, note)
            older = note if newer is current else current
            best[note.id] = newer
            if older.path is not None:
                losers.append(older.path)
        for path in [p for p in self._parsed if p not in seen]:
            del self._parsed[path]
        digest = hashlib.sha256("".join(stamps).encode()).hexdigest()
        return _Snapshot(best, losers, digest)

    @staticmethod
    def _scan(user_dir: str) -> Iterator[tuple[str, bool, os.stat_result]]:
        """Every note file under the user folder: (path, archived, stat), in a fixed order."""
        for top, archived in _TREES:
            for path, st in _walk(os.path.join(user_dir, top)):
                yield path, archived, st

    def _parse_cached(self, path: str, signature: tuple[int, int, int]) -> Note | None:
        cached = self._parsed.get(path)
        if cached is not None and cached[0] == signature:
            return cached[1]
        file = Path(path)
        try:
            note = parse(file.read_text(encoding="utf-8"), file)
        except FileNotFoundError:
            return None
        except (NoteFormatError, UnicodeDecodeError) as exc:
            log.warning("skipping unreadable note file %s: %s", file, exc)
            return None
        self._parsed[path] = (signature, note)
        return note


def _walk(folder: str) -> Iterator[tuple[str, os.stat_result]]:
    """The note files under `folder` with their stats, sorted by name at each level.

    Names, not os.scandir's entries: a large folder's entries, all alive while it is
    walked, were promoted by the garbage collector and set off a full collection every
    few scans of a 10,000-note store (a pause of 150 ms)."""
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if name.startswith("."):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if not os.path.islink(path):  # as os.walk: a linked folder is not walked
                yield from _walk(path)
        elif name.endswith(".md"):
            yield path, st


def _newest(a: Note, b: Note) -> Note:
    """The newer of two copies of one note (every write appends to the changelog)."""
    return b if (b.generation, b.archived) > (a.generation, a.archived) else a
