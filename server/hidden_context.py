"""What memory hides in a request's prompt, and where.

* The shared memory context (card + index) after the system prompt and tools, whenever the
  prompt is rendered rather than replayed from the ledger: a new session, or a miss in a
  known one (an edit, a change of tools, a compacted history). The model always has the
  card, and every session with the same head shares its cached blocks.
* The session tail (the memory-routes token, the session's own notes) right after the new
  messages of such a turn.
* The matching notes right after each new user message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conductor.shared_context import (
    SESSION_KIND,
    SHARED_KIND,
    build_session_tail,
    session_notes,
)
from conductor.tail_notes import build_matches
from server.memory import MemoryContext, MemoryServices
from server.prompt import Tail
from server.schema import ChatCompletionRequest


@dataclass
class HiddenContext:
    token: str | None = None  # the session's memory-routes token, when memory is on for it
    head: Tail | None = None  # the shared context, placed after the system prompt and tools
    tails: list[Tail] = field(default_factory=list)  # placed after the new messages
    version: str | None = None  # the shared context's version, when the head carries it


def choose_hidden(services: MemoryServices, memory: MemoryContext, replayed: bool,
                  request: ChatCompletionRequest, count_tokens) -> HiddenContext:
    """The hidden messages of one request; `replayed` says whether the prompt starts with
    a ledger record's exact ids (which hold the shared context already)."""
    if memory.off_reason is not None:
        return HiddenContext()
    hidden = HiddenContext(token=services.token_for(memory.user, memory.session))
    store = services.store(memory.user)
    with store.one_scan():  # on the way to the first token: read the files once
        _choose(services, memory, replayed, request, count_tokens, hidden)
    return hidden


def _choose(services: MemoryServices, memory: MemoryContext, replayed: bool,
            request: ChatCompletionRequest, count_tokens, hidden: HiddenContext) -> None:
    store = services.store(memory.user) if memory.reads else None
    if not replayed:
        if services.ledger.latest(memory.user, memory.session) is not None and memory.writes:
            services.triggers.compaction(memory.user, memory.session)
        shared = services.shared_context(memory.user, memory.project, memory.shows_card,
                                         memory.reads, count_tokens)
        if shared is not None:
            hidden.head = Tail(SHARED_KIND, shared.text, shared.note_ids)
            hidden.version = shared.version
        own = session_notes(store, memory.session) if store is not None else None
        tail = build_session_tail(hidden.token if memory.shows_card else None, own,
                                  count_tokens)
        if tail is not None:
            hidden.tails.append(Tail(SESSION_KIND, *tail))
    if store is not None and memory.has_user_message:
        already = services.injected(memory.user, memory.session)
        found = build_matches(store, request.messages[-1].text(),
                              services.visible_notes(memory), already, count_tokens)
        if found is not None:
            hidden.tails.append(Tail(found.kind, found.text, found.note_ids))


def record_injections(services: MemoryServices, memory: MemoryContext, hidden: list[Tail],
                      request_id: str) -> None:
    """usage.json and the journal learn which notes went in (ids only). File work: it
    runs in a thread once the answer is done, never before the first token."""
    if memory.user is None:
        return
    store = services.store(memory.user)
    if memory.off_reason == "header_off":
        store.journal.append(op="memory_off", reason="header_off", session=memory.session,
                             request_id=request_id)
        return
    for tail in hidden:
        if tail.kind == "notes":
            store.record_injection(tail.note_ids, request_id)
        elif tail.kind in (SHARED_KIND, SESSION_KIND) and tail.note_ids:
            store.journal.append(op="inject_index", ok=True, ids=list(tail.note_ids),
                                 request_id=request_id, session=memory.session)
