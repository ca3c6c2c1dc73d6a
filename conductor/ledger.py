"""The session ledger: exact token ids of each recorded conversation, found by what the
client was shown.

A record is a conversation as the engine ran it: the exact ids of a prompt and its answer
(held-back blocks, reasoning and tail notes included, where they were), and the *visible*
messages that produced it: what the client was shown. On the next request the ledger finds
the longest record whose visible messages equal a prefix of the client's, so the new prompt
can start with the record's exact ids and the prefix cache serves all of it.

Engine-agnostic: messages come in already normalised by the caller (`VisibleMessage`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_RECORDS = 512


@dataclass(frozen=True)
class VisibleMessage:
    """A message as the client saw it: role, text, tool calls by name and parsed arguments."""

    role: str
    content: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, canonical JSON of the arguments)

    @classmethod
    def of(cls, role: str, content: str | None,
           tool_calls: list[tuple[str, object]] | None = None) -> VisibleMessage:
        calls = tuple((name, canonical_arguments(args)) for name, args in tool_calls or ())
        return cls(role=role, content=(content or "").strip(), tool_calls=calls)

    def digest(self) -> bytes:
        payload = json.dumps([self.role, self.content, self.tool_calls], ensure_ascii=False)
        return hashlib.blake2b(payload.encode(), digest_size=16).digest()


def canonical_arguments(arguments: object) -> str:
    """Arguments as canonical JSON, whether they came as a JSON string or an object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments.strip()
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Span:
    """A run of ids in a record that the client never saw: `kind` is block, note, card..."""

    start: int
    end: int
    kind: str
    note_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Record:
    user: str
    session: str
    messages: tuple[VisibleMessage, ...]
    ids: tuple[int, ...]
    ended_cleanly: bool  # the answer ended with the end-of-turn token
    spans: tuple[Span, ...] = ()


@dataclass(frozen=True)
class Match:
    record: Record
    matched_messages: int  # the client's first N messages are this record's


def _prefix_keys(user: str, session: str,
                 messages: list[VisibleMessage] | tuple[VisibleMessage, ...]):
    """One key per prefix length (1..n): a hash chain, so all prefixes cost O(n)."""
    running = hashlib.blake2b(f"{user}\0{session}".encode(), digest_size=16)
    keys = []
    for message in messages:
        running.update(message.digest())
        keys.append(running.copy().digest())
    return keys


@dataclass
class Ledger:
    """Records by (user, session, visible messages); least recently used ones go first.

    The session is part of the key: a record carries its session's tail notes, which
    another session with the same messages must not inherit.
    """

    max_records: int = MAX_RECORDS
    _records: OrderedDict[bytes, Record] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, record: Record) -> None:
        key = _prefix_keys(record.user, record.session, record.messages)[-1]
        with self._lock:
            self._records[key] = record
            self._records.move_to_end(key)
            while len(self._records) > self.max_records:
                self._records.popitem(last=False)

    def find(self, user: str, session: str, messages: list[VisibleMessage]) -> Match | None:
        """The record of the longest proper prefix of `messages` (the last one is new)."""
        keys = _prefix_keys(user, session, messages)
        with self._lock:
            for length in range(len(messages) - 1, 0, -1):
                record = self._records.get(keys[length - 1])
                if record is not None:
                    self._records.move_to_end(keys[length - 1])
                    return Match(record, length)
        return None

    def latest(self, user: str, session: str) -> Record | None:
        """The session's most recent record: its end anchor."""
        with self._lock:
            for record in reversed(self._records.values()):
                if record.user == user and record.session == session:
                    return record
        return None

    def __len__(self) -> int:
        return len(self._records)
