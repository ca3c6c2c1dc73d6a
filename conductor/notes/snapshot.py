"""The user's notes as the files say now: scan, parse cache, and the index kept in step."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from conductor.notes.note_format import Note, NoteFormatError, parse
from conductor.search.notes_bm25 import NoteIndex
from conductor.storage.atomic import remove_file

log = logging.getLogger(__name__)

# The folders a user's notes live in, in scan order, and whether they hold archived notes.
_TREES = (("user", False), ("projects", False), ("sessions", False), ("archive", True))

# A scan stands while no folder of the tree has changed (a note written, renamed or removed
# changes its folder: every write here is a rename into place), for at most this long:
# an edit made in place by hand changes no folder, so it is seen within a second. Then,
# while still no folder has changed, each file the scan saw is statted again (not listed,
# walked, sorted nor hashed): when none changed the scan stands another second.
SCAN_STANDS_S = 1.0
# Folder times are coarse (a kernel tick): a folder changed this close to a scan may change
# again within the same tick unseen, so such a scan is not kept.
COARSE_MTIME_S = 0.05


@dataclass
class _Snapshot:
    """The user's notes as the files say now."""

    notes: dict[str, Note]  # id -> newest copy
    stale_copies: list[Path]  # older copies left by a crash between write and unlink
    fingerprint: str
    # Id sets already filtered out of these notes (NoteReads.ids), by their filters: a
    # snapshot never changes, and stands a second at most (one that stands longer is a new
    # snapshot of the same notes each second: the filters read the clock, verify_by)
    id_sets: dict[tuple, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Kept:
    """The last scan while it stands: its snapshot, each folder's mtime and each file's
    signature as it saw them, and when it was made or last found unchanged."""

    snapshot: _Snapshot
    folders: dict[str, int]
    files: list[tuple[str, tuple[int, int, int]]]
    since: float


class NoteCache:
    """Loads one user's notes from the files, parsing only the files that changed, and
    keeps the search index in step with them."""

    def __init__(self, user_dir: Path, index: NoteIndex) -> None:
        self._user_dir = os.fspath(user_dir)
        self._index = index
        self._parsed: dict[str, tuple[tuple[int, int, int], Note]] = {}
        self._kept: _Kept | None = None  # the last scan, while it stands

    def forget(self) -> None:
        """Drop every parsed note (the tree was deleted)."""
        self._parsed.clear()
        self._kept = None

    def fresh(self) -> _Snapshot:
        """A snapshot with no stale copies left and an index that matches it: always a
        scan (a write must start from what the files say this moment)."""
        self._kept = None
        snap = self.load()
        if snap.stale_copies:
            for path in snap.stale_copies:
                remove_file(path)
            self._kept = None
            snap = self.load()
        if not self._index.is_fresh(snap.fingerprint):
            try:
                self._index.rebuild(snap.notes.values(), snap.fingerprint)
            except (OSError, ValueError):
                log.exception("rebuilding the search index failed")
        return snap

    def reindex(self, ids: Iterable[str]) -> None:
        """Bring the index up to date with a write that touched ``ids``."""
        self._kept = None  # this process's own write: seen at once, whatever the clock says
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
        """The notes as the files say now: the last scan while no folder of the tree has
        changed (for SCAN_STANDS_S, then again each time no file it saw has changed
        either), else a scan of the tree that parses only the files changed since the
        last one.

        Runs on every read (the files are the truth): a scan stats every file (90 ms on
        10,000 notes), the check that the last one stands stats the folders only. It works
        on path strings: pathlib objects made it several times slower on a 50-note store.
        """
        kept = self._kept
        if kept is not None and _folder_times(kept.folders) == kept.folders:
            if time.monotonic() - kept.since < SCAN_STANDS_S:
                return kept.snapshot
            stands = self._still(kept)
            if stands is not None:
                return stands
        started, wall = time.monotonic(), time.time()
        folders: dict[str, int] = {}
        files: list[tuple[str, tuple[int, int, int]]] = []
        snap = self._scan_tree(folders, files)
        newest = max(folders.values(), default=0) / 1e9
        self._kept = _Kept(snap, folders, files, started) \
            if wall - newest > COARSE_MTIME_S else None
        return snap

    def _still(self, kept: _Kept) -> _Snapshot | None:
        """The kept scan again, a second later, when no folder changed (checked by the
        caller) and every file it saw has its signature still: what a new scan would find,
        from one stat a file, without listing, walking, sorting or hashing the tree again
        (the overhead bench's users come back every 0.5-1.5 s: a scan each second was
        about a sixth of a memory-on request's own CPU). None when a file changed (an
        edit in place): then the tree is scanned."""
        started, wall = time.monotonic(), time.time()
        newest = 0
        for path, signature in kept.files:
            try:
                st = os.stat(path)
            except OSError:
                return None
            if (st.st_ino, st.st_mtime_ns, st.st_size) != signature:
                return None
            newest = max(newest, st.st_mtime_ns)
        # a new snapshot of the same notes: its id sets are filtered afresh (the clock)
        snap = dataclasses.replace(kept.snapshot, id_sets={})
        # a file changed this close to now may change again within its coarse tick unseen
        self._kept = dataclasses.replace(kept, snapshot=snap, since=started) \
            if wall - newest / 1e9 > COARSE_MTIME_S else None
        return snap

    def _scan_tree(self, folders: dict[str, int],
                   files: list[tuple[str, tuple[int, int, int]]]) -> _Snapshot:
        """Scan every note file, recording each folder's mtime in `folders` and each
        file's signature in `files`."""
        user_dir = self._user_dir
        skip = len(user_dir) + 1  # path[skip:] is the path relative to the user folder
        stamps: list[str] = []  # hashed once at the end: one update a file cost 10% here
        best: dict[str, Note] = {}
        losers: list[Path] = []
        seen: set[str] = set()
        for path, archived, st in self._scan(user_dir, folders):
            signature = (st.st_ino, st.st_mtime_ns, st.st_size)
            files.append((path, signature))
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
    def _scan(user_dir: str, folders: dict[str, int]
              ) -> Iterator[tuple[str, bool, os.stat_result]]:
        """Every note file under the user folder: (path, archived, stat), in a fixed order;
        each folder's mtime goes in `folders`. Not the user folder's own: a tree made
        later is seen by its own entry (-1 until it is made), and the user folder changes
        with every write of usage.json, INDEX.md and revisions/, which hold no note (in the
        overhead bench, the usage counts written after the answers sent 45 of a round's
        120 reads to a scan of the whole tree)."""
        for top, archived in _TREES:
            for path, st in _walk(os.path.join(user_dir, top), folders):
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


def _folder_times(folders: dict[str, int]) -> dict[str, int]:
    """Each folder's mtime now (-1: gone)."""
    now: dict[str, int] = {}
    for folder in folders:
        try:
            now[folder] = os.stat(folder).st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            now[folder] = -1
    return now


def _walk(folder: str, folders: dict[str, int]) -> Iterator[tuple[str, os.stat_result]]:
    """The note files under `folder` with their stats, sorted by name at each level; each
    folder walked goes in `folders` with its mtime taken before it is listed.

    Names, not os.scandir's entries: a large folder's entries, all alive while it is
    walked, were promoted by the garbage collector and set off a full collection every
    few scans of a 10,000-note store (a pause of 150 ms)."""
    try:
        folders[folder] = os.stat(folder).st_mtime_ns
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        folders[folder] = -1  # made later: its parent's mtime changes then too
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
                yield from _walk(path, folders)
        elif name.endswith(".md"):
            yield path, st


def _newest(a: Note, b: Note) -> Note:
    """The newer of two copies of one note (every write appends to the changelog)."""
    return b if (b.generation, b.archived) > (a.generation, a.archived) else a
