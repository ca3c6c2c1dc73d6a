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

import functools
import hashlib
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from conductor.ledger.id_blocks import IdBlocks

MAX_TOKENS = 4_000_000  # ids held in all (4 bytes each: 16 MB)
RECORDS_PER_SESSION = 8


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
        # surrogatepass: a lone surrogate in a client's text still names one message
        return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"),
                               digest_size=16).digest()


def canonical_arguments(arguments: object) -> str:
    """Arguments as canonical JSON, whether they came as a JSON string or an object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # nested past the parser's depth: kept as text
            return arguments.strip()
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Span:
    """A run of ids in a record that the client never saw: `kind` is block, note, card..."""

    start: int
    end: int
    kind: str
    note_ids: tuple[str, ...] = ()
    # A correction's: the version of each of its notes it gave (hidden/corrections.py)
    versions: tuple[int, ...] = ()


@dataclass(frozen=True)
class Record:
    user: str
    session: str
    messages: tuple[VisibleMessage, ...]
    ids: Sequence[int]  # held as shared blocks by the ledger (id_blocks.BlockIds)
    ended_cleanly: bool  # the answer ended with the end-of-turn token
    spans: tuple[Span, ...] = ()
    # The model, tokenizer and chat template the ids were made under (a hash): ids of
    # another tokenizer or template mean nothing to this one.
    fingerprint: str = ""
    # The project the conversation ran in (X-Tandem-Project): its hidden parts hold that
    # project's notes, so only a request of the same project replays it.
    project: str | None = None
    # Made with memory off (X-Tandem-Memory: off, a profile without memory): no hidden part
    # in it. A request with memory on replays only records with memory on, and the other
    # way round: neither loses nor gains memory's parts by a replay.
    bare: bool = False
    # What the request's shared context showed, (card, reads): the card, the notes'
    # index. The prewarm's group of the record's head after a restart
    # (conductor/hidden/prewarm.py, `PrewarmHeads.seed`); None: memory off, or a record
    # made before it was kept (such a record seeds nothing).
    shared_flags: tuple[bool, bool] | None = None
    # Laid out without a shared context because it had nothing to show (no card, no note
    # to list), not because it gave way to fit the context: a later turn with the same
    # `shared_flags` replays it as it is when the first note appears (server/turn/fit.py).
    # False (and in a file saved before it was kept): the shared context may come back.
    shared_empty: bool = False

    @functools.cached_property
    def digests(self) -> tuple[bytes, ...]:
        """Each message's digest, made once (a partial match compares them)."""
        return tuple(m.digest() for m in self.messages)


@dataclass(frozen=True)
class Match:
    record: Record
    matched_messages: int  # the client's first N messages are this record's
    # The record goes on past them with other messages (the client edited one): only the
    # ids before its message N+1 stand for the client's (server/turn/replay.py).
    partial: bool = False


def _prefix_keys(user: str, session: str,
                 messages: list[VisibleMessage] | tuple[VisibleMessage, ...],
                 project: str | None, bare: bool):
    """One key per prefix length (1..n): a hash chain, so all prefixes cost O(n).

    The project and the memory mode are part of the key, as they are of what a record may
    be replayed in (`Ledger._usable`): one session name used in two projects (or with
    memory on and off) with the same messages makes two records, and the second must not
    take the first's place."""
    scope = f"{user}\0{session}\0{'' if project is None else '+' + project}\0{int(bare)}"
    running = hashlib.blake2b(scope.encode("utf-8", "surrogatepass"), digest_size=16)
    keys = []
    for message in messages:
        running.update(message.digest())
        keys.append(running.copy().digest())
    return keys


def _shared_run(record: Record, wanted: list[bytes]) -> int:
    """How many leading messages of `record` are `wanted`'s, short of its last (that is a
    whole-record match) and backed off past tool results: consecutive tool results may
    share one block of the template, which a cut must not split."""
    digests = record.digests
    shared = 0
    limit = min(len(digests) - 1, len(wanted))
    while shared < limit and digests[shared] == wanted[shared]:
        shared += 1
    while shared and record.messages[shared - 1].role == "tool":
        shared -= 1
    return shared


