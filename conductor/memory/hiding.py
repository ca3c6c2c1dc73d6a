"""What memory hides in a request's prompt, and where (part of memory's front door: the
server's way into `conductor/hidden/`).

* The shared memory context (card + index) after the system prompt and tools, whenever the
  prompt is rendered rather than replayed from the ledger: a new session, or a miss in a
  known one (an edit, a change of tools, a compacted history). The model always has the
  card, and every session with the same head shares its cached blocks.
* The session tail right after the new messages of such a turn: the memory-routes token
  (when the request has tools, so the model could call the routes) and the notes the
  session wrote itself. Most new sessions have none: nothing per session to prefill.
* The notes a new user message matches, right before it (`match_place: before`, the
  default: where the idle services can have them cached ahead of the message) or right
  after it.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Protocol

from conductor.hidden.branches import branch_candidates
from conductor.hidden.corrections import CORRECTION_KIND, HOLDS_TEXT, build_corrections
from conductor.hidden.memory_refs import NOTE_ID, RefError, read_ref
from conductor.hidden.prefetch import (
    HINT_MAX_CHARS,
    MATCHED_KINDS,
    PREFETCH_KIND,
    PrefetchLimits,
    choose_prefetch,
    goes_on,
    trailing_prefetch,
)
from conductor.hidden.prewarm import Branch, Stale, likely_notes
from conductor.hidden.shared_context import (
    SESSION_KIND,
    SHARED_KIND,
    build_session_tail,
    build_shared_context,
    hits_to_ask_for,
    note_id_of_file,
    session_notes,
    shared_notes,
    visible_hits,
    visible_note_ids,
)
from conductor.hidden.tail_notes import (
    NotesShown,
    build_matches,
    lone_match_tail,
    note_match_words,
)
from conductor.ledger.id_blocks import flat_ids
from conductor.ledger.records import Record, VisibleMessage
from conductor.memory.context import MemoryContext
from conductor.memory.idle_work import IdleWork
from conductor.memory.turn import HiddenContext, Replayed, Tail, TurnFacts
from conductor.notes import NoteStore

# The server's part of conductor/hidden/ (the front door: nothing deeper), and the decision below.
__all__ = [
    "Branch",
    "CORRECTION_KIND",
    "HINT_MAX_CHARS",
    "HOLDS_TEXT",
    "HiddenContext",
    "NOTE_ID",
    "NotesShown",
    "PREFETCH_KIND",
    "PrefetchLimits",
    "RefError",
    "Replayed",
    "SESSION_KIND",
    "SHARED_KIND",
    "Stale",
    "Tail",
    "TurnFacts",
    "branch_candidates",
    "choose_hidden",
    "choose_prefetch",
    "goes_on",
    "history_key",
    "hits_to_ask_for",
    "injections_to_record",
    "likely_notes",
    "lone_match_tail",
    "note_id_of_file",
    "note_miss",
    "read_ref",
    "record_injections",
    "session_notes",
    "shared_notes",
    "trailing_prefetch",
    "visible_hits",
    "visible_note_ids",
]


class HidingServices(Protocol):
    """What the hiding decision reads of memory's services (MemoryServices has them): a
    protocol here, so that this module imports nothing of services.py, which imports it."""

    notes_shown: NotesShown
    idle: IdleWork

    def store(self, user: str) -> NoteStore: ...

    def latest_in(self, user: str, session: str, project: str | None) -> Record | None: ...

    def token_for(self, user: str, session: str) -> str: ...


def choose_hidden(services: HidingServices, memory: MemoryContext, replay: Replayed | None,
                  facts: TurnFacts, count_tokens,
                  decode: Callable[[list[int]], str] | None = None) -> HiddenContext:
    """The hidden messages of one request. `replay`: the part of a ledger record the
    prompt starts with (which holds the shared context already), None when the prompt is
    rendered whole. `decode` reads the replayed notes back (for their corrections)."""
    if memory.off_reason is not None:
        return HiddenContext()
    hidden = HiddenContext(token=services.token_for(memory.user, memory.session))
    # a hint is about the user's next message, not a tool's; a prompt laid out only to be
    # counted (Claude Code's count_tokens before it sends) is not the message arriving
    if memory.has_user_message and not facts.counting:
        services.idle.prefetch_due.message_came(memory.user, memory.session)
    store = services.store(memory.user)
    with store.one_scan():  # on the way to the first token: read the files once
        _choose(services, memory, replay, facts, count_tokens, hidden)
        if replay is not None and memory.reads and decode is not None:
            _correct(store, replay, decode, hidden)
    return hidden


def _correct(store, replay: Replayed, decode: Callable[[list[int]], str],
             hidden: HiddenContext) -> None:
    """The update of the replayed notes that changed since they went in, first among the
    tails (conductor/hidden/corrections.py)."""
    flat = None

    def span_text(span) -> str:
        nonlocal flat
        flat = flat if flat is not None else flat_ids(replay.ids)
        return _decoded(decode, tuple(flat[span.start:span.end]))

    found = build_corrections(store, replay.spans, span_text)
    if found is not None:
        hidden.tails.insert(0, Tail(CORRECTION_KIND, found.text, found.note_ids,
                                    found.versions))


@functools.lru_cache(maxsize=4096)
def _decoded(decode: Callable[[list[int]], str], ids: tuple[int, ...]) -> str:
    """A replayed note span's text, memoised by its ids (a record's ids never change):
    every replayed turn decoded each note it holds to compare it with the note now, half
    of the corrections' CPU (issue 58, item 4). The note is read afresh every time."""
    return decode(list(ids))


