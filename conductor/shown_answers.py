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


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.strip().encode("utf-8", "surrogatepass"),
                           digest_size=16).digest()


@dataclass
class ShownAnswers:
    """answer as shown (with status lines) -> the answer as the model wrote it (LRU)."""

    max_answers: int = MAX_ANSWERS
    _answers: OrderedDict[bytes, str] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, shown: str, written: str) -> None:
        if shown.strip() == written.strip():
            return
        with self._lock:
            key = _key(shown)
            self._answers[key] = written
            self._answers.move_to_end(key)
            while len(self._answers) > self.max_answers:
                self._answers.popitem(last=False)

    def as_written(self, content: str) -> str:
        """The answer without the status lines the server added; unchanged otherwise."""
        with self._lock:
            return self._answers.get(_key(content), content)
