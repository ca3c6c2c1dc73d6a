"""POST /v1/chat/completions: build the prompt, generate, filter, answer, record.

One request: the ledger's exact ids for the conversation so far plus the new messages
(and, with memory, tail notes) -> engine -> output parser (reasoning, content, tool calls)
-> memory filter on the content -> the client; at the end the turn is recorded in the
ledger, so the next turn's prompt starts with this one's exact ids.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conductor.ledger import Match, Record, Span, VisibleMessage
from conductor.shared_context import SHARED_KIND
from engine.engine import Delta, Engine, GenerationParams
from engine.profiles import Profile
from engine.qwen_tokens import IM_END
from server.errors import APIError
from server.hidden_context import HiddenContext, choose_hidden, note_miss, record_injections
from server.memblock import MemoryFilter
from server.memory import MemoryContext, MemoryServices, resolve_context
from server.output_parser import OutputParser, ParsedDelta
from server.prompt import (
    Tail,
    assemble,
    ids_for_text,
    render_chat,
    replay_cut,
    tools_for_template,
    visible_messages,
)
from server.schema import ChatCompletionRequest

DEFAULT_TEMPERATURE = 0.7


@dataclass(frozen=True)
class RecordedTurn:
    """One finished (or abandoned) answer, as the continuous conversation's history
    keeps it."""

    written: str  # the answer's text as the model wrote it, blocks held back
    status: str  # the status lines the client was shown after it
    reasoning: str
    tool_calls: list[tuple[str | None, str, str]]  # (id, name, arguments)
    hidden: list[Tail]  # what this turn hid after its new messages
    interrupted: bool


@dataclass
class PreparedChat:
    """A validated request, with its prompt ids, its memory context and engine parameters."""

    completion_id: str
    model: str
    prompt_ids: list[int]
    params: GenerationParams
    parse_tools: bool
    memory: MemoryContext
    visible: list[VisibleMessage]
    spans: list[Span]
    token: str | None  # the session's memory-routes token, when memory is on for it
    replayed_tokens: int = 0  # prompt ids taken from the ledger as they were
    hidden: HiddenContext = field(default_factory=HiddenContext)  # what this turn added
    created: int = field(default_factory=lambda: int(time.time()))
    # Called once the turn is recorded, on the event loop: the continuous conversation
    # numbers it in its history at once and writes the file in a worker thread.
    on_recorded: Callable[[RecordedTurn], None] | None = None

    @property
    def ledger_user(self) -> str:
        return self.memory.user or "-relayed-"


def model_names(profile: Profile) -> set[str]:
    """Names a request may use for this server's model: the profile name and the model."""
    return {profile.name, profile.model, profile.model.removeprefix("builtin:")}


def prepare(engine: Engine, profile: Profile, services: MemoryServices,
            request: ChatCompletionRequest, headers, peer: str | None,
            key_user: str | None = None, session: str | None = None,
            leading_tails: Sequence[Tail] = ()) -> PreparedChat:
    """Validate against the served profile and build the prompt; APIError when bad.
    `session` overrides the header and the derived id (the continuous conversation's);
    `leading_tails` go right after the new messages, before memory's own tails."""
    if request.model not in model_names(profile):
        raise APIError(404, f"model {request.model!r} does not exist; this server serves "
                       f"{profile.name!r}", code="model_not_found", param="model")
    if request.script is not None and not profile.scripted:
        raise APIError(400, f"'script' is only accepted by scripted profiles; {profile.name!r} "
                       "is not one", code="invalid_value", param="script")
    switch = headers.get("x-tandem-memory")
    if switch is not None and switch.strip().lower() not in ("off", "read"):
        raise APIError(400, "X-Tandem-Memory must be 'off' or 'read'", code="invalid_value",
                       param="X-Tandem-Memory")
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    memory = resolve_context(request, headers, peer, profile.memory.mode, services.settings,
                             key_user, session)
    visible = visible_messages(request)
    match = services.ledger.find(memory.user or "-relayed-", memory.session, visible)
    if match is not None and request.tools and tools_for_template(request):
        match = Match(match.record, match.matched_messages - 1)  # the tools pseudo-message
    rendered = render_chat(engine.tokenizer, request, request.enable_thinking(profile.thinking),
                           services.shown.as_written)
    cut = replay_cut(engine.tokenizer, rendered, match)
    replayed = match.record.spans if cut is not None and match is not None else None
    hidden = choose_hidden(services, memory, replayed, request, engine.count_tokens)
    built = assemble(engine.tokenizer, rendered, match, cut, hidden.head,
                     [*leading_tails, *hidden.tails], profile.block_size)
    room = profile.max_model_len - len(built.ids)
    if room < 1:
        raise APIError(400, f"the prompt is {len(built.ids)} tokens; this model's context is "
                       f"{profile.max_model_len} tokens", code="context_length_exceeded",
                       param="messages")
    max_tokens = request.requested_max_tokens()
    if max_tokens is not None and max_tokens > room:
        raise APIError(400, f"max_tokens {max_tokens} plus the prompt's {len(built.ids)} tokens "
                       f"exceed this model's context of {profile.max_model_len} tokens",
                       code="context_length_exceeded", param="max_tokens")
    if replayed is None and memory.off_reason is None:  # a valid request that missed
        note_miss(services, memory, visible, engine.count_tokens)
    script_ids = None
    if request.script is not None:
        script_ids = tuple(engine.tokenizer.encode(request.script, add_special_tokens=False))
    params = GenerationParams(
        max_tokens=max_tokens or room,
        temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        seed=request.seed,
        stop=request.stops(),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        script_ids=script_ids,
    )
    # Replayed ids bring their hidden spans along: they sit where they were.
    inherited = list(replayed or ())
    return PreparedChat(
        completion_id=completion_id, model=request.model, prompt_ids=built.ids, params=params,
        parse_tools=tools_for_template(request) is not None, memory=memory, visible=visible,
        spans=inherited + built.spans, token=hidden.token,
        replayed_tokens=built.replayed_tokens, hidden=hidden,
    )


