"""What the server added to an answer the client was shown: its status lines.

A client sends its history back with the status lines (`› remembered: ...`) the server put
at the end of an answer. Only those are taken off again, recognised by the exact text the
client was shown, never by pattern: a line the model wrote itself that looks like a status
line is part of the answer and stays.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_ANSWERS = 4096


def _key(user: str | None, text: str) -> bytes:
    """One user's answer: another user sending the same text is not rewritten by it."""
    digest = hashlib.blake2b(f"{user}\0".encode("utf-8", "surrogatepass"), digest_size=16)
    digest.update(text.strip().encode("utf-8", "surrogatepass"))
    return digest.digest()


@dataclass
class ShownAnswers:
    """(user, answer as shown with status lines) -> the answer as the model wrote it (LRU).

    Saved with the ledger's files (`conductor/ledger/files.py`, one file a user): after a
    restart a client still sends its answers back with the lines, and a miss renders them
    afresh; without the map the lines would reach the model inside its own answers."""

    max_answers: int = MAX_ANSWERS
    # key -> (user, shown, written)
    _answers: OrderedDict[bytes, tuple[str | None, str, str]] = field(
        default_factory=OrderedDict)
    # (user, written) -> the key of its newest shown form: a client that sends an answer
    # back without the lines is sending the same message (`as_shown`)
    _by_written: dict[bytes, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: set[str | None] = field(default_factory=set)  # users, since `take_changes`

    def remember(self, user: str | None, shown: str, written: str) -> None:
        if shown.strip() == written.strip():
            return
        with self._lock:
            self._put(user, shown, written)
            self._changed.add(user)
            while len(self._answers) > self.max_answers:
                self._changed.add(self._pop_oldest())

    def _put(self, user: str | None, shown: str, written: str) -> None:
        key = _key(user, shown)
        self._answers[key] = (user, shown, written)
        self._answers.move_to_end(key)
        self._by_written[_key(user, written)] = key

    def _pop_oldest(self) -> str | None:
        key, (user, _, written) = self._answers.popitem(last=False)
        self._unlink(key, user, written)
        return user

    def _unlink(self, key: bytes, user: str | None, written: str) -> None:
        if self._by_written.get(_key(user, written)) == key:
            del self._by_written[_key(user, written)]

    def as_written(self, user: str | None, content: str) -> str:
        """The answer without the status lines the server added to `user`'s answer;
        unchanged otherwise."""
        with self._lock:
            found = self._answers.get(_key(user, content))
            return content if found is None else found[2]

    def as_shown(self, user: str | None, content: str) -> str:
        """The answer as `user` was shown it, status lines included, where `content` is
        what the model wrote of one (a client that drops the lines it displays apart, or
        sends back only what the model said); unchanged otherwise. The ledger knows an
        answer by its shown form: both forms then find the record, and derive one
        session."""
        with self._lock:
            if _key(user, content) in self._answers:  # shown already
                return content
            key = self._by_written.get(_key(user, content))
            return content if key is None else self._answers[key][1]

    def for_user(self, user: str | None):
        """`as_written` for one user's messages (what render_chat takes)."""
        return lambda content: self.as_written(user, content)

    def for_shown(self, user: str | None):
        """`as_shown` for one user's messages (what the ledger matches)."""
        return lambda content: self.as_shown(user, content)

    def forget_user(self, user: str | None) -> int:
        """The user's delete: their answers go (and their file with the next save).
        Returns how many."""
        with self._lock:
            mine = [key for key, (owner, _, _) in self._answers.items() if owner == user]
            for key in mine:
                _, _, written = self._answers.pop(key)
                self._unlink(key, user, written)
            self._changed.add(user)
            return len(mine)

    def take_changes(self) -> dict[str | None, list[tuple[str, str]]]:
        """The users whose answers changed since the last call, each with all of its
        (shown, written) pairs, oldest first (an empty list: none left)."""
        with self._lock:
            changed = {user: [] for user in self._changed}
            for owner, shown, written in self._answers.values():
                if owner in changed:
                    changed[owner].append((shown, written))
            self._changed.clear()
        return changed

    def load(self, user: str | None, pairs: list[tuple[str, str]]) -> None:
        """Saved pairs back, as `remember` made them (not marked as changed)."""
        with self._lock:
            for shown, written in pairs:
                self._put(user, shown, written)
            while len(self._answers) > self.max_answers:
                self._pop_oldest()
