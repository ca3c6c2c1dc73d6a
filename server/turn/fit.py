"""A chat request's prompt, laid out so that it fits the model's context.

Memory adds to a prompt what the client never sent: the engine's tool catalog, the shared
context (card and index), the notes matched to the message and the session's tail. Plain
vLLM serves any request whose own messages fit; so must Tandem. When the whole layout
leaves too little room for the answer, memory's parts give way, least needed first:

1. the matched notes and the session's tail;
2. the ledger's replayed ids (with the notes, blocks and tool exchanges of earlier turns
   in them): the prompt is rendered whole, with the shared context after the head;
3. the shared context (card and index);
4. the engine's tool catalog.

Each step costs this turn a prefix-cache miss. The ledger records the prompt as it was
sent, and a part left out comes back as soon as it fits again: a replayed record without
the shared context, when this turn would show one, is laid out afresh with it first.
Only when the client's own request does not fit is it refused. Memory's layouts must leave
the answer its room: the client's `max_tokens`, or without one `ANSWER_RESERVE` (the
client's own request needs one token, as on vLLM).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from conductor.memory.context import MemoryContext
from conductor.memory.hiding import SHARED_KIND, HiddenContext, Tail, TurnFacts, choose_hidden
from conductor.memory.ledger import Span, VisibleMessage
from conductor.memory.services import MemoryServices
from engine.backend import EngineBackend
from engine.profiles import Profile
from server.http.schema import ChatCompletionRequest
from server.turn.answering.engine_tools import NAMES as ENGINE_TOOLS
from server.turn.answering.engine_tools import with_engine_tools
from server.turn.prompt import (
    BuiltPrompt,
    RenderedChat,
    assemble,
    render_chat,
    tools_for_template,
    visible_messages,
)
from server.turn.replay import replay_without_stale_reasoning

log = logging.getLogger("tandem.chat")


@dataclass(frozen=True)
class Layout:
    """One way to lay the prompt out, and what it holds."""

    request: ChatCompletionRequest  # with the engine's tools first, when they are offered
    engine_tools: bool
    visible: list[VisibleMessage]
    rendered: RenderedChat
    replayed: tuple[Span, ...] | None  # the ledger record's spans, when its ids lead
    hidden: HiddenContext  # what this turn adds
    built: BuiltPrompt
    partial: bool = False  # the record's ids stop at a message the client changed

    @property
    def tokens(self) -> int:
        return len(self.built.ids)

    @property
    def holds_memory(self) -> bool:
        """Whether memory put anything in it (the last layout is the client's own; a
        replayed record made with memory off holds no hidden span, and is the client's
        own prompt too)."""
        return bool(self.engine_tools or self.replayed or self.hidden.head
                    or self.hidden.tails)


# Without a max_tokens, memory's parts leave the answer this many tokens (an eighth of a
# small context): a chat answer's usual length. Less, and a long conversation would keep
# the card and notes until the answer had almost no room.
ANSWER_RESERVE = 1024


def answer_reserve(max_model_len: int) -> int:
    return min(ANSWER_RESERVE, max_model_len // 8)


def layouts(engine: EngineBackend, profile: Profile, services: MemoryServices,
            memory: MemoryContext, request: ChatCompletionRequest, enable_thinking: bool,
            leading_tails: Sequence[Tail], gives_way: bool = True,
            data: Sequence[str] = ()) -> Iterator[Layout]:
    """The whole layout first, then (with `gives_way`) each one with less of memory's
    parts; `leading_tails` (the caller's own) stay in every one. The caller takes the
    first that fits."""
    tokenizer, block = engine.tokenizer, engine.reuse_block
    offered, engine_tools = with_engine_tools(request, memory,
                                              profile.tool_call_format == "qwen")
    visible = visible_messages(offered)
    match = services.ledger.find(memory.user or "-relayed-", memory.session, visible,
                                 memory.project, bare=memory.off_reason is not None)
    if match is not None and offered.tools and tools_for_template(offered):
        # the tools pseudo-message
        match = dataclasses.replace(match, matched_messages=match.matched_messages - 1)
    as_written = services.shown.for_user(memory.user)
    rendered = render_chat(tokenizer, offered, enable_thinking, as_written, data)
    replay = replay_without_stale_reasoning(tokenizer, rendered, match)
    if replay is not None and memory.user is not None and _holds_a_deleted_note(
            services, memory.user, replay.spans):
        replay = None  # its ids hold a deleted note's text: rendered afresh, without it
    fresh = None
    if replay is not None and not any(s.kind == SHARED_KIND for s in replay.spans) \
            and _may_show_shared(services, memory):
        # A record laid out without the shared context: afresh with it, when it fits
        fresh = _rendered_whole(tokenizer, services, memory, rendered, offered, engine,
                                engine_tools, visible, leading_tails)
        if fresh is not None and fresh.hidden.head is not None:
            yield fresh
    replayed = replay.spans if replay is not None else None
    hidden = choose_hidden(services, memory, replay, turn_facts(offered),
                           engine.count_tokens, tokenizer.decode)
    whole = Layout(offered, engine_tools, visible, rendered, replayed, hidden,
                   assemble(tokenizer, rendered, replay, hidden.head,
                            [*leading_tails, *hidden.tails], block),
                   partial=replay is not None and replay.partial)
    yield whole
    if not gives_way:
        return
    if hidden.tails:
        without_tails = replace(hidden, tails=[])
        yield replace(whole, hidden=without_tails,
                      built=assemble(tokenizer, rendered, replay, hidden.head,
                                     list(leading_tails), block))
    if replay is not None:  # the record's earlier turns go; the shared context stays
        fresh = fresh or _rendered_whole(tokenizer, services, memory, rendered, offered,
                                         engine, engine_tools, visible, leading_tails)
        if fresh is not None and fresh.hidden.head is not None:
            yield replace(fresh, hidden=replace(fresh.hidden, tails=[]),
                          built=assemble(tokenizer, rendered, None, fresh.hidden.head,
                                         list(leading_tails), block))
    bare = HiddenContext(token=hidden.token)
    if hidden.head is not None or replayed is not None:
        yield replace(whole, replayed=None, hidden=bare, partial=False,
                      built=assemble(tokenizer, rendered, None, None, list(leading_tails)))
    if engine_tools:
        plain = render_chat(tokenizer, request, enable_thinking, as_written, data)
        yield Layout(request, False, visible_messages(request), plain, None, bare,
                     assemble(tokenizer, plain, None, None, list(leading_tails)))


def _rendered_whole(tokenizer, services: MemoryServices, memory: MemoryContext,
                    rendered: RenderedChat, offered: ChatCompletionRequest,
                    engine: EngineBackend, engine_tools: bool, visible: list[VisibleMessage],
                    leading_tails: Sequence[Tail]) -> Layout | None:
    """The conversation rendered whole, with the shared context and this turn's tails, as
    a new session would get it; None when memory is off."""
    if memory.off_reason is not None:
        return None
    hidden = choose_hidden(services, memory, None, turn_facts(offered), engine.count_tokens)
    return Layout(offered, engine_tools, visible, rendered, None, hidden,
                  assemble(tokenizer, rendered, None, hidden.head,
                           [*leading_tails, *hidden.tails], engine.reuse_block))


def turn_facts(request: ChatCompletionRequest) -> TurnFacts:
    """What memory's hiding decision reads of the request: its last message, and whether
    the client offered tools of its own (the engine's own do not count)."""
    # on the request's own objects: tools_for_template dumps each tool, which an agent's
    # forty tools make a cost on every request, memory on or off
    client_tools = request.tool_choice != "none" and any(
        t.function.name not in ENGINE_TOOLS for t in request.tools or ())
    try:
        last = request.messages[-1].text()
    except ValueError:  # non-text parts: the render has refused them already
        last = ""
    return TurnFacts(last, client_tools)


def _may_show_shared(services: MemoryServices, memory: MemoryContext) -> bool:
    """Whether this request would get a shared context at all (the card, or an index):
    else a record without one is not worth a second, whole render."""
    if memory.off_reason is not None:
        return False
    return memory.shows_card or (memory.reads and services.notes_shown.index_budget > 0)


def _holds_a_deleted_note(services: MemoryServices, user: str, spans) -> bool:
    """A record whose hidden spans hold a note that is gone (deleted, not archived): its
    text must not be replayed into another prompt."""
    note_ids = {i for span in spans for i in span.note_ids}
    if not note_ids:
        return False
    return bool(services.store(user).missing(note_ids))


def fitting(candidates: Iterator[Layout], fits: Callable[[Layout], bool],
            then: Callable[[Layout], bool] | None = None) -> Layout:
    """The first layout `fits` accepts (the later ones are never built), else the first
    `then` accepts (when none fits as asked: a max_tokens no layout can leave, which is cut
    to the room left), else the last: the least memory puts in, the client's own request,
    whose length a refusal names."""
    built: list[Layout] = []
    for layout in candidates:
        built.append(layout)
        if fits(layout):
            return _chosen(built[0], layout)
    assert built, "layouts() yields the whole layout first"
    if then is not None:
        for layout in built:
            if then(layout):
                return _chosen(built[0], layout)
    return built[-1]


def _chosen(first: Layout, layout: Layout) -> Layout:
    if layout is not first:
        log.info("memory's hidden context gave way to fit the model's context "
                 "(%d tokens laid out, %d sent)", first.tokens, layout.tokens)
    return layout
