"""Prefetch by branches: which notes the idle time prefills after a turn, each as the tail
its own match would put before the next message, and which it has prefilled already.

Where matched notes lead the message they match (`NotesShown.leads`), the next turn's
prompt is [the record's ids, replayed][the matched note's tail][the new message]. So a
note's tail can be prefilled after the record before anyone knows which note the next
message matches: one background request a candidate note (a branch), nothing recorded.
A branch the message matches is read from the cache; one it does not match cost idle
compute and cache blocks only, never a token of any prompt (the guess, `notes` above 0,
places its choice in the record, where a wrong one lengthens every later prompt).

Candidates: the notes the session may match and does not hold yet, the guess's choice
over the finished turn first (ranked as it ranks them), then the rest by their uses, then
the most recently updated (the prewarm's order for a new session's likely notes).
Prefilled and measured by the server (server/idle/prefetch.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from conductor.hidden.prefetch import choose_prefetch
from conductor.hidden.prewarm import most_likely_first
from conductor.hidden.tail_notes import CountTokens, NotesShown, lone_match_tail
from conductor.notes import NoteStore
from conductor.notes.note_format import Note

SESSIONS_HELD = 1024  # sessions whose prefilled branches are remembered (the oldest goes)
# The guess's ranking asks for this many tokens at most: the choice is only an order here,
# nothing of it is placed, so the turn's budget does not bound it.
RANK_BUDGET = 1 << 30


def branch_candidates(store: NoteStore, turn_text: str, allowed: Sequence[Note],
                      already: set[str], count_tokens: CountTokens, shown: NotesShown,
                      limit: int) -> list[tuple[Note, str]]:
    """Up to `limit` notes to prefill a branch for, each with its tail's text, most likely
    first: the guess's choice over `turn_text` (the finished turn's message and answer),
    then the other `allowed` notes by uses, then the most recently updated (the prewarm's
    order, `likely_notes`). Not the notes in `already` (the record holds their text: the
    next match skips them), nor one whose tail alone is past the match budget (no match
    would show it: `lone_match_tail`)."""
    if limit <= 0:
        return []
    tails = {n.id: (n, text) for n in allowed if n.id not in already
             and (text := lone_match_tail(n, shown, count_tokens)) is not None}
    if not tails:
        return []
    guessed = choose_prefetch(store, turn_text, [n for n, _ in tails.values()], set(),
                              count_tokens, shown, room=limit, budget=RANK_BUDGET,
                              from_turn=True)
    first = [i for i in (guessed.note_ids if guessed else ()) if i in tails]
    rest = [n.id for n in most_likely_first(store, (n for i, (n, _) in tails.items()
                                                    if i not in first))]
    return [tails[i] for i in [*first, *rest][:limit]]


class BranchesDone:
    """Per session, the notes whose branch was prefilled after its newest record, keyed
    by that record (its replayed length and last ids: a branch is prefilled once a record,
    and a new record starts afresh). Bounded: the session that branched longest ago goes
    past `bound`; what it forgets is prefilled again at most once. Note ids only."""

    def __init__(self, bound: int = SESSIONS_HELD) -> None:
        self._held: OrderedDict[tuple[str, str], tuple[tuple[int, ...], set[str]]] = \
            OrderedDict()
        self._bound = bound
        self._lock = threading.Lock()

    def done(self, user: str, session: str, record: Sequence[int]) -> set[str]:
        """The notes branched after `record` (the ids the next turn replays)."""
        with self._lock:
            held = self._held.get((user, session))
            return set(held[1]) if held is not None and held[0] == _key(record) else set()

    def branched(self, user: str, session: str, record: Sequence[int],
                 note_ids: Iterable[str]) -> None:
        with self._lock:
            key, mark = (user, session), _key(record)
            held = self._held.pop(key, None)
            notes = held[1] if held is not None and held[0] == mark else set()
            self._held[key] = (mark, notes | set(note_ids))
            while len(self._held) > self._bound:
                self._held.popitem(last=False)

    def forget_user(self, user: str) -> None:
        with self._lock:
            for key in [k for k in self._held if k[0] == user]:
                del self._held[key]


def _key(record: Sequence[int]) -> tuple[int, ...]:
    """A record's mark: its length and last ids (an edit that keeps the length changes
    them)."""
    return (len(record), *record[-8:])
