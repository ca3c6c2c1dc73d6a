"""When the background writer should look at a session: its end, a give-up, a compaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_IDLE_S = 180.0
MIN_NEW_TOKENS = 1500
# Bounds on the bookkeeping (a server sees new sessions without end): the sessions
# watched, least recently seen dropped first (never one with a pending trigger), and the
# compacted histories remembered so each is handed over once.
MAX_SESSIONS = 4096
MAX_COMPACTED = 4096

SessionKey = tuple[str, str]  # (user, session)


@dataclass
class _SessionState:
    last_seen: float
    new_tokens: int = 0


@dataclass
class WriterTriggers:
    """Bookkeeping only: which sessions are due, and why. The clock is injectable."""

    idle_s: float = SESSION_IDLE_S
    min_new_tokens: int = MIN_NEW_TOKENS
    clock: Callable[[], float] = time.monotonic
    _sessions: dict[SessionKey, _SessionState] = field(default_factory=dict)
    _pending: dict[SessionKey, str] = field(default_factory=dict)  # explicit triggers
    _dropped: dict[SessionKey, object] = field(default_factory=dict)  # what a compaction dropped
    # histories already handed over (oldest first, bounded)
    _compacted: dict[bytes, None] = field(default_factory=dict)
    max_sessions: int = MAX_SESSIONS
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def turn_done(self, user: str, session: str, new_tokens: int) -> None:
        """A client turn of the session finished; it read or wrote `new_tokens` new ids."""
        with self._lock:
            state = self._sessions.pop((user, session), None) or _SessionState(self.clock())
            state.last_seen = self.clock()
            state.new_tokens += new_tokens
            self._sessions[(user, session)] = state  # most recently seen last
            self._bound()

    def give_up(self, user: str, session: str) -> None:
        """The client disconnected mid-answer."""
        self._mark(user, session, "give_up")

    def compaction(self, user: str, session: str, dropped: object, key: bytes) -> bool:
        """The client's history no longer extends what the engine holds; `dropped` is the
        history it left behind (the writer reads that), `key` names it. False when that
        history was handed over already: each dropped history is visited once."""
        with self._lock:
            if key in self._compacted:
                return False
            self._compacted[key] = None
            while len(self._compacted) > MAX_COMPACTED:
                del self._compacted[next(iter(self._compacted))]
            self._pending[(user, session)] = "compaction"
            self._dropped[(user, session)] = dropped
            return True

    def _bound(self) -> None:
        """Drop the least recently seen sessions past the bound (under the lock)."""
        excess = len(self._sessions) - self.max_sessions
        if excess <= 0:
            return
        for key in [k for k in self._sessions if k not in self._pending][:excess]:
            del self._sessions[key]

    def dropped(self, user: str, session: str) -> object | None:
        """The history a pending compaction dropped, for the writer to read."""
        with self._lock:
            return self._dropped.get((user, session))

    def _mark(self, user: str, session: str, trigger: str) -> None:
        with self._lock:
            self._pending[(user, session)] = trigger

    def forget_user(self, user: str) -> None:
        """The user's delete: none of their sessions watched or due, and what a
        compaction dropped of theirs let go."""
        with self._lock:
            for book in (self._sessions, self._pending, self._dropped):
                for key in [k for k in book if k[0] == user]:
                    del book[key]

    def due(self) -> list[tuple[str, str, str]]:
        """(user, session, trigger) for every session the writer should visit now."""
        now = self.clock()
        with self._lock:
            due = [(u, s, t) for (u, s), t in self._pending.items()]
            for (user, session), state in self._sessions.items():
                if (user, session) in self._pending:
                    continue
                if now - state.last_seen >= self.idle_s and state.new_tokens >= self.min_new_tokens:
                    due.append((user, session, "session_end"))
            return due

    def visited(self, user: str, session: str, preempted: bool) -> None:
        """The writer ran on the session; a preempted run leaves it due for the next window."""
        if preempted:
            return
        with self._lock:
            self._pending.pop((user, session), None)
            self._dropped.pop((user, session), None)
            state = self._sessions.get((user, session))
            if state is not None:
                state.new_tokens = 0
