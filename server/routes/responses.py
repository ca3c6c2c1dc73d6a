"""The Responses API: POST /v1/responses and the stored responses' routes.

A response runs as a chat turn (`server/turn/responses/turn.py`); what it stores lives
with the ledger (`conductor/ledger/stored_responses.py`), per user. A background response
(`background: true`: `server/turn/responses/background.py`) runs as a task of the server,
bounded per user, counted in `/load` and scheduled after interactive requests; it is
polled with GET and stopped with `/cancel`. A restart finds it unfinished and marks it
failed. What costs CPU in proportion to a request or to what is stored (reading a
conversation back, its items paged, the response object's JSON) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from conductor.memory.types import ChainBroken, ResponseStore, StoredResponse
from server.http.body_limits import body_limits
from server.http.disconnect import unless_disconnected
from server.http.errors import APIError, validated_body
from server.http.responses_schema import ResponsesRequest
from server.http.sse import event_stream, prepended, typed_events
from server.turn.answering.respond import response_headers
from server.turn.memory import request_user
from server.turn.responses.background import BackgroundRuns
from server.turn.responses.turn import ResponseRun, prepare, previous_conversation

UNFINISHED = ("queued", "in_progress")
CANCEL_WAIT_S = 30.0  # a cancelled background response stops at the engine's next step


def _not_found(response_id: str) -> APIError:
    # vLLM's wording, which its own tests match
    return APIError(404, f"Response with id {response_id!r} not found.", code="not_found",
                    param="response_id")


def _evicted(param: str) -> APIError:
    return APIError(400, f"{param}: an earlier response of this conversation is no longer "
                    "stored (each user keeps the newest responses within the store's bound: "
                    "docs/serving/limits.md); start it again with the whole input",
                    code="previous_response_not_found", param=param)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


async def _json(value: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer dumped in a worker thread: a response object echoes its tools and
    instructions, a page of items may hold megabytes."""
    return Response(await asyncio.to_thread(_dumps, value), media_type="application/json",
                    headers=headers)


