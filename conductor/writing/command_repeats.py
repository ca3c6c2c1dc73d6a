"""A memory command is carried out once a message (issue 68): a retry or a regenerate sends
the very same user message again, and it must not archive (or write) a second time.

**The same message** is the same conversation up to and including that user message: the
user, the session, the project, and the digest of every visible message of the request
(which ends with the user's message: only then is a command read). A later turn saying the
same words again has a longer history, so it is a new command; a first message sent again
in a new conversation without a session id is, by construction, the same as a regenerate
of it (the derived session is made of the opening), so a handled message is remembered for
`REPEAT_WINDOW` only, and at most `KEPT` of them a user.

What is kept, in `commands.json` in the user's notes folder (gone with the user): each
message's key (a digest: no words), when it was handled, and its outcome as verbs and note
ids (the titles are read back from the store, so a note deleted since leaves no title
behind). The outcome of a repeat says "already archived", "already remembered", ...:
nothing was done this time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from conductor.ledger.records import VisibleMessage
from conductor.storage.atomic import FileLock, atomic_write

FILE_NAME = "commands.json"
# A command's check, its carrying out and its record are one step under this flock (a
# retry racing the first request waits, then finds it handled), in any process or replica.
LOCK_NAME = "commands.lock"
REPEAT_WINDOW = timedelta(hours=24)
KEPT = 256


def message_key(user: str, session: str, project: str | None,
                messages: Sequence[VisibleMessage]) -> str:
    """The key of the user message `messages` end with, in its conversation."""
    digest = hashlib.blake2b(json.dumps([user, session, project or ""]).encode(),
                             digest_size=16)
    for message in messages:
        digest.update(message.digest())
    return digest.hexdigest()


def lock_for(path: Path) -> FileLock:
    """The lock of the handled commands kept at `path`: an flock on `LOCK_NAME` beside it.
    A new object a call: two objects on one file exclude each other, threads of one
    process too (a command holds it once, never nested)."""
    return FileLock(path.with_name(LOCK_NAME))


# What a repeat says of each verb the first time said.
REPEATED = {"remembered": "already remembered", "updated": "already updated",
            "archived": "already archived"}
Handled = list[tuple[str, str | None, str | None]]  # (verb, note id, reason), a status line


class HandledCommands:
    """The messages whose command was carried out, in one user's notes folder.

    One object a command, used under `lock_for(path)`: `record` writes back what `lookup`
    read (the file is read once a command; nothing else writes it while the lock is held).
    """

    def __init__(self, user_dir: Path) -> None:
        self.path = user_dir / FILE_NAME
        self._entries: dict[str, dict] | None = None

    def lookup(self, key: str, now: datetime) -> Handled | None:
        """What the message `key` did, when it was handled within the window."""
        entry = self._read().get(key)
        if entry is None or _age(entry, now) > REPEAT_WINDOW:
            return None
        return [(str(v), n, r) for v, n, r in entry.get("did", [])]

    def record(self, key: str, now: datetime, did: Handled) -> None:
        entries = {k: e for k, e in self._read().items() if _age(e, now) <= REPEAT_WINDOW}
        entries[key] = {"at": now.timestamp(), "did": [list(d) for d in did]}
        newest = sorted(entries.items(), key=lambda item: item[1]["at"])[-KEPT:]
        atomic_write(self.path, json.dumps(dict(newest)), kind="commands", durable=False)
        self._entries = dict(newest)

    def _read(self) -> dict[str, dict]:
        if self._entries is None:
            self._entries = _load(self.path)
        return self._entries


def _load(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):  # none yet, or torn: nothing handled
        return {}
    return data if isinstance(data, dict) else {}


def _age(entry: dict, now: datetime) -> timedelta:
    return timedelta(seconds=now.timestamp() - float(entry.get("at", 0.0)))