def drop_note_memos() -> None:
    """Empty the memos keyed by a note's text (its match words, a replayed span's text):
    a user's delete leaves none of their notes' words in this process. Every user's go
    (they are keyed by text, not by user); the next requests fill them again."""
    note_match_words.cache_clear()
    _decoded.cache_clear()


def _choose(services: HidingServices, memory: MemoryContext, replay: Replayed | None,
            facts: TurnFacts, count_tokens, hidden: HiddenContext) -> None:
    store = services.store(memory.user) if memory.reads else None
    budget = services.notes_shown.index_budget
    # Listed (copied and sorted) only for an index to show: without one (the default) the
    # matches need the notes' ids alone, which the store gives without a copy of each.
    listed = shared_notes(store, memory.project) if store is not None and budget > 0 \
        else None
    own = session_notes(store, memory.session) if store is not None else []
    hidden.index_notes = len(listed) if listed is not None else 0
    if replay is None:
        shared = build_shared_context(memory.shows_card, listed, count_tokens, budget)
        if shared is not None:
            hidden.head = Tail(SHARED_KIND, shared.text, shared.note_ids)
            hidden.version = shared.version
    if replay is None or any(s.kind == SESSION_KIND for s in replay.dropped):
        # A fresh render, or an edit that cut the session's tail off: it comes after
        # this turn's new messages. The token only helps a model that can call the
        # memory routes, i.e. one with tools; the client has it in the response header
        # either way.
        token = hidden.token if memory.shows_card and facts.client_tools else None
        tail = build_session_tail(token, own, count_tokens)
        if tail is not None:
            hidden.tails.append(Tail(SESSION_KIND, *tail))
    if store is not None and memory.has_user_message:
        # "Already injected" belongs to this branch of the conversation: the notes in the
        # prompt it replays. A regenerated answer, an edit or a miss gets them again.
        spans = replay.spans if replay else ()
        already = {i for s in spans if s.kind in MATCHED_KINDS for i in s.note_ids}
        # the notes prefetched for this message: placed since the last answer
        prefetched = frozenset(i for s in trailing_prefetch(spans, len(replay.ids))
                               for i in s.note_ids) if replay else frozenset()
        # the notes the request may see: the user's, the project's, the session's own
        allowed = visible_note_ids(store, memory.project, memory.session)
        found = build_matches(store, facts.last_message, allowed, already,
                              count_tokens, services.notes_shown, in_place=prefetched)
        if found is not None:
            hidden.tails.append(Tail(found.kind, found.text, found.note_ids,
                                     leads=services.notes_shown.leads))


COMPACTION_MIN_DROPPED_TOKENS = 512


def note_miss(services: HidingServices, memory: MemoryContext,
              visible: list[VisibleMessage], count_tokens) -> None:
    """A prompt not replayed in a known session. Only a real compaction (the client no
    longer sends a part of the session's history that holds enough tokens) sets off the
    writer, once per dropped history, over that history: a regenerate, an edit or a
    client sending its last N messages drops too little."""
    if not memory.writes:
        return
    latest = services.latest_in(memory.user, memory.session, memory.project)
    if latest is None:
        return
    kept = {m.digest() for m in visible}
    dropped = sum(count_tokens(m.content) + sum(count_tokens(a) for _, a in m.tool_calls)
                  for m in latest.messages if m.role != "tools" and m.digest() not in kept)
    if dropped >= COMPACTION_MIN_DROPPED_TOKENS:
        services.idle.triggers.compaction(memory.user, memory.session, latest, history_key(latest))


def history_key(record: Record) -> bytes:
    """Names one session's history: two sessions with the same ids are two histories."""
    digest = hashlib.blake2b(f"{record.user}\0{record.session}\0".encode(), digest_size=16)
    digest.update(flat_ids(record.ids).tobytes())
    return digest.digest()


def injections_to_record(memory: MemoryContext, hidden: list[Tail]) -> bool:
    """Whether `record_injections` has anything to write: most turns have not, and a
    thread for nothing costs each request under load."""
    if memory.user is None:
        return False
    return memory.off_reason == "header_off" or any(
        tail.kind == "notes" or (tail.kind in (SHARED_KIND, SESSION_KIND) and tail.note_ids)
        for tail in hidden)


def record_injections(services: HidingServices, memory: MemoryContext, hidden: list[Tail],
                      request_id: str) -> None:
    """usage.json and the journal learn which notes went in (ids only). File work: it
    runs in a thread once the answer is done, never before the first token."""
    if memory.user is None:
        return
    store = services.store(memory.user)
    if memory.off_reason == "header_off":
        store.journal.append(op="memory_off", reason="header_off", user=store.user,
                             session=memory.session, request_id=request_id)
        return
    for tail in hidden:
        if tail.kind == "notes":
            store.record_injection(tail.note_ids, request_id)
        elif tail.kind in (SHARED_KIND, SESSION_KIND) and tail.note_ids:
            store.journal.append_later(op="inject_index", ok=True, ids=list(tail.note_ids),
                                 user=store.user, request_id=request_id,
                                 session=memory.session)
