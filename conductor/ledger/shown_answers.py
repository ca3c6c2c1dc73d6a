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


# An answer's place: the digest of the conversation before it (`conductor.memory.context`,
# `conversation_digest`), so that one written text ("Noted.") said in many conversations
# is each conversation's own answer.
Before = bytes


def _written_key(user: str | None, before: Before, written: str) -> bytes:
    return _key(user, written) + before


def _key(user: str | None, text: str) -> bytes:
    """One user's answer: another user sending the same text is not rewritten by it."""
    digest = hashlib.blake2b(f"{user}\0".encode("utf-8", "surrogatepass"), digest_size=16)
    digest.update(text.strip().encode("utf-8", "surrogatepass"))
    return digest.digest()


@dataclass
class ShownAnswers:
    """(user, answer as shown with status lines) -> the answer as the model wrote it (LRU);
    and back, (user, its place, what the model wrote) -> the answer as shown.

    Saved with the ledger's files (`conductor/ledger/files.py`, one file a user): after a
    restart a client still sends its answers back with the lines, and a miss renders them
    afresh; without the map the lines would reach the model inside its own answers."""

    max_answers: int = MAX_ANSWERS
    # key -> (user, shown, written, before: its place, or b"" when not known)
    _answers: OrderedDict[bytes, tuple[str | None, str, str, Before]] = field(
        default_factory=OrderedDict)
    # (user, place, written) -> the key of the answer shown there: a client that sends an
    # answer back without the lines is sending the same message (`as_shown`)
    _by_written: dict[bytes, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: set[str | None] = field(default_factory=set)  # users, since `take_changes`

    def remember(self, user: str | None, shown: str, written: str,
                 before: Before = b"") -> None:
        """`before`: the answer's place (without one, only `as_written` knows it)."""
        if shown.strip() == written.strip():
            return
        with self._lock:
            self._put(user, shown, written, before)
            self._changed.add(user)
            while len(self._answers) > self.max_answers:
                self._changed.add(self._pop_oldest())

    def _put(self, user: str | None, shown: str, written: str, before: Before) -> None:
        key = _key(user, shown)
        if key in self._answers:  # the same shown text, written otherwise: the old link goes
            self._unlink(key)
        self._answers[key] = (user, shown, written, before)
        self._answers.move_to_end(key)
        if before and written.strip():
            self._by_written[_written_key(user, before, written)] = key

    def _pop_oldest(self) -> str | None:
        key = next(iter(self._answers))
        user = self._answers[key][0]
        self._unlink(key)
        del self._answers[key]
        return user

    def _unlink(self, key: bytes) -> None:
        user, _, written, before = self._answers[key]
        if before and self._by_written.get(_written_key(user, before, written)) == key:
            del self._by_written[_written_key(user, before, written)]

    def as_written(self, user: str | None, content: str) -> str:
        """The answer without the status lines the server added to `user`'s answer;
        unchanged otherwise."""
        with self._lock:
            found = self._answers.get(_key(user, content))
            return content if found is None else found[2]

    def as_shown(self, user: str | None, content: str, before: Before) -> str:
        """The answer as `user` was shown it at its place `before`, status lines included,
        where `content` is what the model wrote of one (a client that drops the lines it
        displays apart); unchanged otherwise. The ledger knows an answer by its shown form:
        both forms then find the record, and derive one session."""
        if not content.strip():
            return content
        with self._lock:
            if _key(user, content) in self._answers:  # shown already
                return content
            key = self._by_written.get(_written_key(user, before, content))
            found = None if key is None else self._answers.get(key)
            return content if found is None else found[1]

    def for_user(self, user: str | None):
        """`as_written` for one user's messages (what render_chat takes)."""
        return lambda content: self.as_written(user, content)

    def for_shown(self, user: str | None):
        """`as_shown` for one user's messages (what the ledger matches)."""
        return lambda content, before: self.as_shown(user, content, before)

    def forget_user(self, user: str | None) -> int:
        """The user's delete: their answers go (and their file with the next save).
        Returns how many."""
        with self._lock:
            mine = [key for key, found in self._answers.items() if found[0] == user]
            for key in mine:
                self._unlink(key)
                del self._answers[key]
            self._changed.add(user)
            return len(mine)

    def take_changes(self) -> dict[str | None, list[tuple[str, str, str]]]:
        """The users whose answers changed since the last call, each with all of its
        (shown, written, place as hex) triples, oldest first (an empty list: none left)."""
        with self._lock:
            changed = {user: [] for user in self._changed}
            for owner, shown, written, before in self._answers.values():
                if owner in changed:
                    changed[owner].append((shown, written, before.hex()))
            self._changed.clear()
        return changed

    def load(self, user: str | None, saved: list[tuple[str, ...]]) -> None:
        """Saved answers back, as `remember` made them (not marked as changed): (shown,
        written) pairs, or triples with the place as hex (a file of an earlier format has
        pairs)."""
        with self._lock:
            for shown, written, *place in saved:
                self._put(user, shown, written, bytes.fromhex(place[0]) if place else b"")
            while len(self._answers) > self.max_answers:
                self._pop_oldest()