@dataclass
class Answer:
    """Turns engine deltas into what the client sees, and records the turn at the end."""

    chat: PreparedChat
    services: MemoryServices
    tokenizer: Any
    parser: OutputParser
    memory_filter: MemoryFilter
    output_ids: list[int] = field(default_factory=list)
    engine_text: str = ""  # the text of output_ids as the engine gave it (no stop string)
    reasoning: str = ""
    last: Delta | None = None

    @classmethod
    def start(cls, chat: PreparedChat, services: MemoryServices, tokenizer) -> Answer:
        action = chat.memory.block_action
        store = services.store(chat.memory.user) if action == "store" else None
        return cls(chat, services, tokenizer, OutputParser(parse_tools=chat.parse_tools),
                   MemoryFilter(action, chat.memory, store, chat.completion_id))

    def feed(self, delta: Delta) -> ParsedDelta:
        first = len(self.output_ids)
        self.output_ids += delta.token_ids
        self.engine_text += delta.text
        self.last = delta
        return self._filtered(self.parser.feed(delta.text), first)

    def finish(self) -> ParsedDelta:
        rest = self._filtered(self.parser.finish(), len(self.output_ids))
        rest.content += self.memory_filter.finish(len(self.output_ids))
        stopped_by_string = self.last is not None and isinstance(self.last.stop_reason, str)
        # A stop string's token holds text the client never saw: the record ends where
        # the client's text ends.
        self._record(self.engine_text if stopped_by_string else None)
        return rest

    def stopped(self) -> None:
        """The client left mid-answer: record what it was shown (a later turn may send
        it back), and have the writer look at the session."""
        held = len(self.parser.held_text) + len(self.memory_filter.held_text)
        if self.output_ids:
            self._record(self.engine_text[: len(self.engine_text) - held], interrupted=True)
        elif self.chat.on_recorded is not None:  # what the user said is kept all the same
            self._hand_over(interrupted=True)
        self.gave_up()

    def _filtered(self, parsed: ParsedDelta, first: int) -> ParsedDelta:
        self.reasoning += parsed.reasoning
        if parsed.content:
            parsed.content = self.memory_filter.feed(parsed.content, first, len(self.output_ids))
        return parsed

    def _record(self, shown_text: str | None = None, interrupted: bool = False) -> None:
        """The turn into the ledger: the prompt and the output ids, which end where the
        client's text ends when `shown_text` (the engine text it saw) is given."""
        chat = self.chat
        output = (self.output_ids if shown_text is None
                  else ids_for_text(self.tokenizer, self.output_ids, shown_text))
        calls = [(c.name, c.arguments) for c in self.parser.tool_calls]
        written = self.memory_filter.visible_text
        shown = written + self.memory_filter.status_suffix
        self.services.shown.remember(shown, written)
        answer = VisibleMessage.of("assistant", shown, calls)
        offset = len(chat.prompt_ids)
        blocks = [Span(offset + h.start, offset + h.end, "block", h.note_ids)
                  for h in self.memory_filter.hidden if h.end <= len(output)]
        self.services.ledger.record(Record(
            user=chat.ledger_user, session=chat.memory.session,
            messages=(*chat.visible, answer), ids=(*chat.prompt_ids, *output),
            ended_cleanly=bool(output) and output[-1] == IM_END,
            spans=(*chat.spans, *blocks),
        ))
        memory = chat.memory
        self._note_head()
        added = [t for t in (chat.hidden.head, *chat.hidden.tails) if t is not None]
        asyncio.get_running_loop().run_in_executor(
            None, record_injections, self.services, memory, added, chat.completion_id)
        if self.memory_filter.hidden:  # blocks held back: notes may have been written
            self.services.on_change(chat.memory.user)
        if chat.memory.writes:
            new_tokens = len(chat.prompt_ids) - chat.replayed_tokens + len(self.output_ids)
            self.services.triggers.turn_done(chat.memory.user, chat.memory.session, new_tokens)
        self._hand_over(interrupted)

    def _hand_over(self, interrupted: bool) -> None:
        """The turn to `on_recorded` (which must not wait on a disk: it runs here)."""
        if self.chat.on_recorded is None:
            return
        turn = RecordedTurn(
            written=self.memory_filter.visible_text, status=self.memory_filter.status_suffix,
            reasoning=self.reasoning,
            tool_calls=[(c.id, c.name, c.arguments) for c in self.parser.tool_calls],
            hidden=[t for t in (self.chat.hidden.head, *self.chat.hidden.tails) if t],
            interrupted=interrupted)
        self.chat.on_recorded(turn)

    def _note_head(self) -> None:
        """The head and the shared context this turn ran are cached now: the prewarm
        keeps them current when the shared context changes."""
        chat, group = self.chat, self.chat.memory.context_group()
        if chat.hidden.version is None or group is None:
            return
        shared = next((s for s in chat.spans if s.kind == SHARED_KIND), None)
        if shared is not None:
            head = tuple(chat.prompt_ids[: shared.start])
            self.services.prewarm.seen(group, head, chat.hidden.version)

    def gave_up(self) -> None:
        """The client left mid-answer: the writer should look at what it had said."""
        if self.chat.memory.writes:
            self.services.triggers.give_up(self.chat.memory.user, self.chat.memory.session)

    @property
    def finish_reason(self) -> str:
        if self.parser.tool_calls:
            return "tool_calls"
        reason = self.last.finish_reason if self.last else None
        return reason if reason in ("stop", "length") else "stop"

    def usage(self) -> dict:
        prompt_tokens = len(self.chat.prompt_ids)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(self.output_ids),
            "total_tokens": prompt_tokens + len(self.output_ids),
            "prompt_tokens_details": {"cached_tokens": self.last.cached_tokens if self.last else 0},
        }


