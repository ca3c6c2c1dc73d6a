"""POST /v1/chat/completions and GET /v1/models: the chat route, thin over the turn.

The route parses the body, takes the ready engine, has the turn prepare the request
(`server/turn/chat_turn.py`, or the continuous conversation's) and answers it
(`server/turn/answering/respond.py`): one JSON object, or a stream that starts once the engine has
the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from engine.backend import EngineBackend
from server.http.body_limits import body_limits
from server.http.disconnect import unless_disconnected
from server.http.errors import validated_body
from server.http.schema import ChatCompletionRequest
from server.http.server_defaults import with_server_defaults
from server.http.sse import event_stream, started
from server.turn import chat_turn
from server.turn.answering import respond
from server.turn.continuous import prepare_continuous
from server.turn.prepared import PreparedChat

Answerer = Callable[[EngineBackend, PreparedChat, ChatCompletionRequest], Awaitable[Response]]


def answerer(state) -> Answerer:
    """Answers a prepared chat as its request asked: streamed or whole."""

    async def answer(engine: EngineBackend, prepared: PreparedChat,
                     parsed: ChatCompletionRequest) -> Response:
        headers = respond.response_headers(prepared)
        if parsed.stream:
            include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
            continuous = include_usage and parsed.stream_options.continuous_usage_stats
            events = await started(respond.stream(engine, state.memory, prepared,
                                                  include_usage, state.tools, continuous))
            return event_stream(events, headers)
        return JSONResponse(await respond.complete(engine, state.memory, prepared, state.tools),
                            headers=headers)

    return answer


def chat_router(state, answer: Answerer) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/models")
    async def models() -> dict:
        profile = state.profile
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": int(state.started_at),
            "owned_by": "tandem", "root": profile.model,
            "max_model_len": profile.max_model_len,
        } for name in (profile.name, *profile.served_names)]}

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        engine = state.ready_engine()
        parsed = await validated_body(request, ChatCompletionRequest, body_limits(engine))
        profile = state.profile  # per request: the Memory screen may switch memory mode
        parsed = with_server_defaults(parsed, profile)
        peer = request.client.host if request.client else None
        # A continuous profile keeps one conversation a user: the client's history is not
        # used, only its last user message.
        build = (prepare_continuous if profile.memory.conversation == "continuous"
                 else chat_turn.prepare)
        # Rendering and tokenizing cost in proportion to the prompt: off the event loop
        prepared = await asyncio.to_thread(build, engine, profile, state.memory, parsed,
                                           request.headers, peer, request.state.key_user)
        # A whole answer is not watched by Starlette: a client that leaves must end it.
        return await unless_disconnected(request, answer(engine, prepared, parsed))

    return router
