"""The session ledger on disk, so a restart keeps what open conversations rely on.

After a restart an open conversation's next turn must find its record: the exact ids of
its last prompt and answer, with the hidden notes where they went in (and so the set of
notes already injected). The prefix cache itself is cold after a restart and is filled
once; without the record, the prompt would be rendered afresh, its notes moved, and every
later turn would pay for it.

    memory/ledger/<hash of user and session>.json   one session's latest records
    memory/ledger/shown/<hash of user>.json         the user's answers as shown and as
                                                    written (conductor/ledger/shown_answers)

Written behind, not through: `LedgerSaver` writes the sessions that changed every
`SAVE_INTERVAL_S` when no client request runs (at the latest every `MAX_DEFER_S`) and
once more on a clean shutdown, never inside a request. The files are
a cache, so they are replaced whole but not fsync'd: a crash may take back the
records since the last save, which costs those conversations one re-rendered prompt,
never a note.
They hold what the conversation held (its messages, the ids of its hidden notes), so they
are 0600 in a 0700 folder like the history turns.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
import threading
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conductor.ledger.id_blocks import flat_ids
from conductor.ledger.records import Ledger, Record, SessionKey, Span, VisibleMessage
from conductor.ledger.shown_answers import ShownAnswers
from conductor.storage.atomic import atomic_write, remove_file

log = logging.getLogger("tandem.memory")

SAVE_INTERVAL_S = 1.0
MAX_DEFER_S = 30.0
FORMAT_VERSION = 1


def encode_record(record: Record) -> dict[str, Any]:
    ids = flat_ids(record.ids)
    return {
        "messages": [[m.role, m.content, [list(c) for c in m.tool_calls]]
                     for m in record.messages],
        "ids": base64.b64encode(ids.tobytes()).decode("ascii"),
        "ended_cleanly": record.ended_cleanly,
        "spans": [[s.start, s.end, s.kind, list(s.note_ids), *([list(s.versions)]
                                                                if s.versions else [])]
                  for s in record.spans],
        "fingerprint": record.fingerprint,
        "project": record.project,
        "bare": record.bare,
        **({"shared_flags": list(record.shared_flags)} if record.shared_flags else {}),
        **({"shared_empty": True} if record.shared_empty else {}),
    }


def decode_record(user: str, session: str, data: dict[str, Any]) -> Record:
    ids = array("i")
    ids.frombytes(base64.b64decode(data["ids"]))
    messages = tuple(VisibleMessage(role, content, tuple((n, a) for n, a in calls))
                     for role, content, calls in data["messages"])
    spans = tuple(Span(start, end, kind, tuple(notes), tuple(int(v) for v in versions[0])
                       if versions else ())
                  for start, end, kind, notes, *versions in data["spans"])
    return Record(user=user, session=session, messages=messages, ids=ids,
                  ended_cleanly=bool(data["ended_cleanly"]), spans=spans,
                  fingerprint=str(data.get("fingerprint") or ""),
                  project=str(data["project"]) if data.get("project") else None,
                  bare=bool(data.get("bare")), shared_flags=_flags(data.get("shared_flags")),
                  shared_empty=data.get("shared_empty") is True)


def _flags(value: Any) -> tuple[bool, bool] | None:
    """A record's (card, reads); None when absent (a file saved before they were kept)."""
    if value is None:
        return None
    card, reads = value  # anything else: an unreadable file (ValueError, TypeError)
    return bool(card), bool(reads)


class LedgerFiles:
    """One file a session under ``<memory root>/ledger``."""

    def __init__(self, memory_root: Path) -> None:
        self.folder = memory_root / "ledger"

    def path_for(self, key: SessionKey) -> Path:
        user, session = key
        name = hashlib.blake2b(f"{user}\0{session}".encode("utf-8", "surrogatepass"),
                               digest_size=16).hexdigest()
        return self.folder / f"{name}.json"

    def save(self, changed: dict[SessionKey, list[Record]], gone: set[SessionKey]) -> None:
        for key in gone:
            remove_file(self.path_for(key), kind="ledger")
        for (user, session), records in changed.items():
            payload = {"version": FORMAT_VERSION, "user": user, "session": session,
                       "records": [encode_record(r) for r in records]}
            atomic_write(self.path_for((user, session)),
                         json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
                         kind="ledger", durable=False)

    def load_into(self, ledger: Ledger) -> int:
        """Put the saved records back, least recently used first (the ledger's own bound
        then drops the oldest sessions, and their files go too). A file that cannot be
        read is skipped and removed: it is a cache. Returns the records loaded."""
        if not self.folder.is_dir():
            return 0
        files = sorted(self.folder.glob("*.json"), key=_mtime)
        loaded = 0
        for path in files:
            try:
                data = json.loads(path.read_text(encoding="utf-8", errors="surrogatepass"))
                if data.get("version") != FORMAT_VERSION:
                    raise ValueError("another format")
                records = [decode_record(data["user"], data["session"], r)
                           for r in data["records"]]
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("ledger: an unreadable session file skipped")
                remove_file(path)
                continue
            for record in records:
                ledger.record(record)
            loaded += len(records)
        _changed, gone = ledger.take_changes()  # loaded as they were: nothing to write back
        self.save({}, gone)
        return loaded


