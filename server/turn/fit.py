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
the shared context, when this turn would show one, is laid out afresh with it first;
not one laid out without it because it had nothing to show (`Record.shared_empty`: no
card for the request, no note yet), which is replayed as it is when the first note
appears (the note reaches it as matched notes do, `choose_hidden`), until the index
would list `EMPTY_INDEX_KEPT_UNDER` notes: then it is laid out afresh once, with the
index, as a session begun now would be.
Only when the client's own request does not fit is it refused. Memory's layouts must leave
the answer its room: the client's `max_tokens`, or without one `ANSWER_RESERVE` (the
client's own request needs one token, as on vLLM).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from conductor.memory.context import MemoryContext
from conductor.memory.hiding import SHARED_KIND
from conductor.memory.turn import HiddenContext, Tail, TurnFacts, TurnMemory
from conductor.memory.types import Span, VisibleMessage
from engine.backend import EngineBackend
from server.http.schema import ChatCompletionRequest
from server.turn.answering.engine_tools import NAMES as ENGINE_TOOLS
from server.turn.prompt import (
    BuiltPrompt,
    RenderedChat,
    assemble,
    render_chat,
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

    @property
    def added_spans(self) -> list[Span]:
        """The hidden spans this turn adds (replayed ones were counted before)."""
        return self.built.spans

    @property
    def missed(self) -> bool:
        """The prompt is not a whole record replayed: a new session, a miss or an edit."""
        return self.replayed is None or self.partial


# Without a max_tokens, memory's parts leave the answer this many tokens (an eighth of a
# small context): a chat answer's usual length. Less, and a long conversation would keep
# the card and notes until the answer had almost no room.
ANSWER_RESERVE = 1024


# A record laid out with nothing to show keeps its prefix while its notes are few (each
# reaches it as a matched note); once the index would list this many, the session pays
# one prefix-cache miss to get it, rather than never seeing the index in its life.
EMPTY_INDEX_KEPT_UNDER = 8


def answer_reserve(max_model_len: int) -> int:
    return min(ANSWER_RESERVE, max_model_len // 8)


def layouts(engine: EngineBackend, view: TurnMemory, memory: MemoryContext,
            request: ChatCompletionRequest, offered: ChatCompletionRequest,
            engine_tools: bool, visible: list[VisibleMessage], enable_thinking: bool,
            leading_tails: Sequence[Tail], gives_way: bool = True,
            data: Sequence[str] = ()) -> Iterator[Layout]:
    """The whole layout first, then (with `gives_way`) each one with less of memory's
    parts; `leading_tails` (the caller's own) stay in every one. The caller takes the
    first that fits. `view`: what memory gave the turn (`MemoryServices.begin_turn`);
    `offered`: the request with the engine's tools, when `engine_tools`; `visible`: its
    messages in the ledger's terms."""
    tokenizer, block = engine.tokenizer, engine.reuse_block
    as_written = view.as_written
    rendered = render_chat(tokenizer, offered, enable_thinking, as_written, data)
    replay = replay_without_stale_reasoning(tokenizer, rendered, view.match)
    if replay is not None and any(i in view.deleted for s in replay.spans for i in s.note_ids):
        replay = None  # its ids hold a deleted note's text: rendered afresh, without it
    hidden = view.hidden(replay) if replay is not None else _hidden_whole(view)
    was_empty = replay is not None and _was_empty(view, replay)
    # kept as it was, unless its index would now list many notes (then tried afresh)
    empty = was_empty and hidden.index_notes < EMPTY_INDEX_KEPT_UNDER
    fresh = None
    if replay is not None and not any(s.kind == SHARED_KIND for s in replay.spans) \
            and view.shows_shared and not empty:
        # A record whose shared context gave way to fit: afresh with it, when it fits
        fresh = _rendered_whole(engine, view, memory, rendered, offered, engine_tools,
                                visible, leading_tails)
        if fresh is not None and fresh.hidden.head is not None:
            yield fresh
    replayed = replay.spans if replay is not None else None
    if was_empty:  # replayed as it was (the fresh one, if tried, did not fit): still so
        hidden = replace(hidden, shared_empty=True)
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
        fresh = fresh or _rendered_whole(engine, view, memory, rendered, offered,
                                         engine_tools, visible, leading_tails)
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


def _rendered_whole(engine: EngineBackend, view: TurnMemory, memory: MemoryContext,
                    rendered: RenderedChat, offered: ChatCompletionRequest,
                    engine_tools: bool, visible: list[VisibleMessage],
                    leading_tails: Sequence[Tail]) -> Layout | None:
    """The conversation rendered whole, with the shared context and this turn's tails, as
    a new session would get it; None when memory is off."""
    if memory.off_reason is not None:
        return None
    hidden = _hidden_whole(view)
    return Layout(offered, engine_tools, visible, rendered, None, hidden,
                  assemble(engine.tokenizer, rendered, None, hidden.head,
                           [*leading_tails, *hidden.tails], engine.reuse_block))


def _hidden_whole(view: TurnMemory) -> HiddenContext:
    """The hiding decision for a prompt rendered whole, which says whether a shared context
    this turn would show had nothing to show."""
    hidden = view.hidden(None)
    if view.shows_shared and hidden.head is None:
        hidden = replace(hidden, shared_empty=True)
    return hidden


def _was_empty(view: TurnMemory, replay) -> bool:
    """Whether the replayed record holds no shared context because it had nothing to show
    (not: it gave way), under the parts this turn would show too (the card, the index): a
    request that now shows the card gets it afresh."""
    record, memory = view.match.record, view.facts.memory
    return record.shared_empty and memory is not None \
        and record.shared_flags == (memory.shows_card, memory.reads) \
        and not any(s.kind == SHARED_KIND for s in replay.spans)


def count_hidden(metrics, layout: Layout) -> None:
    """/metrics' hidden parts (server.http.metrics.TandemMetrics; None: not counted): what
    this turn's layout added, as replayed ones were counted when they were added."""
    if metrics is not None:
        for span in layout.added_spans:
            metrics.hidden(span.kind, span.end - span.start)


def turn_facts(offered: ChatCompletionRequest, visible: list[VisibleMessage],
               memory: MemoryContext, commands: bool, counting: bool = False) -> TurnFacts:
    """What memory reads of the request (`offered`: with the engine's tools; `visible`:
    its messages as the ledger matches them): its last message, whether the client
    offered tools of its own (the engine's own do not count), and the newest user message
    when it may open with a memory command (`commands`: the profile takes them)."""
    # on the request's own objects: tools_for_template dumps each tool, which an agent's
    # forty tools make a cost on every request, memory on or off
    client_tools = offered.tool_choice != "none" and any(
        t.function.name not in ENGINE_TOOLS for t in offered.tools or ())
    try:
        last = offered.messages[-1].text()
    except ValueError:  # non-text parts: the render has refused them already
        last = ""
    # only the user's own newest message counts (not a tool's result, nor a document)
    said = commands and offered.messages[-1].role == "user" and bool(last)
    return TurnFacts(last, client_tools, memory, tuple(visible),
                     tools_message=bool(visible) and visible[0].role == "tools",
                     command_text=last if said else None, counting=counting)


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
