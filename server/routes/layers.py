"""The continuous conversation's routes and the layer reads.

* `POST /v1/conductor/converse`: the user's next message; answers in the chat-completions
  shape (chunks when streamed).
* `GET /v1/conductor/converse/history?before=SEQ&limit=N`: stored turns, for a client to show.
* `GET /v1/conductor/memory/layers[/{layer}/{file}]`: the layers' files (admin rule; there
  is no write route for core: those files are the operator's).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from conductor.memory.types import (
    LAYER_NAMES,
    history_days,
    layer_entries,
    layer_file_path,
    read_job_state,
    summary,
)
from server.access.admin import user_named
from server.http.body_limits import body_limits
from server.http.errors import APIError, validated_body
from server.http.schema import ChatCompletionRequest, StreamOptions
from server.routes.memory import hybrid_search
from server.turn.continuous import prepare_continuous
from server.turn.memory import request_user

MAX_HISTORY_PAGE = 200


class ConverseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    chat_template_kwargs: dict | None = None
    # The user's local time offset; by default this machine's (a local server's clock is
    # its user's).
    utc_offset_minutes: int | None = Field(default=None, ge=-840, le=840)
    script: str | list[str | None] | None = None  # scripted profiles only, as for chat

    def as_chat(self, model: str) -> ChatCompletionRequest:
        fields = self.model_dump(exclude={"message", "utc_offset_minutes"}, exclude_none=True)
        return ChatCompletionRequest.model_validate(
            {**fields, "model": model, "messages": [{"role": "user", "content": self.message}]})


def layer_router(state, answer) -> APIRouter:
    """`answer(engine, prepared, chat_request)` turns a prepared chat into the response."""
    router = APIRouter(prefix="/v1/conductor")
    memory = state.memory

    def peer_of(request: Request) -> str | None:
        return request.client.host if request.client else None

    def user_of(request: Request) -> str:
        user = request_user(request.headers, peer_of(request), memory.settings,
                            getattr(request.state, "key_user", None))
        if user is None:
            raise APIError(400, "no user: a relayed request names its user in X-Tandem-User",
                           code="no_user")
        return user

    @router.post("/converse")
    async def converse(request: Request):
        engine = state.ready_engine()
        body = await validated_body(request, ConverseRequest, body_limits(engine))
        parsed = body.as_chat(state.profile.name)
        # rendering and tokenizing the conversation: off the event loop
        prepared = await asyncio.to_thread(
            prepare_continuous, engine, state.profile, memory, parsed, request.headers,
            peer_of(request), request.state.key_user, body.utc_offset_minutes)
        return await answer(engine, prepared, parsed)

    @router.get("/converse/history")
    async def history(request: Request, before: int | None = None, limit: int = 20) -> dict:
        if not 1 <= limit <= MAX_HISTORY_PAGE:
            raise APIError(400, f"limit must be between 1 and {MAX_HISTORY_PAGE}",
                           code="invalid_value", param="limit")
        if before is not None and before < 1:
            raise APIError(400, "before must be a turn number, at least 1",
                           code="invalid_value", param="before")
        turns = memory.layers(user_of(request)).history
        page = turns.page(before, limit + 1)
        has_more = len(page) > limit
        page = page[-limit:]
        return {"object": "list", "data": [t.to_json() for t in page], "has_more": has_more}

    async def admin_layers(request: Request, user: str | None):
        await state.admin.check(request)
        return memory.layers(user_named(user, memory.settings.user_name))

    @router.get("/memory/layers")
    async def layers(request: Request, user: str | None = None) -> dict:
        found = await admin_layers(request, user)
        count = state.engine.count_tokens if state.engine is not None else None
        job_state = read_job_state(found.files)
        flagged = {f.id: f.problem for f in job_state.flags} if job_state else {}
        # the screen's Layers: each entry with its id and flags, the history by day
        return {**summary(found, count), "entries": layer_entries(found, flagged),
                "history_days": history_days(found)}

    @router.get("/memory/search")
    async def admin_search(request: Request, q: str, mode: str = "hybrid",
                           collection: str | None = None, limit: int = 10,
                           user: str | None = None) -> dict:
        """The dashboard's search over a user's every layer (admin rule)."""
        found = await admin_layers(request, user)
        if not 1 <= limit <= 100:
            raise APIError(400, "limit must be between 1 and 100", code="invalid_value",
                           param="limit")
        return await hybrid_search(state.search, found.user, q, mode, collection, limit)

    @router.get("/memory/layers/{layer}/{name}")
    async def layer_file(layer: str, name: str, request: Request,
                         user: str | None = None) -> dict:
        found = await admin_layers(request, user)
        if layer not in LAYER_NAMES:
            raise APIError(404, f"no layer {layer!r}; layers: {', '.join(LAYER_NAMES)}",
                           code="not_found")
        if layer == "history":
            # isdigit() is true of "²" and other digits int() refuses: ASCII digits only
            turn = found.history.read(int(name)) if name.isascii() and name.isdigit() \
                else None
            if turn is None:
                raise APIError(404, f"no history turn {name!r}", code="not_found")
            return turn.to_json()
        path = layer_file_path(found, layer, name)
        if path is None or not path.is_file():
            raise APIError(404, f"no file {name!r} in the {layer} layer", code="not_found")
        return {"layer": layer, "name": name,
                "text": path.read_text(encoding="utf-8", errors="replace")}

    return router