class ShownAnswerFiles:
    """One file a user under ``<memory root>/ledger/shown``: its answers with status lines."""

    def __init__(self, memory_root: Path) -> None:
        self.folder = memory_root / "ledger" / "shown"

    def path_for(self, user: str | None) -> Path:
        name = hashlib.blake2b(f"{user}".encode("utf-8", "surrogatepass"),
                               digest_size=16).hexdigest()
        return self.folder / f"{name}.json"

    def save(self, changed: dict[str | None, list[tuple[str, ...]]]) -> None:
        for user, pairs in changed.items():
            if not pairs:
                remove_file(self.path_for(user), kind="ledger")
                continue
            payload = {"version": FORMAT_VERSION, "user": user,
                       "answers": [list(pair) for pair in pairs]}
            atomic_write(self.path_for(user),
                         json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
                         kind="ledger", durable=False)

    def load_into(self, shown: ShownAnswers) -> int:
        """The saved answers back, least recently saved user first; an unreadable file is
        skipped and removed (a cache). Returns the answers loaded."""
        if not self.folder.is_dir():
            return 0
        loaded = 0
        for path in sorted(self.folder.glob("*.json"), key=_mtime):
            try:
                data = json.loads(path.read_text(encoding="utf-8", errors="surrogatepass"))
                if data.get("version") != FORMAT_VERSION:
                    raise ValueError("another format")
                user = data["user"]
                pairs = [tuple(str(part) for part in answer) for answer in data["answers"]]
                if not all(len(answer) == 2 or (len(answer) == 3 and _HEX.fullmatch(answer[2]))
                           for answer in pairs):  # (shown, written[, its place in hex])
                    raise ValueError("an answer is a pair, or a triple with its place")
                if user is not None and not isinstance(user, str):
                    raise TypeError("user")
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("ledger: an unreadable shown-answers file skipped")
                remove_file(path)
                continue
            shown.load(user, pairs)
            loaded += len(pairs)
        return loaded


_HEX = re.compile(r"(?:[0-9a-f]{2})*")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


class LedgerSaver:
    """Writes the ledger's changes every `interval` seconds (`run`, a task on the server's
    event loop) and once more at shutdown (`save_now`: a clean stop loses nothing).

    On the loop, not in a thread: the writes are small and not fsync'd (128 sessions in
    about 40 ms here), and a thread's system calls would hand the GIL back and forth with
    the loop. Like every background task it waits while client requests run (`busy`),
    but not past `MAX_DEFER_S`: a crash under unbroken load loses at most that much."""

    def __init__(self, ledger: Ledger, files: LedgerFiles,
                 interval: float = SAVE_INTERVAL_S,
                 also: Callable[[], None] | None = None,
                 shown: tuple[ShownAnswers, ShownAnswerFiles] | None = None) -> None:
        self.ledger = ledger
        self.files = files
        self.shown = shown
        self.interval = interval
        self.also = also  # another write-behind on the same beat (the session-token list)
        self.busy: Callable[[], bool] = lambda: False  # the app says: clients are running
        self._lock = threading.Lock()  # one save at a time: the loop's and a caller's

    async def run(self) -> None:
        deferred = 0.0
        while True:
            await asyncio.sleep(self.interval)
            deferred += self.interval
            if self.busy() and deferred < MAX_DEFER_S:
                continue
            deferred = 0.0
            self.save_now()

    def save_now(self) -> None:
        with self._lock:
            changed, gone = self.ledger.take_changes()
            try:
                self.files.save(changed, gone)
                if self.shown is not None:
                    answers, files = self.shown
                    files.save(answers.take_changes())
            except OSError as exc:  # disk full, read-only: a cache, the turn is served
                log.warning("ledger: session files not saved (%s)", exc.strerror or exc)
            if self.also is not None:
                self.also()
