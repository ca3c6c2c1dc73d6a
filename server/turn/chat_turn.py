"""POST /v1/chat/completions: build the prompt, generate, filter, answer, record.

One request: the ledger's exact ids for the conversation so far plus the new messages
(and, with memory, tail notes) -> engine -> output parser (reasoning, content, tool calls)
-> memory filter on the content -> the client; at the end the turn is recorded in the
ledger, so the next turn's prompt starts with this one's exact ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from conductor.ledger.records import Span, VisibleMessage
from engine.engine import Engine, EngineDead, GenerationParams
from engine.profiles import Profile
from server.http.errors import APIError
from server.http.schema import SYSTEM_FINGERPRINT, ChatCompletionRequest
from server.http.sse import prepended
from server.turn.answer import Answer, RecordedTurn, prompt_logprobs_json
from server.turn.choices import choice_copies, combined_usage, merged
from server.turn.constraints.response_format import answer_schema
from server.turn.constraints.structured import check_structured, structured_params
from server.turn.constraints.tool_choice import ForcedChoice, forced_choice
from server.turn.engine_tools import NAMES as engine_tool_names
from server.turn.engine_tools import EngineToolbox
from server.turn.fit import fitting, layouts
from server.turn.generate import answer_deltas
from server.turn.hidden import HiddenContext, note_miss
from server.turn.memory import MemoryContext, MemoryServices, resolve_context
from server.turn.output_parser import ParsedDelta
from server.turn.prompt import Tail, tools_for_template

DEFAULT_TEMPERATURE = 0.7


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
    enable_thinking: bool = False
    engine_tools: bool = False  # memory_search and memory_read are in the tool catalog
    # Scripted profiles: the forced ids of each generation (one follows each engine-tool
    # call), None for one the model writes itself; past the list's end a generation
    # ends at once.
    scripts: tuple[tuple[int, ...] | None, ...] = ()
    forced: ForcedChoice | None = None  # tool_choice "required" or named: JSON for the call
    json_answer: bool = False  # response_format holds the answer to JSON: no blocks, no calls
    replayed_tokens: int = 0  # prompt ids taken from the ledger as they were
    hidden: HiddenContext = field(default_factory=HiddenContext)  # what this turn added
    created: int = field(default_factory=lambda: int(time.time()))
    # Called once the turn is recorded, on the event loop: the continuous conversation
    # numbers it in its history at once and writes the file in a worker thread.
    on_recorded: Callable[[RecordedTurn], None] | None = None
    # vLLM's extras: n choices (this is choice `choice`; only choice 0 is recorded), the
    # ids of the prompt and of each answer, reasoning shown or not, tokens named by id.
    choices: int = 1
    choice: int = 0
    return_token_ids: bool = False
    include_reasoning: bool = True
    tokens_as_ids: bool = False

    @property
    def records(self) -> bool:
        return self.choice == 0

    @property
    def request_id(self) -> str:
        """The engine request's id: the completion's, with the choice for n > 1."""
        return self.completion_id if self.choice == 0 else f"{self.completion_id}-{self.choice}"

    @property
    def ledger_user(self) -> str:
        return self.memory.user or "-relayed-"

    def script_for(self, generation: int) -> tuple[int, ...] | None:
        """The forced ids of the answer's `generation`-th engine generation (0: the first)."""
        if not self.scripts:
            return None
        return self.scripts[generation] if generation < len(self.scripts) else ()


def model_names(profile: Profile) -> set[str]:
    """Names a request may use for this server's model: the profile name, the model and
    the served names."""
    return {profile.name, profile.model, profile.model.removeprefix("builtin:"),
            *profile.served_names}


class ContextOverflow(APIError):
    """The prompt leaves less room than the answer needs (`prompt_tokens` says how long)."""

    def __init__(self, message: str, param: str, prompt_tokens: int) -> None:
        super().__init__(400, message, code="context_length_exceeded", param=param)
        self.prompt_tokens = prompt_tokens


