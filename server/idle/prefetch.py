"""Prefetch in idle time: after a turn is recorded, the notes the conversation is likely to
need next (conductor/hidden/prefetch.py) go in as a hidden message right after the answer,
in the session's record, and record + notes are prefilled as one background request.

The next turn replays the record with them in place, from the cache: notes its message
matches that were prefetched count as already injected, so only the others are prefilled
after it. Like the prewarm: lowest priority, one token, ended by any client request at the
next engine step, never started while a client request is in flight. A prefetch that did
not finish leaves the record as it was and stays due; one whose session moved on
meanwhile is dropped. A client's hint about its next message (POST /v1/memory/prefetch)
makes the session due again: the notes the hint matches go after those already there.

Prefetch by branches (`memory.prefetch.branches`, conductor/hidden/branches.py): after
the guess, if any, the tails of the notes the next message may match are prefilled, one
background request a note, each [the ids the next turn replays][that note's matched tail]
as the next turn's prompt will hold them when its message matches that note (matched
notes lead the message: `NotesShown.leads`). Nothing is recorded: a branch the message
does not match costs idle compute and cache blocks, never prompt length. A branch is
prefilled once a record; a client request ends the one running at the next engine step,
and the session stays due for the rest. Not where the next turn renders the last answer
afresh (a template that drops earlier reasoning: `next_turn_replays` is None) nor on a
hybrid engine (`reuse_block`: the recurrent state is kept at one block boundary a request,
640 tokens on tiny-hybrid, which a note's tail rarely reaches past the record).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass

from conductor.memory.hiding import (
    HOLDS_TEXT,
    PREFETCH_KIND,
    branch_candidates,
    choose_prefetch,
    session_notes,
    shared_notes,
    trailing_prefetch,
)
from conductor.memory.types import Record, Span, flat_ids
from server.idle.idle import IdleService
from server.turn.prompt import IM_END_TEXT, data_ids, hidden_message_ids
from server.turn.replay import next_turn_replays

log = logging.getLogger("tandem.prefetch")


@dataclass(frozen=True)
class PrefetchRun:
    user: str
    session: str
    note_ids: tuple[str, ...]
    tokens: int  # the hidden message's ids
    outcome: str  # "done", "preempted" or "moved_on" (a newer record: nothing kept)
    hinted: bool = False  # chosen by a client's hint rather than the guess
    branch: bool = False  # a branch: one note's tail after the record, nothing recorded
    prefilled: int | None = None  # a branch's tokens the engine prefilled (not cached)


class PrefetchService(IdleService):
    name = "prefetch"

    async def tick(self) -> list[PrefetchRun]:
        """Prefetch for every due session, the users in turns (PrefetchDue.take), while
        nobody is waiting; a session not reached stays due."""
        runs: list[PrefetchRun] = []
        due = self.memory.idle.prefetch_due.take()
        for n, (user, session) in enumerate(due):
            if self.client_busy():
                self.memory.idle.prefetch_due.put_back(due[n:])
                break
            run = await self._prefetch(user, session)
            if run is not None:
                runs.append(run)
            if run is None or run.outcome == "done":
                runs += await self._branch(user, session)
        return self.kept(runs)

    async def _prefetch(self, user: str, session: str) -> PrefetchRun | None:
        due = self.memory.idle.prefetch_due
        limits = self.memory.idle.prefetch_limits
        hint = due.hint(user, session) if limits.hints_on else None
        record = self.memory.latest_record(user, session)
        if record is None or not _fits(record, after_prefetch=hint is not None):
            return None
        if hint is None and not limits.on:
            return None
        store = self.memory.store(user)
        with store.one_scan():
            allowed = [*shared_notes(store, record.project), *session_notes(store, session)]
            # every note the conversation holds the text of: matched, prefetched, written
            # in a block, corrected
            already = {i for s in record.spans if s.kind in HOLDS_TEXT for i in s.note_ids}
            if hint is None:  # the guess: a few notes a turn, and a cap a session
                given = sum(len(s.note_ids) for s in record.spans if s.kind == PREFETCH_KIND)
                room, budget = limits.guess_room(given), limits.budget
            else:  # a hint: the budget a turn, shared by every prefetch after this answer
                room, budget = limits.hint_notes, limits.budget - _trailing_tokens(record)
            # the part's whole hidden message counts, its system-message frame as well
            budget -= len(self._hidden_after_answer(""))
            chosen = choose_prefetch(store, hint or _turn_text(record), allowed, already,
                                     self.engine.count_tokens, self.memory.notes_shown,
                                     room, budget, from_turn=hint is None)
        if chosen is None:
            if hint is not None:
                due.hint_used(user, session, hint)
            return None
        flat = list(flat_ids(record.ids))
        # An answer cut by its length ends without its end-of-turn token; the client's
        # next render closes it, so the record is closed here first, as it would be.
        closing = [] if record.ended_cleanly else [self.engine.tokens.end_of_turn]
        part = [*closing, *self._hidden_after_answer(chosen.text)]
        _, outcome = await self.prefill(user, [*flat, *part])
        if outcome == "done":
            if hint is not None:
                due.hint_used(user, session, hint)
            span = Span(len(flat) + len(closing), len(flat) + len(part), PREFETCH_KIND,
                        chosen.note_ids)
            if not self.memory.extend_record(record, dataclasses.replace(
                    record, ids=[*flat, *part], spans=(*record.spans, span),
                    ended_cleanly=True)):
                outcome = "moved_on"
        elif outcome == "preempted":  # a client came: due again in a later idle moment
            due.turn_recorded(user, session)
        log.info("prefetch %s: %d notes, %d tokens", outcome, len(chosen.note_ids), len(part))
        if self.memory.metrics is not None:
            self.memory.metrics.background_run("prefetch", outcome)
        return PrefetchRun(user, session, chosen.note_ids, len(part), outcome,
                           hinted=hint is not None)

    async def _branch(self, user: str, session: str) -> list[PrefetchRun]:
        """One background prefill a candidate note of the session's newest record not
        branched for yet, most likely first, while nobody waits; one that gave way (or a
        client's arrival) leaves the session due for the rest."""
        limits = self.memory.idle.prefetch_limits
        if not self.memory.idle.prefetches_branches(self.memory.notes_shown) \
                or self.engine.reuse_block is not None:
            return []
        record = self.memory.latest_record(user, session)
        if record is None or not _fits(record, after_prefetch=True):
            return []
        replays = next_turn_replays(self.engine.tokenizer, record)
        if not replays:  # the next turn renders the last answer afresh: no known prefix
            return []
        done = self.memory.idle.prefetch_branches.done(user, session, replays)
        already = {i for s in record.spans if s.kind in HOLDS_TEXT for i in s.note_ids}
        # file work (a scan, a search, usage.json) and some 50 tails counted: in a thread,
        # off the event loop that serves the clients
        candidates = await asyncio.to_thread(
            self._candidates, user, session, record, already | done,
            limits.branches - len(done))
        runs: list[PrefetchRun] = []
        for note, text in candidates:
            if self.client_busy():
                self.memory.idle.prefetch_due.turn_recorded(user, session)
                break
            tail = hidden_message_ids(self.engine.tokenizer, text)
            prompt = [*replays, *tail]
            if len(prompt) + 1 > self.engine.profile.max_model_len:
                continue  # no room for the message after it either: never matched so
            cached, outcome = await self.prefill(user, prompt)
            runs.append(PrefetchRun(user, session, (note.id,), len(tail), outcome,
                                    branch=True, prefilled=len(prompt) - cached))
            if self.memory.metrics is not None:
                self.memory.metrics.background_run("prefetch_branch", outcome)
            if outcome != "done":  # a client came: the rest in a later idle moment
                self.memory.idle.prefetch_due.turn_recorded(user, session)
                break
            self.memory.idle.prefetch_branches.branched(user, session, replays, (note.id,))
        if runs:
            log.info("prefetch branches: %d done of %d, %d tokens prefilled",
                     sum(r.outcome == "done" for r in runs), len(runs),
                     sum(r.prefilled or 0 for r in runs))
        return runs

    def _candidates(self, user: str, session: str, record: Record, skip: set[str],
                    limit: int) -> list:
        """The notes to branch for after `record`, each with its tail's text."""
        store = self.memory.store(user)
        with store.one_scan():
            allowed = [*shared_notes(store, record.project), *session_notes(store, session)]
            return branch_candidates(store, _turn_text(record), allowed, skip,
                                     self.engine.count_tokens, self.memory.notes_shown, limit)

    def _hidden_after_answer(self, text: str) -> list[int]:
        """A hidden system message after the answer's end-of-turn token: the record goes
        on with it, and the next turn's render (`\\n<|im_start|>user...`) after it."""
        tokenizer = self.engine.tokenizer
        return [*tokenizer.encode("\n<|im_start|>system\n", add_special_tokens=False),
                *data_ids(tokenizer, text),
                *tokenizer.encode(IM_END_TEXT, add_special_tokens=False)]


def _fits(record: Record, after_prefetch: bool = False) -> bool:
    """A record a prefetch may extend: memory on, an answer last that calls no tool (the
    idle time after a call is the tool running, and its result goes right after the
    call); not prefetched for already, unless `after_prefetch` (a hint's notes go after
    the guess's)."""
    if record.bare or not record.messages:
        return False
    last = record.messages[-1]
    if last.role != "assistant" or last.tool_calls:
        return False
    return after_prefetch or not _prefetched(record)


def _prefetched(record: Record) -> bool:
    """The record ends with prefetched notes (its last span ends it)."""
    span = record.spans[-1] if record.spans else None
    return span is not None and span.kind == PREFETCH_KIND and span.end == len(record.ids)


def _trailing_tokens(record: Record) -> int:
    """The tokens of the prefetched parts the record ends with: since its last answer."""
    return sum(s.end - s.start for s in trailing_prefetch(record.spans, len(record.ids)))


def _turn_text(record: Record) -> str:
    """The finished turn the guess reads: its user message and its answer."""
    asked = next((m.content for m in reversed(record.messages) if m.role == "user"), "")
    return f"{asked}\n{record.messages[-1].content}"
