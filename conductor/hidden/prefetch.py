"""Prefetch: the notes a conversation is likely to need next, chosen after an answer and
placed right after it in the session's record, so the next turn replays them from the
cache instead of prefilling them after the new message.

The guess is the matching rule of `tail_notes.build_matches` run over the turn just
finished (its user message and its answer): notes that share words with what is being
talked about, not yet in the conversation, within a small budget a turn and a cap a
session. A client may also say what comes next (a hint: the draft being typed, the
files open in an editor; `POST /v1/memory/prefetch`): the same rule over the hint
chooses notes placed after the ones already there. Chosen here; placed, prefilled and
measured by the server (server/idle/prefetch.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from conductor.hidden.tail_notes import (
    MIN_SHARED_WORDS,
    CountTokens,
    NotesShown,
    TailNote,
    build_matches,
)
from conductor.ledger.records import Span
from conductor.notes import NoteStore
from conductor.notes.note_format import Note

PREFETCH_KIND = "prefetch"  # a record span of prefetched notes: they count as injected
MATCHED_KINDS = ("notes", PREFETCH_KIND)  # spans whose notes a later match skips
ON_NOTES = 3  # a turn's notes where a profile turns prefetch on (`memory.prefetch.notes`)
HINT_NOTES = 1  # the notes a client's hint brings (`memory.prefetch.hint_notes`)


@dataclass(frozen=True)
class PrefetchLimits:
    """The guess's notes a turn and the notes it may give a session in all (0 notes: the
    guess off, the default: on the bench's conversations it was right for 0 of 12 and 2
    of 8 prefetched notes, bench/README.md "Prefetch"; `ON_NOTES` is the
    bench's setting where it is on), a hint's notes, and the tokens a turn that every
    prefetch after one answer shares."""

    notes: int = 0
    budget: int = 300
    session_cap: int = 12
    # A client's hint: the notes it may bring (0: hints refused). On by default: nothing
    # is spent until a client sends one. One note, as a message matches one: a draft's
    # best match is the guess, and each note more is prefilled and replayed whether the
    # message needs it or not (bench/README.md, "Prefetch").
    hint_notes: int = HINT_NOTES
    # Prefetch by branches (conductor/hidden/branches.py): after a turn, the tails of up
    # to this many notes the next message may match, each prefilled after the record as
    # that match would place it, nothing recorded (0: off). Needs matched notes placed
    # before the message (`memory.notes_shown.match_place: before`, the default).
    branches: int = 0

    def __post_init__(self) -> None:
        if min(self.notes, self.budget, self.session_cap, self.hint_notes,
               self.branches) < 0:
            raise ValueError("prefetch: notes, budget, session_cap, hint_notes and branches "
                             "must be 0 or more")

    @property
    def on(self) -> bool:
        """Whether the guess places notes in the record after a turn."""
        return self.notes > 0 and self.budget > 0 and self.session_cap > 0

    @property
    def after_turn(self) -> bool:
        """Whether a recorded turn makes its session due: the guess, or branches."""
        return self.on or self.branches > 0

    @property
    def hints_on(self) -> bool:
        return self.hint_notes > 0 and self.budget > 0

    def guess_room(self, given: int) -> int:
        """The notes a turn's guess may bring when the session was given `given`."""
        return min(self.notes, self.session_cap - given)


# The prefetched part's preamble: short (it is replayed in every later turn of the
# session) and about what comes next, since it stands before the message, not after it.
PREFETCH_FRAME = "Hidden notes that may bear on what the user asks next; use them if they do:"


# The stems a note shares with a finished turn to be guessed for it. A turn (its message
# and its answer) has some 25 topic words to a message's 6, so two shared stems happen by
# chance ("fail" and "test" put "flaky test_refund_race" after an answer about the test
# pool); at two the bench's threaded conversation spent its 12-note session cap on such
# notes by its fifth turn and its follow-ups found 2 of them, at three 3 (4 at two when
# the match compared words as written). A hint is a message being typed: it keeps the
# message's rule.
GUESS_SHARED_WORDS = 3


def choose_prefetch(store: NoteStore, text: str, allowed: Iterable[Note], already: set[str],
                    count_tokens: CountTokens, shown: NotesShown, room: int,
                    budget: int, from_turn: bool = False) -> TailNote | None:
    """Up to `room` notes within `budget` tokens to place after the answer, or None.
    `text`: the finished turn's user message and answer (`from_turn`: the guess), or a
    client's hint; `already`: notes the record holds."""
    if room <= 0 or budget <= 0:
        return None
    sized = dataclasses.replace(shown, max_matches=room, match_budget=budget)
    found = build_matches(store, text, allowed, already, count_tokens, sized,
                          frame=PREFETCH_FRAME,
                          min_shared=GUESS_SHARED_WORDS if from_turn else MIN_SHARED_WORDS)
    if found is None:
        return None
    return TailNote(PREFETCH_KIND, found.text, found.note_ids)


