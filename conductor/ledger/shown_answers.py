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
    """(user, answer as shown with status lines) -> the answer as the model wrote it (LRU)."""

    max_answers: int = MAX_ANSWERS
    _answers: OrderedDict[bytes, str] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, user: str | None, shown: str, written: str) -> None:
        if shown.strip() == written.strip():
            return
        with self._lock:
            key = _key(user, shown)
            self._answers[key] = written
            self._answers.move_to_end(key)
            while len(self._answers) > self.max_answers:
                self._answers.popitem(last=False)

    def as_written(self, user: str | None, content: str) -> str:
        """The answer without the status lines the server added to `user`'s answer;
        unchanged otherwise."""
        with self._lock:
            return self._answers.get(_key(user, content), content)

    def for_user(self, user: str | None):
        """`as_written` for one user's messages (what render_chat takes)."""
        return lambda content: self.as_written(user, content)
