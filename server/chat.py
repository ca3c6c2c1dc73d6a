"""POST /v1/chat/completions: render, generate, parse, answer (streamed or whole)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from engine.engine import Delta, Engine, GenerationParams
from engine.profiles import Profile
from server.errors import APIError
from server.output_parser import OutputParser, ParsedDelta, ToolCall
from server.prompt import render_prompt_ids, tools_for_template
from server.schema import ChatCompletionRequest

DEFAULT_TEMPERATURE = 0.7


@dataclass
class PreparedChat:
    """A validated request, rendered to ids, with the engine parameters it runs with."""

    completion_id: str
    model: str
    prompt_ids: list[int]
    params: GenerationParams
    parse_tools: bool
    created: int = field(default_factory=lambda: int(time.time()))


def model_names(profile: Profile) -> set[str]:
    """Names a request may use for this server's model: the profile name and the model."""
    return {profile.name, profile.model, profile.model.removeprefix("builtin:")}


def prepare(engine: Engine, profile: Profile, request: ChatCompletionRequest) -> PreparedChat:
    """Validate against the served profile and render; raises APIError for bad requests."""
    if request.model not in model_names(profile):
        raise APIError(404, f"model {request.model!r} does not exist; this server serves "
                       f"{profile.name!r}", code="model_not_found", param="model")
    if request.script is not None and not profile.scripted:
        raise APIError(400, f"'script' is only accepted by scripted profiles; {profile.name!r} "
                       "is not one", code="invalid_value", param="script")
    prompt_ids = render_prompt_ids(engine.tokenizer, request,
                                   request.enable_thinking(profile.thinking))
    room = profile.max_model_len - len(prompt_ids)
    if room < 1:
        raise APIError(400, f"the prompt is {len(prompt_ids)} tokens; this model's context is "
                       f"{profile.max_model_len} tokens", code="context_length_exceeded",
                       param="messages")
    max_tokens = request.requested_max_tokens()
    if max_tokens is not None and max_tokens > room:
        raise APIError(400, f"max_tokens {max_tokens} plus the prompt's {len(prompt_ids)} tokens "
                       f"exceed this model's context of {profile.max_model_len} tokens",
                       code="context_length_exceeded", param="max_tokens")
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
    return PreparedChat(
        completion_id=f"chatcmpl-{uuid.uuid4().hex}",
        model=request.model,
        prompt_ids=prompt_ids,
        params=params,
        parse_tools=tools_for_template(request) is not None,
    )


def _usage(last: Delta | None, prompt_tokens: int, completion_tokens: int) -> dict:
    cached = last.cached_tokens if last else 0
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _finish_reason(engine_reason: str | None, calls: list[ToolCall]) -> str:
    if calls:
        return "tool_calls"
    return engine_reason if engine_reason in ("stop", "length") else "stop"


async def complete(engine: Engine, chat: PreparedChat) -> dict:
    """The whole answer as one chat.completion object."""
    parser = OutputParser(parse_tools=chat.parse_tools)
    reasoning, content = [], []
    last: Delta | None = None
    output_tokens = 0
    async for delta in engine.generate(chat.prompt_ids, chat.params, request_id=chat.completion_id):
        output_tokens += len(delta.token_ids)
        last = delta
        parsed = parser.feed(delta.text)
        reasoning.append(parsed.reasoning)
        content.append(parsed.content)
    rest = parser.finish()
    reasoning.append(rest.reasoning)
    content.append(rest.content)
    message: dict = {"role": "assistant", "content": "".join(content) or None}
    if "".join(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    if parser.tool_calls:
        message["tool_calls"] = [c.as_openai() for c in parser.tool_calls]
    return {
        "id": chat.completion_id,
        "object": "chat.completion",
        "created": chat.created,
        "model": chat.model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": _finish_reason(last.finish_reason if last else None,
                                            parser.tool_calls),
        }],
        "usage": _usage(last, len(chat.prompt_ids), output_tokens),
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


async def stream(engine: Engine, chat: PreparedChat, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format, ending with `data: [DONE]`."""
    parser = OutputParser(parse_tools=chat.parse_tools)
    last: Delta | None = None
    output_tokens = 0
    calls_sent = 0
    yield _chunk(chat, {"role": "assistant", "content": ""})
    async for delta in engine.generate(chat.prompt_ids, chat.params, request_id=chat.completion_id):
        output_tokens += len(delta.token_ids)
        last = delta
        parsed = parser.feed(delta.text)
        if parsed:
            yield _chunk(chat, _delta_fields(parsed, calls_sent))
            calls_sent += len(parsed.tool_calls)
    rest = parser.finish()
    if rest:
        yield _chunk(chat, _delta_fields(rest, calls_sent))
    reason = _finish_reason(last.finish_reason if last else None, parser.tool_calls)
    yield _chunk(chat, {}, finish_reason=reason)
    if include_usage:
        usage_body = {
            "id": chat.completion_id, "object": "chat.completion.chunk", "created": chat.created,
            "model": chat.model, "choices": [],
            "usage": _usage(last, len(chat.prompt_ids), output_tokens),
        }
        yield f"data: {json.dumps(usage_body)}\n\n"
    yield "data: [DONE]\n\n"
