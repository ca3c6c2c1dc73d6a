"""POST /v1/completions: plain text completion, as vLLM serves it, for eval harnesses and
older clients.

A completion has no conversation, so memory is off for it: no hidden context, no blocks
held back, no ledger record. It runs on the same engine, with a client's priority, and
answers in vLLM's `text_completion` shape, streamed or not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from engine.backend import EngineBackend
from engine.beam_search import beam_search
from engine.generation import Delta, GenerationParams, TokenLogprob
from server.http.body_limits import body_limits
from server.http.disconnect import unless_disconnected
from server.http.errors import APIError, json_body, validation_error
from server.http.schema import (
    INT64_MAX,
    MAX_CHOICES,
    MAX_LOGPROB_TOKEN_IDS,
    SYSTEM_FINGERPRINT,
    StreamOptions,
    checked_stops,
)
from server.http.server_defaults import with_server_defaults
from server.http.sse import DONE, event_stream, frame, started
from server.turn.answering.choices import merged
from server.turn.answering.logprobs import (
    completion_logprobs,
    echo_logprobs,
    prompt_logprobs_json,
)
from server.turn.checks import check_logprobs, check_token_ids, model_names
from server.turn.memory import request_user

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for completions
MAX_PROMPTS = 32


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None  # as vLLM: none is the served model
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    echo: StrictBool = False
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-INT64_MAX - 1, le=INT64_MAX)
    # vLLM's extras, as vLLM
    min_tokens: int = Field(default=0, ge=0, le=INT64_MAX)
    prompt_logprobs: int | None = Field(default=None, ge=-1)
    return_token_ids: StrictBool | None = None
    return_tokens_as_token_ids: StrictBool | None = None
    truncate_prompt_tokens: int | None = Field(default=None, ge=1)
    truncation_side: Literal["left", "right"] = "left"
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logprobs: int | None = Field(default=None, ge=-1)  # the N likeliest a token
    logprob_token_ids: list[int] | None = Field(default=None, min_length=1,
                                                max_length=MAX_LOGPROB_TOKEN_IDS)
    allowed_token_ids: list[int] | None = Field(default=None, min_length=1)
    use_beam_search: StrictBool = False  # vLLM's: the n best beams are the n choices
    length_penalty: float = 1.0
    user: str | None = None  # accepted, no effect

    @field_validator("stop")
    @classmethod
    def _stops(cls, value):
        return checked_stops(value)

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
            top_logprobs=self.logprobs, min_tokens=self.min_tokens,
            logprob_token_ids=tuple(self.logprob_token_ids or ()) or None,
            allowed_token_ids=tuple(self.allowed_token_ids or ()) or None,
            # echo with logprobs: the prompt's own, as vLLM gives them
            prompt_logprobs=self.logprobs if self.echo and self.logprobs is not None
            else self.prompt_logprobs)

    def choice_params(self, params: GenerationParams, choice: int) -> GenerationParams:
        """Choice `choice` of n samples with seed + choice, as vLLM's child requests."""
        if choice == 0 or params.seed is None:
            return params
        return dataclasses.replace(params, seed=params.seed + choice)


def _prompt_ids(engine: EngineBackend, request: CompletionRequest, prompt: str | list[int]
                ) -> list[int]:
    if isinstance(prompt, str):
        ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
    else:
        ids = list(prompt)
        bad = [t for t in ids if not 0 <= t < len(engine.tokenizer)]
        if bad:
            raise APIError(400, f"prompt: token id {bad[0]} is out of vocabulary (the "
                           f"vocabulary has {len(engine.tokenizer)} tokens)",
                           code="invalid_value", param="prompt")
    if not ids:
        raise APIError(400, "prompt must not be empty", code="invalid_value", param="prompt")
    keep = request.truncate_prompt_tokens
    if keep is not None and len(ids) > keep:  # vLLM's truncation: left keeps the end
        ids = ids[-keep:] if request.truncation_side == "left" else ids[:keep]
    return ids


def _choice(index: int, text: str, finish_reason: str | None, stop_reason,
            logprobs: dict | None = None, **extra: Any) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason,
            "stop_reason": stop_reason, **extra}


def _echoed(engine: EngineBackend, ids: list[int], steps: list | None, as_ids: bool
            ) -> dict[str, list]:
    return echo_logprobs([engine.tokenizer.decode([t]) for t in ids], ids, steps, as_ids)


def _joined_logprobs(first: dict, then: dict) -> dict:
    return {key: first[key] + then[key] for key in first}


@dataclasses.dataclass
class _Generated:
    text: str = ""
    last: Delta | None = None
    token_ids: list[int] = dataclasses.field(default_factory=list)
    tokens: list[TokenLogprob] = dataclasses.field(default_factory=list)
    prompt_logprobs: list | None = None