def trailing_prefetch(spans: Sequence[Span], end: int) -> list[Span]:
    """The prefetched parts that ids of length `end` end with: those placed since the
    last answer, for the message that comes next (older ones are notes like any other
    the conversation holds)."""
    trailing: list[Span] = []
    for span in reversed(spans):
        if span.kind != PREFETCH_KIND or span.end != end:
            break
        trailing.append(span)
        end = span.start
    return trailing[::-1]


MIN_USER_MESSAGES = 2


def goes_on(derived_session: bool, roles: list[str]) -> bool:
    """A conversation worth a prefetch: one the client named (X-Tandem-Session), or one
    with a second user message already. A one-shot request without a session (an API
    call, a batch) would waste the prefill."""
    return not derived_session or roles.count("user") >= MIN_USER_MESSAGES


HINT_MAX_CHARS = 4000


USER_SLOTS = 16  # a user's sessions due, and hints held, at once
USERS_HELD = 256  # the users with prefetch work held at once


@dataclass
class _UserSlots:
    """One user's sessions due (oldest first) and hints."""

    due: dict[str, None] = dataclasses.field(default_factory=dict)
    hints: dict[str, str] = dataclasses.field(default_factory=dict)


class PrefetchDue:
    """Sessions whose last turn was recorded and not yet prefetched for, and the hints
    clients sent about their next message. Each user has their own slots (`bound`
    sessions due and `bound` hints; past them their own oldest is dropped: its user has
    moved on), so one user's traffic, however much, never pushes out another's; `users`
    bounds the users held (the one idle longest goes, which only that many users at
    once can cause). Hints live in memory only: a draft never reaches a file or a log."""

    def __init__(self, bound: int = USER_SLOTS, users: int = USERS_HELD) -> None:
        self._users: dict[str, _UserSlots] = {}  # least recently active first
        self._bound = bound
        self._max_users = users
        self._lock = threading.Lock()

    def _slots(self, user: str) -> _UserSlots:
        """The user's slots, now the most recently active (held: the lock)."""
        slots = self._users.pop(user, None) or _UserSlots()
        self._users[user] = slots
        while len(self._users) > self._max_users:
            self._users.pop(next(iter(self._users)))
        return slots

    def _forget_if_empty(self, user: str) -> None:
        slots = self._users.get(user)
        if slots is not None and not slots.due and not slots.hints:
            del self._users[user]

    def turn_recorded(self, user: str, session: str) -> None:
        with self._lock:
            _push(self._slots(user).due, session, None, self._bound)

    def hinted(self, user: str, session: str, hint: str) -> None:
        """A client's word on what comes next in the session: due with it (a newer hint
        replaces an older one)."""
        with self._lock:
            slots = self._slots(user)
            _push(slots.hints, session, hint, self._bound)
            _push(slots.due, session, None, self._bound)

    def hint(self, user: str, session: str) -> str | None:
        with self._lock:
            slots = self._users.get(user)
            return None if slots is None else slots.hints.get(session)

    def hint_used(self, user: str, session: str, hint: str) -> None:
        """Prefetched for (or nothing to fetch): dropped, unless a newer one came."""
        with self._lock:
            slots = self._users.get(user)
            if slots is not None and slots.hints.get(session) == hint:
                del slots.hints[session]
                self._forget_if_empty(user)

    def message_came(self, user: str, session: str) -> None:
        """The user message a hint was about has arrived: the hint is spent."""
        with self._lock:
            slots = self._users.get(user)
            if slots is not None and slots.hints.pop(session, None) is not None:
                self._forget_if_empty(user)

    def forget_user(self, user: str) -> None:
        """The user's delete: none of their sessions due, none of their hints kept."""
        with self._lock:
            self._users.pop(user, None)

    def take(self) -> list[tuple[str, str]]:
        """Every due session, taken in turns: each user's most recent first, the most
        recently active user first, then each one's next (a user with many sessions due
        waits behind no more than one of theirs a user); they are no longer due."""
        with self._lock:
            queues = [[(user, s) for s in reversed(slots.due)]
                      for user, slots in reversed(self._users.items()) if slots.due]
            for user, slots in list(self._users.items()):
                slots.due.clear()
                self._forget_if_empty(user)
        return [key for turn in itertools.zip_longest(*queues) for key in turn
                if key is not None]

    def put_back(self, keys: Sequence[tuple[str, str]]) -> None:
        """Sessions taken and not reached (a client came first): due again, behind those
        that became due since (each user's bound holds: the newest are kept)."""
        with self._lock:
            for user, session in keys:  # each user's most recent first: placed oldest
                slots = self._slots(user)
                if session not in slots.due and len(slots.due) < self._bound:
                    slots.due = {session: None, **slots.due}

    def __len__(self) -> int:
        with self._lock:
            return sum(len(slots.due) for slots in self._users.values())


def _push(slots: dict, key: str, value, bound: int) -> None:
    """`key` as the newest of `slots`, the oldest dropped past `bound`."""
    slots.pop(key, None)
    slots[key] = value
    while len(slots) > bound:
        slots.pop(next(iter(slots)))
