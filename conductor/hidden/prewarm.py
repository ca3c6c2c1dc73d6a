"""Which prefixes to prewarm: the heads (system prompt + tools) seen most recently per
user, project and memory variant, and the shared-context version each was last prefilled
with.

When the shared context changes (a note written, archived, ratified, pinned; the nightly
job), the next new session would prefill the whole card and index again. The server's
prewarm prefills, in idle time, `head + new shared context` for the few heads it saw last,
so a user's next session finds it cached. This module is the bookkeeping only; the server
renders the ids and runs the background requests.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

HEADS_PER_GROUP = 4
MAX_GROUPS = 32


@dataclass(frozen=True)
class ContextGroup:
    """Whose shared context: every session in a group gets the same text."""

    user: str
    project: str | None
    card: bool  # the request may write: the card is shown
    reads: bool  # the index is shown


@dataclass
class _Head:
    ids: tuple[int, ...]  # the system prompt and tools, rendered, up to the shared context
    version: str | None  # the shared-context version last prefilled after these ids


@dataclass(frozen=True)
class Stale:
    """A head whose cached shared context is not the current one."""

    group: ContextGroup
    head_ids: tuple[int, ...]


@dataclass
class PrewarmHeads:
    heads_per_group: int = HEADS_PER_GROUP
    max_groups: int = MAX_GROUPS
    _groups: OrderedDict[ContextGroup, OrderedDict[tuple[int, ...], _Head]] = field(
        default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, group: ContextGroup, head_ids: tuple[int, ...], version: str) -> None:
        """A client request ran `head_ids` + the shared context `version`: both cached."""
        with self._lock:
            heads = self._groups.setdefault(group, OrderedDict())
            self._groups.move_to_end(group)
            heads[head_ids] = _Head(head_ids, version)
            heads.move_to_end(head_ids)
            while len(heads) > self.heads_per_group:
                heads.popitem(last=False)
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)

    def forget_user(self, user: str) -> None:
        """The user's delete: their heads (system prompts and tools) are not kept."""
        with self._lock:
            for group in [g for g in self._groups if g.user == user]:
                del self._groups[group]

    def groups(self) -> list[ContextGroup]:
        with self._lock:
            return list(reversed(self._groups))  # most recent first

    def stale(self, group: ContextGroup, version: str) -> list[Stale]:
        """The group's heads not yet prefilled with `version`, most recent first."""
        with self._lock:
            heads = self._groups.get(group) or {}
            return [Stale(group, h.ids) for h in reversed(heads.values()) if h.version != version]

    def warmed(self, stale: Stale, version: str) -> None:
        with self._lock:
            head = (self._groups.get(stale.group) or {}).get(stale.head_ids)
            if head is not None:
                head.version = version


RECORDS_DUE = 16  # sessions whose record waits for its idle-time prefill, newest kept


@dataclass
class RecordsDue:
    """The sessions whose newest record a hybrid-attention engine should prefill in idle
    time (server/background/record_prefill.py): vLLM keeps such a model's recurrent state
    at one block boundary a request, the last one before its prompt's last token, so the
    next turn, which replays the record, reads the cache only to the boundary before the
    answer; a prefill of the record and one token more moves it to the last boundary
    before the next turn's own tokens. `on` only for such an engine (the server sets it):
    a dense one caches every block anyway, and nothing is queued."""

    on: bool = False
    bound: int = RECORDS_DUE
    _due: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def turn_recorded(self, user: str, session: str) -> None:
        """The session's newest record (filed under `user`, the ledger's key) changed."""
        if not self.on:
            return
        with self._lock:
            self._due[(user, session)] = None
            self._due.move_to_end((user, session))
            while len(self._due) > self.bound:
                self._due.popitem(last=False)  # the oldest: its user has moved on

    def take(self) -> tuple[str, str] | None:
        """The most recent session due (no longer due: `again` puts it back)."""
        with self._lock:
            return self._due.popitem(last=True)[0] if self._due else None

    def again(self, user: str, session: str) -> None:
        """A prefill that gave way to a client: due again, unless a newer turn is."""
        with self._lock:
            if (user, session) not in self._due and len(self._due) < self.bound:
                self._due[(user, session)] = None
                self._due.move_to_end((user, session), last=False)

    def forget_user(self, user: str) -> None:
        with self._lock:
            for key in [k for k in self._due if k[0] == user]:
                del self._due[key]
