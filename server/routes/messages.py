"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens.

Claude Code (`POST /v1/messages?beta=true`, its key as `x-api-key` or a bearer) and the
`anthropic` SDK talk to the server as they would to Anthropic. A message runs as a chat
turn (`server/turn/messages/turn.py`); errors on these routes come in Anthropic's shape
(`server.http.errors.error_response`). Query parameters (`beta=true`) and the
`anthropic-version` and `anthropic-beta` headers are accepted and change nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from server.http.body_limits import body_limits
from server.http.disconnect import unless_disconnected
from server.http.errors import APIError, validated_body
from server.http.sse import event_stream, prepended, typed_events
from server.turn.answering.respond import response_headers
from server.turn.messages.schema import CountTokensRequest, MessagesRequest
from server.turn.messages.turn import MessageRun, count_tokens, prepare


def messages_router(state) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/messages")
    async def create(request: Request):
        engine = state.ready_engine()
        parsed = await validated_body(request, MessagesRequest, body_limits(engine))
        peer = request.client.host if request.client else None
        # Rendering and tokenizing cost in proportion to the prompt: off the event loop
        prepared = await asyncio.to_thread(prepare, engine, state.profile, state.memory,
                                           parsed, request.headers, peer,
                                           request.state.key_user)
        run = MessageRun(engine, state.memory, prepared, state.tools)
        headers = response_headers(prepared)
        if parsed.stream:
            stream = _sse(run.events())
            first = await anext(stream)  # the engine has the request: see server.http.sse
            return event_stream(prepended(first, stream), headers)
        # A whole answer is not watched by Starlette: a client that leaves must end it.
        return await unless_disconnected(request, _whole(run, headers))

    @router.post("/v1/messages/count_tokens")
    async def count(request: Request) -> dict:
        engine = state.ready_engine()
        parsed = await validated_body(request, CountTokensRequest, body_limits(engine))
        peer = request.client.host if request.client else None
        tokens = await asyncio.to_thread(count_tokens, engine, state.profile, state.memory,
                                         parsed, request.headers, peer,
                                         request.state.key_user)
        return {"input_tokens": tokens}

    return router


async def _whole(run: MessageRun, headers: dict[str, str]) -> JSONResponse:
    """The answer as one message, once its events have all run."""
    async with aclosing(run.events()) as events:
        async for _event in events:
            pass
    return JSONResponse(run.message(), headers=headers)


def _sse(events: AsyncIterator[dict]) -> AsyncIterator[str]:
    """The events as server-sent events (`event: <type>`, as Anthropic's stream); an
    engine or a backend that fails mid-stream ends it with an `error` event."""
    return typed_events(events, APIError.anthropic_body)
