"""Which prefixes to prewarm: the heads (system prompt + tools) seen most recently per
user, project and memory variant, and the shared-context version each was last prefilled
with.

When the shared context changes (a note written, archived, ratified, pinned; the nightly
job), the next new session would prefill the whole card and index again. The server's
prewarm prefills, in idle time, `head + new shared context` for the few heads it saw last,
so a user's next session finds it cached.

A new session's first message that matches a note gets it right before the message
(`NotesShown.leads`), right after the shared context: so the prewarm also prefills, per
head, one branch per likely note, `head + shared context + that note's matched tail`
(issue 58, item 3: the first session after a start prefilled its matched note on the
user's clock). Each branch is prefilled once per note version and shared-context version:
a write prewarms the written note's branch alone (a change of the shared context, all of
them again).

This module is the bookkeeping and the choice of notes; the server renders the ids and
runs the background requests.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from conductor.hidden.shared_context import SHARED_KIND, shared_notes
from conductor.ledger.records import Record
from conductor.notes import NoteStore
from conductor.notes.note_format import Note

HEADS_PER_GROUP = 4
MAX_GROUPS = 32
# A head's likely notes prefilled as branches, at most (a profile's memory.prewarm_notes):
# each costs about 90 tokens of idle prefill once per note and shared-context version,
# and their KV blocks, which the prefix cache evicts first when it needs room.
PREWARM_NOTES = 64
# At start, the sessions whose latest saved record may seed a head, at most, newest first
# (`Ledger.newest`): the start's work stays bounded however large the ledger is.
SEED_SESSIONS = 1024


@dataclass(frozen=True)
class LikelyNote:
    """A note a new session of a group may match, and the version its branch is of."""

    note: Note
    version: str  # its revision and update time: a new one is another branch

    @property
    def note_id(self) -> str:
        return self.note.id


def likely_notes(store: NoteStore, project: str | None, limit: int) -> list[LikelyNote]:
    """The notes a new session of `project` may match (the user's and the project's, never
    a session's own: `shared_notes`), most used first, then most recently updated; at
    most `limit`. File work (a scan, usage.json): the server calls it in a thread."""
    if limit <= 0:
        return []
    # The idle loop asks every idle second, and the answer changes only with the store:
    # kept until a note or a use changes (listing and ranking were a tick's file work).
    return list(store.while_unchanged(("likely_notes", project, limit),
                                      lambda: _ranked_likely(store, project, limit)))


def _ranked_likely(store: NoteStore, project: str | None, limit: int
                   ) -> tuple[LikelyNote, ...]:
    with store.one_scan():
        notes = shared_notes(store, project)
    if not notes:
        return ()
    ranked = most_likely_first(store, notes)
    return tuple(LikelyNote(n, f"{n.revision}@{n.updated.isoformat()}") for n in ranked[:limit])


def most_likely_first(store: NoteStore, notes: Iterable[Note]) -> list[Note]:
    """`notes`, the most used first (usage.json's totals), then the most recently updated:
    the order the idle services prefill notes in, for new sessions and after a turn."""
    uses = store.totals()
    return sorted(notes, key=lambda n: (-uses.get(n.id, 0), -n.updated.timestamp(), n.id))


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
    # note id -> (shared-context version, note version) of its branch prefilled last
    # (or found over the match budget); only the head's likely notes are kept
    branches: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Stale:
    """A head whose cached shared context is not the current one."""

    group: ContextGroup
    head_ids: tuple[int, ...]


@dataclass(frozen=True)
class Branch:
    """A head's branch for one likely note not yet prefilled with the current shared
    context and note version."""

    group: ContextGroup
    head_ids: tuple[int, ...]
    note: LikelyNote


@dataclass
class PrewarmHeads:
    heads_per_group: int = HEADS_PER_GROUP
    max_groups: int = MAX_GROUPS
    notes: int = PREWARM_NOTES  # likely notes a head's branches cover (0: no branches)
    _groups: OrderedDict[ContextGroup, OrderedDict[tuple[int, ...], _Head]] = field(
        default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, group: ContextGroup, head_ids: tuple[int, ...], version: str) -> None:
        """A client request ran `head_ids` + the shared context `version`: both cached."""
        with self._lock:
            heads = self._groups.setdefault(group, OrderedDict())
            self._groups.move_to_end(group)
            head = heads.get(head_ids)
            if head is None:
                heads[head_ids] = _Head(head_ids, version)
            else:  # its branches stay warm: each is of a shared-context version
                head.version = version
            heads.move_to_end(head_ids)
            while len(heads) > self.heads_per_group:
                heads.popitem(last=False)
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)

    def seed(self, records: Iterable[Record], reads: bool) -> int:
        """At start: the heads of the ledger's saved records (`records`, most recent
        first), as if seen before the restart but with no shared context cached (version
        None), so the first idle tick prefills head + shared context, then the branches.
        A head's group is its record's user, project and flags (`Record.shared_flags`):
        it is prefilled under that user's salt, never another's. Skipped: a record
        without flags (memory off, or saved before they were kept) or without a shared
        context, one whose `reads` is not the profile's now (no session of today's shares
        its context), a group or head past the bounds (the newest are kept, older than
        any seen live). A head already known stays as it is. Returns the heads added."""
        added = 0
        with self._lock:
            for record in records:
                if self._full():  # the newest heads of every group it can hold: done
                    break
                flags = record.shared_flags
                shared = next((s for s in record.spans if s.kind == SHARED_KIND), None)
                if flags is None or shared is None or flags[1] != reads:
                    continue
                group = ContextGroup(record.user, record.project, card=flags[0], reads=flags[1])
                heads = self._groups.get(group)
                if heads is None:
                    if len(self._groups) >= self.max_groups:
                        continue
                    heads = self._groups[group] = OrderedDict()
                    self._groups.move_to_end(group, last=False)  # older than those before
                if len(heads) >= self.heads_per_group:
                    continue
                head_ids = tuple(record.ids[: shared.start])  # its blocks only
                if head_ids not in heads:
                    heads[head_ids] = _Head(head_ids, None)
                    heads.move_to_end(head_ids, last=False)
                    added += 1
        return added

    def _full(self) -> bool:
        return len(self._groups) >= self.max_groups and all(
            len(heads) >= self.heads_per_group for heads in self._groups.values())

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

    def branches_due(self, group: ContextGroup, version: str,
                     likely: Sequence[LikelyNote]) -> list[Branch]:
        """The group's branches not yet prefilled with shared context `version` and their
        note's version, most recent head first, each head's in `likely`'s order. What a
        head remembers of notes no longer likely is dropped: at most `notes` a head."""
        likely = list(likely)[: self.notes]
        wanted = {n.note_id for n in likely}
        due: list[Branch] = []
        with self._lock:
            heads = self._groups.get(group) or {}
            for head in reversed(heads.values()):
                for note_id in [i for i in head.branches if i not in wanted]:
                    del head.branches[note_id]
                due += [Branch(group, head.ids, n) for n in likely
                        if head.branches.get(n.note_id) != (version, n.version)]
        return due

    def branch_warmed(self, branch: Branch, version: str) -> None:
        """`branch` is prefilled after shared context `version`, or has nothing to
        prefill (its tail is over the match budget): not due again until either changes."""
        with self._lock:
            head = (self._groups.get(branch.group) or {}).get(branch.head_ids)
            if head is not None:
                head.branches[branch.note.note_id] = (version, branch.note.version)


RECORDS_DUE = 16  # sessions whose record waits for its idle-time prefill, newest kept


@dataclass
class RecordsDue:
    """The sessions whose newest record a hybrid-attention engine should prefill in idle
    time (server/idle/record_prefill.py): vLLM keeps such a model's recurrent state
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
