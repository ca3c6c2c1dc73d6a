"""POST /v1/chat/completions/batch (vLLM's): many conversations in one request, each
answered as its own chat turn; one chat.completion whose choice i answers conversation i.

As vLLM's: no streaming, no tools, no beam search and one choice a conversation.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from server.http.body_limits import body_limits
from server.http.errors import APIError, json_body, validation_error
from server.http.schema import ChatCompletionRequest
from server.http.server_defaults import with_server_defaults
from server.turn import chat_turn
from server.turn.answering import respond

MAX_CONVERSATIONS = 32
NOT_IN_A_BATCH = {"stream": "streaming", "tools": "tools", "use_beam_search": "beam search"}


def _conversations(body: dict) -> list[list]:
    conversations = body.get("messages")
    if (not isinstance(conversations, list) or not 1 <= len(conversations) <= MAX_CONVERSATIONS
            or not all(isinstance(c, list) and c for c in conversations)):
        raise APIError(400, f"messages: a list of 1 to {MAX_CONVERSATIONS} conversations, "
                       "each a non-empty list of messages", code="invalid_value",
                       param="messages")
    for name, what in NOT_IN_A_BATCH.items():
        if body.get(name):
            raise APIError(400, f"{name}: a batch takes no {what}", code="invalid_value",
                           param=name)
    if body.get("n", 1) != 1:
        raise APIError(400, "n: a batch answers each conversation once", code="invalid_value",
                       param="n")
    return conversations


def _one_completion(answers: list[dict]) -> dict:
    """The conversations' answers as one chat.completion: choice i is conversation i's."""
    choices = [{**answer["choices"][0], "index": i} for i, answer in enumerate(answers)]
    prompt = sum(a["usage"]["prompt_tokens"] for a in answers)
    completion = sum(a["usage"]["completion_tokens"] for a in answers)
    return {**answers[0], "choices": choices, "usage": {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion}}


def chat_batch_router(state) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/chat/completions/batch")
    async def chat_completions_batch(request: Request):
        engine = state.ready_engine()
        body = await json_body(request, body_limits(engine, MAX_CONVERSATIONS))
        try:
            parsed = [with_server_defaults(ChatCompletionRequest.model_validate(
                {**body, "messages": conversation}), state.profile)
                for conversation in _conversations(body)]
        except ValidationError as exc:
            raise validation_error(exc) from None
        peer = request.client.host if request.client else None
        prepared = await asyncio.to_thread(lambda: [  # rendering and tokenizing: off the loop
            chat_turn.prepare(engine, state.profile, state.memory, one, request.headers, peer,
                              request.state.key_user) for one in parsed])
        answers = await asyncio.gather(*(respond.complete(engine, state.memory, p, state.tools)
                                         for p in prepared))
        return JSONResponse(_one_completion(answers))

    return router
