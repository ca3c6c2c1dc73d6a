"""The append-only journal: one JSON line per write, refusal, injection, user edit and
nightly run.

It must never hold a title or a body (the journal outlives deletions), so an entry may
only use the keys in ``ALLOWED_KEYS`` and its values are codes, ids and counts. Free text
(archive reasons, titles, bodies) has no key to travel in. Each entry names its user;
a user's delete takes theirs out and leaves one entry of the delete (`erase_user`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from conductor.storage.atomic import append_line, rewrite_log
from conductor.storage.clock import format_time, utc_now
from conductor.storage.write_behind import AFTER_ANSWER

ALLOWED_KEYS = frozenset(
    {
        "at",
        "user",
        "op",
        "ok",
        "reason",
        "id",
        "ids",
        "scope",
        "kind",
        "status",
        "project",
        "session",
        "source",
        "by",
        "via",
        "revised_existing",
        "revision",
        "redactions",
        "request_id",
        "counts",
        "fence",  # replicas: the writer's fencing token (conductor/storage/fence.py)
    }
)
MAX_STRING = 200
# Entries `append_later` keeps until the write-behind thread writes them, per journal
# file (every store's Journal object of one root shares them): one write and one fsync a
# batch. A user's delete takes theirs out of here too.
Told = Callable[[dict[str, Any]], None] | None  # a Journal's on_append when it was made
_LATER: dict[Path, list[tuple[dict[str, Any], Told]]] = {}
_LATER_LOCK = threading.Lock()
_WRITING = threading.Lock()


class Journal:
    """Appends entries to ``journal.jsonl``; safe across threads and processes."""

    def __init__(self, path: Path, clock: Callable[[], datetime] = utc_now) -> None:
        self.path = path
        self._clock = clock
        # Told each entry once written (the server's metrics count notes written and
        # refused); it sees what the journal holds, so no title or body.
        self.on_append: Callable[[dict[str, Any]], None] | None = None

    def append(self, **entry: Any) -> dict[str, Any]:
        """Write one entry; ValueError for a key or value the journal does not take.
        Entries `append_later` keeps for this file go first, in the same write: the file
        stays in the order entries were made."""
        record = self._record(entry)
        self._write([(record, self.on_append)])
        return record

    def append_later(self, **entry: Any) -> dict[str, Any]:
        """`append`'s entry (checked and stamped now: ValueError now), written by the
        write-behind thread with the others kept meanwhile, in one write and one fsync,
        or by the next `append` to this file, whichever comes first: for the bookkeeping
        after an answer, which nothing waits for (issue 58)."""
        record = self._record(entry)
        with _LATER_LOCK:
            _LATER.setdefault(self.path, []).append((record, self.on_append))
        AFTER_ANSWER.later(("journal", self.path), self._write)
        return record

    def _write(self, records: list[tuple[dict[str, Any], Told]] | None = None) -> None:
        """The kept entries of this file, then `records`, in one write (each told after)."""
        with _WRITING:  # kept entries are taken and written in one step: never reordered
            with _LATER_LOCK:
                kept = _LATER.pop(self.path, [])
            batch = [*kept, *(records or [])]
            if not batch:
                return
            try:
                # O_APPEND and an flock keep lines whole across threads and processes; a
                # torn last line a crash left is ended first, so it is skipped alone
                # (counted by `read`).
                append_line(self.path, "".join(_line(r) + "\n" for r, _ in batch),
                            kind="journal", fsync=True)
            except BaseException:
                with _LATER_LOCK:  # kept for the next write, ahead of what came meanwhile
                    _LATER[self.path] = [*kept, *_LATER.get(self.path, [])]
                raise
        for record, told in batch:
            if told is not None:
                told(record)

    def erase_user(self, user: str, op: str = "delete_user", **audit: Any) -> int:
        """The user's delete: every entry naming `user` goes but the records of earlier
        deletes (`op`), and this delete's record (`op` and `audit`, naming the user)
        takes their place at the end, in one replace of the file under the appenders'
        lock. A line that is not an entry (torn by a crash) goes if it names the user.
        Returns the entries gone."""
        record = self._record({"user": user, "op": op, **audit})
        needle = json.dumps({"user": user})[1:-1].encode()  # `"user": "<name>"`, as written
        gone = 0
        with _LATER_LOCK:  # not yet written: they go before they are
            kept_later = [(r, t) for r, t in _LATER.get(self.path, []) if r.get("user") != user]
            gone += len(_LATER.get(self.path, [])) - len(kept_later)
            _LATER[self.path] = kept_later

        def without_user(data: bytes) -> bytes:
            nonlocal gone
            kept = []
            for line in data.splitlines():
                if needle in line:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        entry = None
                    if not isinstance(entry, dict) or (entry.get("user") == user
                                                       and entry.get("op") != op):
                        gone += 1
                        continue
                if line:
                    kept.append(line + b"\n")
            return b"".join(kept) + _line(record).encode() + b"\n"

        rewrite_log(self.path, without_user, kind="journal")
        return gone

    def _record(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The entry as written: its time first; ValueError for a key or value the
        journal does not take."""
        unknown = set(entry) - ALLOWED_KEYS
        if unknown:
            raise ValueError(f"journal keys not allowed: {sorted(unknown)}")
        record = {"at": format_time(self._clock()), **entry}
        _check_value(record)
        return record

    def flush_later(self) -> None:
        """Write the entries `append_later` keeps for this file now (a reader that must
        see them; it takes no lock but the file's own)."""
        AFTER_ANSWER.drain(("journal", self.path))

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every entry, oldest first (a line a crash tore is skipped)."""
        self.flush_later()
        return (entry for entry in self._parsed() if entry is not None)

    def newest_first(self, block: int = 1 << 16) -> Iterator[dict[str, Any]]:
        """Every entry, newest first, read from the file's end a `block` at a time: a
        caller that wants the latest few reads that much of a journal years long (a
        line a crash tore is skipped)."""
        self.flush_later()
        for line in _lines_backwards(self.path, block):
            try:
                entry = json.loads(line.decode("utf-8", errors="replace"))
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                yield entry

    def read(self) -> JournalRead:
        """Every entry, and how many torn lines were skipped."""
        self.flush_later()
        read = JournalRead()
        for entry in self._parsed():
            if entry is None:
                read.torn += 1
            else:
                read.entries.append(entry)
        return read

    def _parsed(self) -> Iterator[dict[str, Any] | None]:
        """Each line's entry, None for a line that is not one."""
        try:
            handle = self.path.open("r", encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        with handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    entry = None
                yield entry if isinstance(entry, dict) else None


def _lines_backwards(path: Path, block: int) -> Iterator[bytes]:
    """The file's lines, last first, without their newlines (none for an empty file or
    a missing one). A newline byte is never inside a UTF-8 character, so the bytes split
    where the text does."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, 2)
        partial = b""  # the start of the line the last block read ends inside
        while end > 0:
            start = max(0, end - block)
            handle.seek(start)
            chunk = handle.read(end - start) + partial
            end = start
            lines = chunk.split(b"\n")
            partial = lines.pop(0)  # may go on in the block before
            for line in reversed(lines):
                if line:
                    yield line
        if partial:
            yield partial


@dataclass
class JournalRead:
    entries: list[dict[str, Any]] = field(default_factory=list)
    torn: int = 0  # lines a crash cut short (or anything else that is not an entry)


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


def _check_value(value: Any) -> None:
    """Only short strings, numbers, booleans, None, and lists/dicts of them."""
    if value is None or isinstance(value, bool | int | float):
        return
    if isinstance(value, str):
        if len(value) > MAX_STRING or "\n" in value:
            raise ValueError("journal strings are short codes, not text")
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_value(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _check_value(str(key))
            _check_value(item)
        return
    raise ValueError(f"journal value of type {type(value).__name__} not allowed")
