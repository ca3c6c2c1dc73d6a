"""POST /v1/completions: plain text completion, as vLLM serves it, for eval harnesses and
older clients.

A completion has no conversation, so memory is off for it: no hidden context, no blocks
held back, no ledger record. It runs on the same engine, with a client's priority, and
answers in vLLM's `text_completion` shape, streamed or not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from engine.engine import Delta, Engine, GenerationParams, TokenLogprob
from server.chat import model_names
from server.errors import APIError, json_body, validation_error
from server.memory import request_user
from server.schema import SYSTEM_FINGERPRINT, StreamOptions
from server.sse import started

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for completions
MAX_PROMPTS = 32


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    n: int = Field(default=1, ge=1, le=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    echo: StrictBool = False
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logprobs: int | None = Field(default=None, ge=0, le=20)  # the N likeliest a token
    user: str | None = None  # accepted, no effect

    @field_validator("stop")
    @classmethod
    def _at_most_four_stops(cls, value):
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    def prompts(self) -> list[str | list[int]]:
        """One item a prompt: text or token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and all(isinstance(p, int) for p in prompt):
            return [prompt]  # one prompt of token ids
        return list(prompt)

    def params(self, max_tokens: int) -> GenerationParams:
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        return GenerationParams(
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=-1 if self.top_k is None else self.top_k, seed=self.seed, stop=stop,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0, ban_tool_call=False,
            top_logprobs=self.logprobs)


def _prompt_ids(engine: Engine, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, str):
        ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
    else:
        ids = list(prompt)
        if any(not 0 <= t < len(engine.tokenizer) for t in ids):
            raise APIError(400, "prompt: token ids must be in the vocabulary",
                           code="invalid_value", param="prompt")
    if not ids:
        raise APIError(400, "prompt must not be empty", code="invalid_value", param="prompt")
    return ids


def _choice(index: int, text: str, finish_reason: str | None, stop_reason,
            logprobs: dict | None = None, **extra: Any) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason,
            "stop_reason": stop_reason, **extra}


def _logprobs(tokens: list[TokenLogprob], offset: int) -> dict[str, list]:
    """The completions API's logprobs: tokens, their log-probabilities, where each starts in
    the text (from `offset`) and the likeliest tokens at each step."""
    starts, at = [], offset
    for lp in tokens:
        starts.append(at)
        at += len(lp.text)
    return {"text_offset": starts, "token_logprobs": [max(lp.logprob, -9999.0) for lp in tokens],
            "tokens": [lp.text for lp in tokens],
            "top_logprobs": [{t: max(v, -9999.0) for _, t, v in lp.top} for lp in tokens]}


def completions_router(state) -> APIRouter:
    router = APIRouter()

    def prepare(body: dict) -> tuple[Engine, CompletionRequest, list[list[int]], list[str]]:
        try:
            request = CompletionRequest.model_validate(body)
        except ValidationError as exc:
            raise validation_error(exc) from None
        engine = state.ready_engine()
        profile = engine.profile
        if request.model not in model_names(profile):
            raise APIError(404, f"model {request.model!r} does not exist; this server serves "
                           f"{profile.name!r}", code="model_not_found", param="model")
        prompts = request.prompts()
        if not 1 <= len(prompts) <= MAX_PROMPTS:
            raise APIError(400, f"prompt: 1 to {MAX_PROMPTS} prompts a request",
                           code="invalid_value", param="prompt")
        if request.echo and request.logprobs is not None:
            raise APIError(400, "logprobs: with echo the prompt's log-probabilities would be "
                           "needed; they are not computed here", code="invalid_value",
                           param="logprobs")
        if request.stream and len(prompts) > 1:
            raise APIError(400, "prompt: a streamed completion takes one prompt",
                           code="invalid_value", param="prompt")
        ids = [_prompt_ids(engine, p) for p in prompts]
        for one in ids:
            if len(one) + (request.max_tokens or 0) > profile.max_model_len:
                raise APIError(400, f"the prompt's {len(one)} tokens plus max_tokens "
                               f"{request.max_tokens} exceed this model's context of "
                               f"{profile.max_model_len} tokens",
                               code="context_length_exceeded", param="max_tokens")
        echoes = [engine.tokenizer.decode(one) if request.echo else "" for one in ids]
        return engine, request, ids, echoes

    @router.post("/v1/completions")
    async def completions(http: Request):
        engine, request, ids, echoes = prepare(await json_body(http))
        completion_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": completion_id, "object": "text_completion", "created": created,
                "model": request.model}
        params = request.params(request.max_tokens or DEFAULT_MAX_TOKENS)
        # A completion has no memory, but its cached blocks are its user's alone too.
        peer = http.client.host if http.client else None
        user = request_user(http.headers, peer, state.memory.settings,
                            getattr(http.state, "key_user", None))
        params = dataclasses.replace(params, cache_salt=state.memory.cache_salt(user))
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return StreamingResponse(
                await started(_stream(engine, head, ids[0], echoes[0], params,
                                      include_usage)),
                media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        finished = await asyncio.gather(*(
            _complete(engine, f"{completion_id}-{n}", one, params) for n, one in enumerate(ids)))
        choices, prompt_tokens, completion_tokens = [], 0, 0
        for n, (text, last, generated, tokens) in enumerate(finished):
            logprobs = _logprobs(tokens, 0) if request.logprobs is not None else None
            choices.append(_choice(n, echoes[n] + text, last.finish_reason if last else "stop",
                                   last.stop_reason if last else None, logprobs,
                                   prompt_logprobs=None))
            prompt_tokens += len(ids[n])
            completion_tokens += generated
        return JSONResponse({**head, "system_fingerprint": SYSTEM_FINGERPRINT,
                             "choices": choices, "usage": {
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": None}})

    return router


async def _complete(engine: Engine, request_id: str, ids: list[int], params: GenerationParams
                    ) -> tuple[str, Delta | None, int, list[TokenLogprob]]:
    text, last, generated, tokens = "", None, 0, []
    async for delta in engine.generate(ids, params, request_id=request_id):
        text += delta.text
        generated += len(delta.token_ids)
        tokens += delta.token_logprobs
        last = delta
    return text, last, generated, tokens


async def _stream(engine: Engine, head: dict, ids: list[int], echo: str,
                  params: GenerationParams, include_usage: bool) -> AsyncIterator[str]:
    def event(body: dict) -> str:
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    generated, offset, echo_due = 0, len(echo), bool(echo)
    async for delta in engine.generate(ids, params, request_id=head["id"]):
        if echo_due:  # once the engine has the request (server.sse.started); vLLM sends
            echo_due = False  # the prompt's ids with the echoed prompt
            yield event({**head, "choices": [_choice(0, echo, None, None,
                                                     prompt_token_ids=ids)]})
        generated += len(delta.token_ids)
        if delta.text or delta.finished:
            logprobs = (_logprobs(delta.token_logprobs, offset)
                        if params.top_logprobs is not None else None)
            yield event({**head, "choices": [_choice(
                0, delta.text, delta.finish_reason if delta.finished else None,
                delta.stop_reason if delta.finished else None, logprobs)]})
            offset += len(delta.text)
    if include_usage:
        yield event({**head, "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [], "usage": {
            "prompt_tokens": len(ids), "completion_tokens": generated,
            "total_tokens": len(ids) + generated}})
    yield "data: [DONE]\n\n"