def prepare(engine: Engine, profile: Profile, services: MemoryServices,
            request: ChatCompletionRequest, headers, peer: str | None,
            key_user: str | None = None, session: str | None = None,
            leading_tails: Sequence[Tail] = (), answer_room: int = 1,
            hidden_gives_way: bool = True, data: Sequence[str] = ()) -> PreparedChat:
    """Validate against the served profile and build the prompt; APIError when bad.
    `session` overrides the header and the derived id (the continuous conversation's);
    `leading_tails` go right after the new messages, before memory's own tails;
    `answer_room`: the fewest tokens the prompt must leave for the answer;
    `hidden_gives_way`: memory's hidden parts are left out before the request is refused
    as too long (`server/turn/fit.py`); the ContextOverflow then counts the prompt
    without them. `data`: message contents that are data (the continuous conversation's
    layer files): their special-token text is encoded as text."""
    if request.model is not None and request.model not in model_names(profile):
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
    if request.shows_prompt() and memory.header is None:
        # The prompt's ids and log-probabilities are the client's to see, hidden parts
        # are not: a request that asks for them runs as with X-Tandem-Memory: off.
        memory = dataclasses.replace(memory, header="off")
    vocabulary = len(engine.tokenizer)
    if any(int(token) >= vocabulary for token in request.logit_bias or {}):
        raise APIError(400, f"logit_bias: token ids are below {vocabulary}",
                       code="invalid_value", param="logit_bias")
    forced = forced_choice(request)
    answer_json = answer_schema(request)
    structured = request.structured_outputs
    if structured is not None:
        check_structured(structured)
    if answer_json is not None and forced is not None:
        raise APIError(400, "response_format and a tool_choice that forces a call cannot both "
                       "hold: the answer is either the call or the JSON",
                       code="invalid_value", param="response_format")
    calls_tools = profile.tool_call_format == "qwen"
    enable_thinking = request.enable_thinking(profile.thinking)
    max_tokens = request.requested_max_tokens()
    need = max(answer_room, max_tokens or 0)
    layout = fitting(layouts(engine, profile, services, memory, request, enable_thinking,
                             leading_tails, hidden_gives_way, data),
                     lambda laid: profile.max_model_len - laid.tokens >= need)
    request, built, hidden = layout.request, layout.built, layout.hidden
    replayed, visible, engine_tools = layout.replayed, layout.visible, layout.engine_tools
    room = profile.max_model_len - len(built.ids)
    if room < answer_room:
        raise ContextOverflow(f"the prompt is {len(built.ids)} tokens; this model's context is "
                              f"{profile.max_model_len} tokens", "messages", len(built.ids))
    if max_tokens is not None and max_tokens > room:
        raise ContextOverflow(f"max_tokens {max_tokens} plus the prompt's {len(built.ids)} "
                              f"tokens exceed this model's context of {profile.max_model_len}"
                              " tokens", "max_tokens", len(built.ids))
    if services.metrics is not None:  # a valid request: its hidden context goes in
        for span in built.spans:  # what this turn adds; replayed spans were counted before
            services.metrics.hidden(span.kind, span.end - span.start)
    if replayed is None and memory.off_reason is None:  # a valid request that missed
        note_miss(services, memory, visible, engine.count_tokens)
    scripts = [request.script] if isinstance(request.script, str) else request.script or []
    encode = engine.tokenizer.encode
    scripts_ids = [None if s is None else tuple(encode(s, add_special_tokens=False))
                   for s in scripts]
    script_ids = scripts_ids[0] if scripts_ids else None
    params = GenerationParams(
        max_tokens=max_tokens or min(room, profile.default_max_tokens or room),
        temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        seed=request.seed,
        stop=request.stops(),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=request.repetition_penalty or 1.0,
        min_p=request.min_p or 0.0,
        logit_bias=tuple((int(t), b) for t, b in (request.logit_bias or {}).items()),
        script_ids=script_ids,
        top_logprobs=(request.top_logprobs or 0) if request.logprobs else None,
        cache_salt=services.cache_salt(memory.user),
        min_tokens=request.min_tokens,
        prompt_logprobs=request.prompt_logprobs,
        **(structured_params(structured) if structured is not None else
           {"json_schema": forced.schema if forced is not None else answer_json}),
    )
    # Replayed ids bring their hidden spans along: they sit where they were.
    inherited = list(replayed or ())
    return PreparedChat(
        completion_id=completion_id, model=request.model or profile.name, prompt_ids=built.ids,
        params=params,
        parse_tools=(calls_tools and answer_json is None and structured is None
                     and tools_for_template(request) is not None),
        memory=memory, visible=visible,
        spans=inherited + built.spans, token=hidden.token, enable_thinking=enable_thinking,
        engine_tools=engine_tools, scripts=tuple(scripts_ids), forced=forced,
        json_answer=answer_json is not None or structured is not None,
        replayed_tokens=built.replayed_tokens, hidden=hidden,
        choices=request.n, return_token_ids=bool(request.return_token_ids),
        include_reasoning=request.include_reasoning,
        tokens_as_ids=bool(request.return_tokens_as_token_ids),
    )