SessionKey = tuple[str, str]
# A session's newest record, or None: what a reader of the ledger is handed (`Ledger.latest`)
LatestRecord = Callable[[str, str], Record | None]


def _check_spans(record: Record) -> None:
    """A record's hidden spans lie inside its ids (a replay cuts by them, the context view
    draws them): stated where records enter the ledger, as nano-vllm's block manager
    checks its own state at every change."""
    for span in record.spans:
        assert 0 <= span.start <= span.end <= len(record.ids), \
            f"a {span.kind} span [{span.start}, {span.end}) past the record's {len(record.ids)} ids"


@dataclass
class Ledger:
    """Records per (user, session): a session's latest few (its end anchor, and what a
    regenerate or a branch needs: the turns before it), bounded by the ids held in all.
    Records hold their ids in shared blocks (`id_blocks.py`): a record costs only the
    ids it does not share with another. When over, whole sessions go first, least
    recently used first.

    The session is part of the key: a record carries its session's hidden context, which
    another session with the same messages must not inherit.
    """

    max_tokens: int = MAX_TOKENS
    per_session: int = RECORDS_PER_SESSION
    # The served model's fingerprint: records are stamped with it, and only records made
    # under it are found.
    fingerprint: str = ""
    _sessions: OrderedDict[SessionKey, OrderedDict[bytes, Record]] = field(
        default_factory=OrderedDict)
    _ids: IdBlocks = field(default_factory=IdBlocks)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # What changed since `take_changes` (conductor/ledger/files.py saves it to disk)
    _changed: set[SessionKey] = field(default_factory=set)
    _gone: set[SessionKey] = field(default_factory=set)

    def record(self, record: Record) -> None:
        _check_spans(record)
        key = _prefix_keys(record.user, record.session, record.messages, record.project,
                           record.bare)[-1]
        owner = (record.user, record.session)
        with self._lock:
            record = replace(record, ids=self._ids.hold(record.ids),
                             fingerprint=record.fingerprint or self.fingerprint)
            records = self._sessions.setdefault(owner, OrderedDict())
            self._sessions.move_to_end(owner)
            if key in records:
                self._ids.release(records[key].ids)
            records[key] = record
            records.move_to_end(key)
            while len(records) > self.per_session:
                self._drop(records, next(iter(records)))
            self._changed.add(owner)
            self._gone.discard(owner)
            self._evict(keep=owner)
            # the bound holds, unless the session just written is down to its latest
            assert self._ids.ids_held <= self.max_tokens or len(records) == 1, \
                "the ledger holds more ids than its bound"
            assert len(records) <= self.per_session

    def _drop(self, records: OrderedDict[bytes, Record], key: bytes) -> None:
        self._ids.release(records.pop(key).ids)

    def _evict(self, keep: SessionKey) -> None:
        """Idle sessions go whole; the session just written keeps at least its latest."""
        while self._ids.ids_held > self.max_tokens:
            oldest = next(iter(self._sessions))
            if oldest != keep:
                for gone in self._sessions.pop(oldest).values():
                    self._ids.release(gone.ids)
                self._changed.discard(oldest)
                self._gone.add(oldest)
                continue
            records = self._sessions[keep]
            if len(records) <= 1:
                return
            self._drop(records, next(iter(records)))

    def find(self, user: str, session: str, messages: list[VisibleMessage],
             project: str | None = None, bare: bool = False) -> Match | None:
        """The record made in `project` (with memory off when `bare`) that shares the
        longest run of leading messages with `messages` (the last one is new, never
        shared): a record that is all of the run (the client added messages after it)
        before one that goes on past it with other messages (the client changed one: a
        partial match)."""
        keys = _prefix_keys(user, session, messages, project, bare)
        with self._lock:
            records = self._sessions.get((user, session))
            if not records:
                return None
            found = None
            for length in range(len(messages) - 1, 0, -1):
                record = records.get(keys[length - 1])
                if record is not None and self._usable(record, project, bare):
                    found = Match(record, length)
                    break
            longest = found.matched_messages if found is not None else 0
            if longest < len(messages) - 1:
                wanted = [m.digest() for m in messages[:-1]]
                for record in records.values():
                    shared = _shared_run(record, wanted)
                    if shared > longest and self._usable(record, project, bare):
                        found, longest = Match(record, shared, partial=True), shared
            if found is not None:
                self._sessions.move_to_end((user, session))
            return found

    def _usable(self, record: Record, project: str | None, bare: bool) -> bool:
        return (record.fingerprint == self.fingerprint and record.project == project
                and record.bare == bare)

    def serve_fingerprint(self, fingerprint: str) -> int:
        """From now on records are made and found under `fingerprint`; the records made
        under another (loaded from disk after a restart on another model, tokenizer or
        template) are dropped. Returns how many."""
        with self._lock:
            self.fingerprint = fingerprint
            dropped = 0
            for owner, records in list(self._sessions.items()):
                stale = [k for k, r in records.items() if r.fingerprint != fingerprint]
                for key in stale:
                    self._drop(records, key)
                dropped += len(stale)
                if not records:
                    del self._sessions[owner]
                    self._changed.discard(owner)
                    self._gone.add(owner)
                elif stale:
                    self._changed.add(owner)
            return dropped

    def records(self, user: str, session: str) -> list[Record]:
        """The session's records, oldest first."""
        with self._lock:
            return list(self._sessions.get((user, session), {}).values())

    def user_records(self, user: str) -> list[Record]:
        """All of `user`'s records: sessions least recently used first, each oldest first."""
        with self._lock:
            return [r for (owner, _), records in self._sessions.items() if owner == user
                    for r in records.values()]

    def sessions_of(self, user: str) -> list[str]:
        """`user`'s sessions with records, most recently used first."""
        with self._lock:
            return [session for owner, session in reversed(self._sessions) if owner == user]

    def forget_user(self, user: str) -> int:
        """Drop every record of `user` (their memory was deleted: a replay must not bring
        its notes back); returns how many."""
        with self._lock:
            dropped = 0
            for owner in [key for key in self._sessions if key[0] == user]:
                records = self._sessions.pop(owner)
                for record in records.values():
                    self._ids.release(record.ids)
                dropped += len(records)
                self._changed.discard(owner)
                self._gone.add(owner)
            return dropped

    def newest(self, sessions: int) -> list[Record]:
        """The latest record of each of the `sessions` most recently used sessions, most
        recent first (at start, the saved files' order): a bounded read, however many
        the ledger holds."""
        with self._lock:
            return [next(reversed(records.values())) for records in
                    itertools.islice(reversed(self._sessions.values()), sessions) if records]

    def latest(self, user: str, session: str) -> Record | None:
        """The session's most recent record: its end anchor."""
        with self._lock:
            records = self._sessions.get((user, session))
            return next(reversed(records.values())) if records else None

    def latest_in(self, user: str, session: str, project: str | None) -> Record | None:
        """The session's most recent record made in `project`: one session name used in
        two projects holds two conversations, and a request of one is no change to the
        other's history."""
        with self._lock:
            records = self._sessions.get((user, session)) or {}
            return next((r for r in reversed(records.values()) if r.project == project), None)

    def take_changes(self) -> tuple[dict[SessionKey, list[Record]], set[SessionKey]]:
        """The sessions whose records changed (with their records, oldest first) and the
        sessions evicted, since the last call."""
        with self._lock:
            changed = {key: list(self._sessions[key].values()) for key in self._changed
                       if key in self._sessions}
            gone = set(self._gone)
            self._changed.clear()
            self._gone.clear()
        return changed, gone

    @property
    def tokens(self) -> int:
        """Ids held in all records, each shared block once."""
        return self._ids.ids_held

    def __len__(self) -> int:
        return sum(len(r) for r in self._sessions.values())