async def _engine_deltas(engine: Engine, chat: PreparedChat) -> AsyncIterator[Delta]:
    async for delta in engine.generate(chat.prompt_ids, chat.params, request_id=chat.completion_id):
        yield delta


async def complete(engine: Engine, services: MemoryServices, chat: PreparedChat) -> dict:
    """The whole answer as one chat.completion object."""
    answer = Answer.start(chat, services, engine.tokenizer)
    parts: list[ParsedDelta] = []
    try:
        async for delta in _engine_deltas(engine, chat):
            parts.append(answer.feed(delta))
    except asyncio.CancelledError:  # the client went away before the answer was whole
        answer.stopped()
        raise
    parts.append(answer.finish())
    reasoning = "".join(p.reasoning for p in parts)
    message: dict = {"role": "assistant", "content": "".join(p.content for p in parts) or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if answer.parser.tool_calls:
        message["tool_calls"] = [c.as_openai() for c in answer.parser.tool_calls]
    return {
        "id": chat.completion_id,
        "object": "chat.completion",
        "created": chat.created,
        "model": chat.model,
        "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason}],
        "usage": answer.usage(),
    }


def _chunk(chat: PreparedChat, delta: dict, finish_reason: str | None = None) -> str:
    body = {
        "id": chat.completion_id,
        "object": "chat.completion.chunk",
        "created": chat.created,
        "model": chat.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _delta_fields(parsed: ParsedDelta, first_call_index: int) -> dict:
    out: dict = {}
    if parsed.reasoning:
        out["reasoning_content"] = parsed.reasoning
    if parsed.content:
        out["content"] = parsed.content
    if parsed.tool_calls:
        out["tool_calls"] = [c.as_openai(first_call_index + i)
                             for i, c in enumerate(parsed.tool_calls)]
    return out


async def stream(engine: Engine, services: MemoryServices, chat: PreparedChat,
                 include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format, ending with `data: [DONE]`."""
    answer = Answer.start(chat, services, engine.tokenizer)
    calls_sent = 0
    yield _chunk(chat, {"role": "assistant", "content": ""})
    try:
        async for delta in _engine_deltas(engine, chat):
            parsed = answer.feed(delta)
            if parsed:
                yield _chunk(chat, _delta_fields(parsed, calls_sent))
                calls_sent += len(parsed.tool_calls)
    except (GeneratorExit, asyncio.CancelledError):
        answer.stopped()
        raise
    rest = answer.finish()
    if rest:
        yield _chunk(chat, _delta_fields(rest, calls_sent))
    yield _chunk(chat, {}, finish_reason=answer.finish_reason)
    if include_usage:
        usage_body = {"id": chat.completion_id, "object": "chat.completion.chunk",
                      "created": chat.created, "model": chat.model, "choices": [],
                      "usage": answer.usage()}
        yield f"data: {json.dumps(usage_body)}\n\n"
    yield "data: [DONE]\n\n"


def response_headers(chat: PreparedChat) -> dict[str, str]:
    return {"X-Tandem-Memory-Token": chat.token} if chat.token else {}