def completions_router(state) -> APIRouter:
    router = APIRouter()

    def prepare(body: dict) -> tuple[EngineBackend, CompletionRequest, list[list[int]]]:
        try:
            request = CompletionRequest.model_validate(body)
        except ValidationError as exc:
            raise validation_error(exc) from None
        engine = state.ready_engine()
        profile = engine.profile
        if request.model is not None and request.model not in model_names(profile):
            raise APIError(404, f"model {request.model!r} does not exist; this server serves "
                           f"{profile.name!r}", code="model_not_found", param="model")
        if request.stream_options is not None and not request.stream:
            raise APIError(400, "stream_options: only with stream: true",
                           code="invalid_value", param="stream_options")
        if request.logprob_token_ids and request.logprobs is None:
            raise APIError(400, "logprob_token_ids: needs logprobs", code="invalid_value",
                           param="logprob_token_ids")
        for name in ("logprob_token_ids", "allowed_token_ids"):
            check_token_ids(engine, name, getattr(request, name) or [])
        for name in ("logprobs", "prompt_logprobs"):
            check_logprobs(engine, state.profile, name, getattr(request, name))
        request = with_server_defaults(request, state.profile)
        _check_beam_search(request)
        prompts = request.prompts()
        if not 1 <= len(prompts) <= MAX_PROMPTS:
            raise APIError(400, f"prompt: 1 to {MAX_PROMPTS} prompts a request",
                           code="invalid_value", param="prompt")
        if len(prompts) * request.n > MAX_PROMPTS:
            raise APIError(400, f"n: prompts times n is at most {MAX_PROMPTS}",
                           code="invalid_value", param="n")
        if request.max_tokens is not None and request.min_tokens > request.max_tokens:
            raise APIError(400, "min_tokens: must not exceed max_tokens",
                           code="invalid_value", param="min_tokens")
        ids = [_prompt_ids(engine, request, p) for p in prompts]
        for one in ids:  # a max_tokens past the room is cut to it (`_within`), as vLLM's
            if len(one) >= profile.max_model_len:
                raise APIError(400, f"the prompt's {len(one)} tokens leave no room in this "
                               f"model's context of {profile.max_model_len} tokens",
                               code="context_length_exceeded", param="prompt")
        return engine, request, ids

    @router.post("/v1/completions")
    async def completions(http: Request):
        body = await json_body(http, body_limits(state.ready_engine(), MAX_PROMPTS))
        # A whole answer is not watched by Starlette: a client that leaves must end it.
        return await unless_disconnected(http, answer(http, body))

    async def answer(http: Request, body: dict):
        # validating, rendering and tokenizing up to 32 prompts: off the event loop
        engine, request, ids = await asyncio.to_thread(prepare, body)
        completion_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": completion_id, "object": "text_completion", "created": created,
                "model": request.model or engine.profile.name}
        params = request.params(request.max_tokens or DEFAULT_MAX_TOKENS)
        # A completion has no memory, but its cached blocks are its user's alone too.
        peer = http.client.host if http.client else None
        user = request_user(http.headers, peer, state.memory.settings,
                            getattr(http.state, "key_user", None))
        params = dataclasses.replace(params, cache_salt=state.memory.cache_salt(user))
        # (index, prompt ids, params): vLLM numbers choice j of prompt i as i * n + j
        runs = [(i * request.n + j, one, _within(request.choice_params(params, j), one,
                                                 engine.profile.max_model_len))
                for i, one in enumerate(ids) for j in range(request.n)]
        if request.stream:
            options = request.stream_options
            include_usage = bool(options and options.include_usage)
            continuous = include_usage and options.continuous_usage_stats
            return event_stream(
                await started(_stream(engine, head, request, runs, include_usage, continuous)))
        if request.use_beam_search:
            done = [out for i, one in enumerate(ids) for out in await _beams(
                engine, f"{completion_id}-{i}", one,
                _within(params, one, engine.profile.max_model_len), request)]
        else:
            done = await asyncio.gather(*(
                _complete(engine, f"{completion_id}-{index}", one, run_params)
                for index, one, run_params in runs))
        choices, completion_tokens = [], 0
        for (index, one, _), out in zip(runs, done, strict=True):
            choices.append(_full_choice(engine, request, index, one, out))
            completion_tokens += len(out.token_ids)
        prompt_tokens = sum(len(one) for one in ids)  # n choices read a prompt once
        return JSONResponse({**head, "system_fingerprint": SYSTEM_FINGERPRINT,
                             "choices": choices, "usage": {
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": None}})

    return router


def _within(params: GenerationParams, prompt: list[int], max_model_len: int
            ) -> GenerationParams:
    """`params` with max_tokens cut to the room `prompt` leaves (vLLM's get_max_tokens)."""
    room = max_model_len - len(prompt)
    if params.max_tokens <= room:
        return params
    return dataclasses.replace(params, max_tokens=room)


def _full_choice(engine: EngineBackend, request: CompletionRequest, index: int, ids: list[int],
                 out: _Generated) -> dict[str, Any]:
    as_ids = bool(request.return_tokens_as_token_ids)
    echo = engine.tokenizer.decode(ids) if request.echo else ""
    logprobs = None
    if request.logprobs is not None:
        logprobs = completion_logprobs(out.tokens, len(echo), as_ids)
        if request.echo:
            logprobs = _joined_logprobs(
                _echoed(engine, ids, out.prompt_logprobs, as_ids), logprobs)
    last = out.last
    return _choice(index, echo + out.text, last.finish_reason if last else "stop",
                   last.stop_reason if last else None, logprobs,
                   prompt_logprobs=prompt_logprobs_json(out.prompt_logprobs)
                   if request.prompt_logprobs is not None else None,
                   prompt_token_ids=ids if request.return_token_ids else None,
                   token_ids=out.token_ids if request.return_token_ids else None)


def _check_beam_search(request: CompletionRequest) -> None:
    """What vLLM's beam search does not do (and Tandem's, which is vLLM's, neither)."""
    if not request.use_beam_search:
        return
    refused = {"stream": request.stream, "logprobs": request.logprobs is not None,
               "logprob_token_ids": bool(request.logprob_token_ids),
               "prompt_logprobs": request.prompt_logprobs is not None}
    for name, asked in refused.items():
        if asked:
            raise APIError(400, f"{name}: not with use_beam_search", code="invalid_value",
                           param=name)


async def _beams(engine: EngineBackend, request_id: str, ids: list[int],
                 params: GenerationParams, request: CompletionRequest) -> list[_Generated]:
    """One prompt's n choices: its n best beams."""
    beams = await beam_search(engine, ids, request.n, params.max_tokens, request_id,
                              temperature=params.temperature,
                              length_penalty=request.length_penalty,
                              cache_salt=params.cache_salt)
    return [_Generated(text=beam.text, token_ids=beam.token_ids, last=Delta(
        request_id, "", [], finished=True, finish_reason=beam.finish_reason,
        stop_reason=beam.stop_reason)) for beam in beams]


async def _complete(engine: EngineBackend, request_id: str, ids: list[int], params: GenerationParams
                    ) -> _Generated:
    out = _Generated()
    async for delta in engine.generate(ids, params, request_id=request_id):
        out.text += delta.text
        out.token_ids += delta.token_ids
        out.tokens += delta.token_logprobs
        if delta.prompt_logprobs is not None:
            out.prompt_logprobs = delta.prompt_logprobs
        out.last = delta
    return out


async def _stream(engine: EngineBackend, head: dict, request: CompletionRequest,
                  runs: list[tuple[int, list[int], GenerationParams]], include_usage: bool,
                  continuous: bool) -> AsyncIterator[str]:
    """The runs' chunks as they come; the usage (the prompts once, every answer) last."""
    generated = [0] * len(runs)
    prompt_tokens = sum(len(one) for index, one, _ in runs if index % request.n == 0)

    def usage() -> dict:
        total = sum(generated)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": total,
                "total_tokens": prompt_tokens + total}

    def event(body: dict) -> str:
        if continuous and body["choices"]:
            body = {**body, "usage": usage()}
        return frame(body)

    async def one_run(at: int, index: int, ids: list[int], params: GenerationParams
                      ) -> AsyncIterator[str]:
        as_ids = bool(request.return_tokens_as_token_ids)
        echo = engine.tokenizer.decode(ids) if request.echo else ""
        offset, echo_due = len(echo), request.echo
        async for delta in engine.generate(ids, params, request_id=f"{head['id']}-{index}"):
            generated[at] += len(delta.token_ids)
            text, logprobs = delta.text, None
            if params.top_logprobs is not None:
                logprobs = completion_logprobs(delta.token_logprobs, offset, as_ids)
            extra: dict[str, Any] = {}
            if echo_due:  # once the engine has the request (server.http.sse.started), vLLM's
                echo_due = False  # way: the echoed prompt and its ids in a chunk of their own
                echoed = (_echoed(engine, ids, delta.prompt_logprobs, as_ids)
                          if logprobs is not None else None)
                yield event({**head, "choices": [_choice(index, echo, None, None, echoed,
                                                         prompt_token_ids=ids)]})
            if request.return_token_ids:
                extra["token_ids"] = delta.token_ids
                if not request.echo and generated[at] == len(delta.token_ids):
                    extra["prompt_token_ids"] = ids
            if request.prompt_logprobs is not None and delta.prompt_logprobs is not None:
                extra["prompt_logprobs"] = prompt_logprobs_json(delta.prompt_logprobs)
            if text or delta.finished or extra:
                yield event({**head, "choices": [_choice(
                    index, text, delta.finish_reason if delta.finished else None,
                    delta.stop_reason if delta.finished else None, logprobs, **extra)]})
                offset += len(delta.text)

    streams = [one_run(at, index, ids, params) for at, (index, ids, params) in enumerate(runs)]
    async for chunk in merged(streams):
        yield chunk
    if include_usage:
        yield event({**head, "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [],
                     "usage": usage()})
    yield DONE