def _start(engine: Engine, services: MemoryServices, chat: PreparedChat,
           toolbox: EngineToolbox | None) -> tuple[Answer, EngineToolbox | None]:
    toolbox = toolbox if chat.engine_tools and not chat.json_answer else None
    return Answer.start(chat, services, engine.tokenizer, engine.tokens.end_of_turn,
                        engine_tool_names if toolbox is not None else frozenset()), toolbox


async def complete(engine: Engine, services: MemoryServices, chat: PreparedChat,
                   toolbox: EngineToolbox | None = None) -> dict:
    """The whole answer (n choices of it) as one chat.completion object."""
    done = await asyncio.gather(*(_complete_choice(engine, services, c, toolbox)
                                  for c in choice_copies(chat)))
    body = {
        "id": chat.completion_id,
        "object": "chat.completion",
        "created": chat.created,
        "model": chat.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [choice for choice, _ in done],
        "usage": combined_usage([answer.usage() for _, answer in done]),
        # vLLM's own fields, null unless asked for (its clients read them as attributes)
        "prompt_logprobs": prompt_logprobs_json(done[0][1].prompt_logprobs)
        if chat.params.prompt_logprobs is not None else None,
        "prompt_token_ids": list(chat.prompt_ids) if chat.return_token_ids else None,
    }
    return body


async def _complete_choice(engine: Engine, services: MemoryServices, chat: PreparedChat,
                           toolbox: EngineToolbox | None) -> tuple[dict, Answer]:
    answer, toolbox = _start(engine, services, chat, toolbox)
    parts: list[ParsedDelta] = []
    try:
        async for parsed in answer_deltas(engine, answer, toolbox):
            parts.append(parsed)
    except asyncio.CancelledError:  # the client went away before the answer was whole
        answer.stopped()
        raise
    parts.append(answer.finish())
    reasoning = "".join(p.reasoning for p in parts)
    message: dict = {"role": "assistant", "content": "".join(p.content for p in parts) or None}
    if reasoning and chat.include_reasoning:
        message.update(reasoning_fields(reasoning))
    if answer.client_calls:
        message["tool_calls"] = [c.as_openai() for c in answer.client_calls]
    logprobs = answer.shown_logprobs(final=True) if chat.params.top_logprobs is not None \
        else None
    choice = {"index": chat.choice, "message": message,
              "logprobs": None if logprobs is None else {"content": logprobs},
              "finish_reason": answer.finish_reason,
              # a stop string, as vLLM's; the end of turn is the model's end: None
              "stop_reason": answer.last.stop_reason
              if answer.last and isinstance(answer.last.stop_reason, str) else None,
              "token_ids": list(answer.output_ids) if chat.return_token_ids else None}
    return choice, answer


def reasoning_fields(reasoning: str) -> dict[str, str]:
    """The reasoning under both names clients read: `reasoning` (vLLM since 0.11, after
    OpenAI's guidance) and `reasoning_content` (DeepSeek's, still read by the Vercel AI SDK,
    OpenCode and older vLLM clients)."""
    return {"reasoning": reasoning, "reasoning_content": reasoning}