def responses_router(state) -> APIRouter:
    router = APIRouter()
    store: ResponseStore = state.memory.responses
    runs = BackgroundRuns()
    running = runs.tasks  # background responses, by id

    def user_of(request: Request) -> str | None:
        peer = request.client.host if request.client else None
        return request_user(request.headers, peer, state.memory.settings,
                            request.state.key_user)

    async def stored_or_404(request: Request, response_id: str,
                            context: bool = False) -> StoredResponse:
        user = user_of(request)
        live = response_id in running  # before the read: a run may end while it reads
        try:
            stored = await asyncio.to_thread(store.load, user, response_id, context)
        except ChainBroken:
            raise _evicted("response_id") from None
        if stored is None:
            raise _not_found(response_id)
        if stored.response.get("status") in UNFINISHED and not live:
            # a background response the server was running when it stopped
            stored.response.update(status="failed", error={
                "code": "server_error",
                "message": "the server stopped while this response ran (a restart)"})
            await asyncio.to_thread(store.save, user, stored)
        return stored

    @router.post("/v1/responses")
    async def create(request: Request):
        engine = state.ready_engine()
        parsed = await validated_body(request, ResponsesRequest, body_limits(engine))
        user = user_of(request)
        if not parsed.background:
            # A whole answer is not watched by Starlette: a client that leaves ends it.
            return await unless_disconnected(request, answer(request, engine, parsed, user))
        with runs.reserved(user) as slot:  # a 429 past the user's bound, before any work
            turn, run, headers, keep, _ = await begin(request, engine, parsed, user)
            queued = turn.shape.object("queued")
            await keep(queued)
            runs.start(slot, turn.shape.id, run, keep,
                       getattr(request.state, "server_load", None))
            return await _json(queued, headers)

    async def begin(request: Request, engine, parsed: ResponsesRequest, user: str | None):
        """The prepared turn, its run and headers, and how its response is stored."""
        stored = None
        if parsed.previous_response_id is not None:
            try:
                stored = await asyncio.to_thread(store.load, user,
                                                 parsed.previous_response_id)
            except ChainBroken:
                raise _evicted("previous_response_id") from None
        previous = previous_conversation(stored, parsed)
        peer = request.client.host if request.client else None
        # shaping the items, rendering and tokenizing the conversation: off the event loop
        turn = await asyncio.to_thread(prepare, engine, state.profile, state.memory, parsed,
                                       previous, request.headers, peer, request.state.key_user)
        run = ResponseRun(engine, state.memory, turn, state.tools)
        generation = store.generation(user)  # a delete of the user meanwhile wins

        def kept(final: dict[str, Any]) -> StoredResponse:
            """What the store keeps: the response, its parent, this request's items."""
            return StoredResponse(final, turn.context, parent=parsed.previous_response_id,
                                  items=turn.items)

        async def keep(final: dict[str, Any]) -> None:
            if parsed.store:
                await asyncio.to_thread(store.save, user, kept(final), generation)

        def keep_cut(final: dict[str, Any]) -> None:
            """What a run cut short wrote, stored behind (nothing may wait here)."""
            if not parsed.store:
                return
            try:
                asyncio.get_running_loop().run_in_executor(
                    None, store.save, user, kept(final), generation)
            except RuntimeError:  # no loop left (the server is stopping): nothing to keep
                pass

        return turn, run, response_headers(turn.chat), keep, keep_cut

    async def answer(request: Request, engine, parsed: ResponsesRequest,
                     user: str | None) -> Response:
        _, run, headers, keep, keep_cut = await begin(request, engine, parsed, user)
        events = run.events(keep, keep_cut)
        if parsed.stream:
            stream = _sse(events, run)
            first = await anext(stream)  # the engine has the request: see server.http.sse
            return event_stream(prepended(first, stream), headers)
        final = None
        async with aclosing(events):
            async for event in events:
                final = event.get("response", final)
        return await _json(final, headers)

    @router.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str, request: Request, stream: bool = False) -> Response:
        if stream:
            raise APIError(400, "stream: a stored response is read whole here",
                           code="unsupported_value", param="stream")
        return await _json((await stored_or_404(request, response_id)).response)

    @router.delete("/v1/responses/{response_id}")
    async def delete(response_id: str, request: Request) -> dict:
        await stored_or_404(request, response_id)
        task = running.get(response_id)
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=CANCEL_WAIT_S)
        await asyncio.to_thread(store.delete, user_of(request), response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    @router.post("/v1/responses/{response_id}/cancel")
    async def cancel(response_id: str, request: Request) -> Response:
        stored = await stored_or_404(request, response_id)
        if not stored.response.get("background"):
            raise APIError(400, "Cannot cancel a synchronous response.",
                           code="invalid_value", param="response_id")
        task = running.get(response_id)
        if task is None:  # finished already: as it is
            return await _json(stored.response)
        task.cancel()
        await asyncio.wait([task], timeout=CANCEL_WAIT_S)
        return await _json((await stored_or_404(request, response_id)).response)

    @router.get("/v1/responses/{response_id}/input_items")
    async def input_items(response_id: str, request: Request,
                          limit: int = Query(default=20, ge=1, le=100),
                          order: Literal["asc", "desc"] = "desc",
                          after: str | None = None) -> Response:
        items = (await stored_or_404(request, response_id, context=True)).context
        # a conversation read back may hold many thousand items: paged off the event loop
        return Response(await asyncio.to_thread(_page, items, limit, order, after),
                        media_type="application/json")

    return router


def _page(items: list[dict[str, Any]], limit: int, order: str, after: str | None) -> str:
    """One page of a conversation's items, as JSON; a 400 naming `after` when it is not
    one of them."""
    if order == "desc":
        items = items[::-1]
    if after is not None:
        at = next((n for n, item in enumerate(items) if item.get("id") == after), None)
        if at is None:
            raise APIError(400, f"after: no item {after!r} in this response's input",
                           code="invalid_value", param="after")
        items = items[at + 1:]
    page = items[:limit]
    return _dumps({"object": "list", "data": page,
                   "first_id": page[0]["id"] if page else None,
                   "last_id": page[-1]["id"] if page else None,
                   "has_more": len(items) > limit})


def _sse(events: AsyncIterator[dict], run: ResponseRun) -> AsyncIterator[str]:
    """The events as server-sent events, numbered; an engine or a backend that fails
    mid-stream ends it with `response.failed` (the failed response, as stored), as
    OpenAI's stream ends a response that failed. The response object echoes the
    request's tools and instructions: its events are framed off the event loop (a
    delta's are a few tokens)."""
    return typed_events(events, lambda error: {"type": "response.failed",
                                               "response": run.failed(error)},
                        numbered=True, large=lambda event: "response" in event)