def _chunk(chat: PreparedChat, delta: dict, finish_reason: str | None = None,
           logprobs: list[dict] | None = None, token_ids: list[int] | None = None,
           usage: dict | None = None) -> str:
    choice: dict = {"index": chat.choice, "delta": delta, "finish_reason": finish_reason}
    if logprobs:
        choice["logprobs"] = {"content": logprobs}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    body = {
        "id": chat.completion_id,
        "object": "chat.completion.chunk",
        "created": chat.created,
        "model": chat.model,
        "choices": [choice],
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _delta_fields(chat: PreparedChat, parsed: ParsedDelta, first_call_index: int) -> dict:
    out: dict = {}
    if parsed.reasoning and chat.include_reasoning:
        out.update(reasoning_fields(parsed.reasoning))
    if parsed.content:
        out["content"] = parsed.content
    if parsed.tool_calls:
        out["tool_calls"] = [c.as_openai(first_call_index + i)
                             for i, c in enumerate(parsed.tool_calls)]
    return out


def _joined(first: ParsedDelta, then: ParsedDelta) -> ParsedDelta:
    return ParsedDelta(reasoning=first.reasoning + then.reasoning,
                       content=first.content + then.content,
                       tool_calls=[*first.tool_calls, *then.tool_calls])


async def stream(engine: Engine, services: MemoryServices, chat: PreparedChat,
                 include_usage: bool, toolbox: EngineToolbox | None = None,
                 continuous_usage: bool = False) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format (the n choices' chunks as they come),
    ending with `data: [DONE]`. `continuous_usage`: vLLM's continuous_usage_stats."""
    answers: list[Answer] = []
    async for event in merged([_choice_events(engine, services, c, toolbox, answers,
                                              continuous_usage)
                               for c in choice_copies(chat)]):
        yield event
    if include_usage:
        usage_body = {"id": chat.completion_id, "object": "chat.completion.chunk",
                      "created": chat.created, "model": chat.model,
                      "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [],
                      "usage": combined_usage([a.usage() for a in
                                               sorted(answers, key=lambda a: a.chat.choice)])}
        yield f"data: {json.dumps(usage_body)}\n\n"
    yield "data: [DONE]\n\n"


async def _choice_events(engine: Engine, services: MemoryServices, chat: PreparedChat,
                         toolbox: EngineToolbox | None, answers: list[Answer],
                         continuous_usage: bool = False) -> AsyncIterator[str]:
    """One choice's chunks, from its role to its finish reason; as vLLM's, the last
    text comes in the chunk with the finish reason."""
    answer, toolbox = _start(engine, services, chat, toolbox)
    answers.append(answer)
    calls_sent = ids_sent = 0
    wants_logprobs = chat.params.top_logprobs is not None

    def new_ids() -> list[int] | None:
        nonlocal ids_sent
        if not chat.return_token_ids:
            return None
        ids, ids_sent = answer.output_ids[ids_sent:], len(answer.output_ids)
        return ids

    def usage() -> dict | None:
        return answer.usage() if continuous_usage else None

    deltas = answer_deltas(engine, answer, toolbox)
    try:
        # The first event waits for the engine's first delta (see server.http.sse.started).
        first = await anext(deltas, None)
    except (GeneratorExit, asyncio.CancelledError, EngineDead):
        answer.stopped()
        raise
    opening = usage()
    if opening is not None:  # the role comes before any token
        opening = {**opening, "completion_tokens": 0, "total_tokens": opening["prompt_tokens"]}
    yield _chunk(chat, {"role": "assistant", "content": ""}, usage=opening)
    last = ParsedDelta()  # the final generation's last text, sent with the finish reason
    try:
        async for parsed in prepended(first, deltas):
            if answer.last is not None and answer.last.finished and answer.held is None:
                last = _joined(last, parsed)
                continue
            logprobs = answer.shown_logprobs() if wants_logprobs else None
            if parsed or logprobs:
                yield _chunk(chat, _delta_fields(chat, parsed, calls_sent), logprobs=logprobs,
                             token_ids=new_ids(), usage=usage())
                calls_sent += len(parsed.tool_calls)
    except (GeneratorExit, asyncio.CancelledError, EngineDead):
        answer.stopped()  # the record ends where the client's text did
        raise
    rest = _joined(last, answer.finish())
    logprobs = answer.shown_logprobs(final=True) if wants_logprobs else None
    yield _chunk(chat, _delta_fields(chat, rest, calls_sent), finish_reason=answer.finish_reason,
                 logprobs=logprobs, token_ids=new_ids(), usage=usage())


def response_headers(chat: PreparedChat) -> dict[str, str]:
    return {"X-Tandem-Memory-Token": chat.token} if chat.token else {}

