"""The memory routes, under the session's token: write, search and read notes.

The token comes with every chat answer (header `X-Tandem-Memory-Token`, and in the memory
card the model sees); a request without a known token is answered 403.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from conductor.memory.hiding import HINT_MAX_CHARS, hits_to_ask_for, visible_hits, visible_note_ids
from conductor.memory.services import MemoryServices
from conductor.memory.types import (
    COLLECTIONS,
    MODES,
    NoteIdRequired,
    NoteNotVisible,
    SourceError,
    WriteResult,
    note_json,
    write_note,
)
from server.http.errors import APIError, not_the_writer
from server.idle.search import SearchService
from server.turn.memory import MEMORY_HEADER, TOKEN_HEADER, memory_switch, request_user


class PrefetchHint(BaseModel):
    hint: str


class SearchForm(BaseModel):
    """`GET /search`'s query as a POST body: vllm-router forwards no query string."""

    q: str
    limit: int = 10
    mode: str | None = None
    collection: str | None = None


class ReadForm(BaseModel):
    """`GET /{note_id}` as a POST body (`POST /read`), for the same reason."""

    id: str


class MemoryWrite(BaseModel):
    op: Literal["add", "update", "archive"] = "add"
    scope: str | None = None
    kind: str | None = None
    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    body: str = ""
    id: str | None = None
    reason: str | None = None


def memory_router(services: MemoryServices,
                  search_service: Callable[[], SearchService | None]) -> APIRouter:
    router = APIRouter(prefix="/v1/memory")

    def session_of(request: Request) -> tuple[str, str]:
        owner = services.resolve_token(request.headers.get(TOKEN_HEADER))
        if owner is None:
            raise APIError(403, f"a known {TOKEN_HEADER} header is required",
                           code="invalid_memory_token", kind="permission_error")
        peer = request.client.host if request.client else None
        user = request_user(request.headers, peer, services.settings,
                            getattr(request.state, "key_user", None))
        if user != owner[0]:  # a token is good only with the key (the user) it was issued to
            raise APIError(403, f"this {TOKEN_HEADER} belongs to another user",
                           code="invalid_memory_token", kind="permission_error")
        return owner

    @router.post("")
    async def write(body: MemoryWrite, request: Request) -> dict:
        user, session = session_of(request)
        switch = memory_switch(request.headers.get(MEMORY_HEADER))  # a 400 for another
        if switch is not None:  # "read" or "off": this request may not write, as on /mcp
            raise APIError(403, f"memory is read-only for this request ({MEMORY_HEADER}: "
                           f"{switch}): nothing was written; the search and read routes "
                           "still answer", code="memory_read_only", kind="permission_error")
        # The store's rules (the secret check among them), the visibility check and the
        # file writes run in a worker thread: never on the event loop that streams every
        # client's answer.
        try:
            result = await asyncio.to_thread(
                write_note, services.store(user), body.op, note_id=body.id,
                title=body.title, body=body.body, kind=body.kind, scope=body.scope,
                tags=body.tags, reason=body.reason,
                project=request.headers.get("x-tandem-project") or None, session=session,
                source="route")
        except NoteIdRequired as exc:
            raise APIError(400, str(exc), code="invalid_value", param="id") from None
        except NoteNotVisible as exc:
            raise APIError(404, str(exc), code="not_found", param="id") from None
        services.on_change(user)
        return _result_json(result)

    @router.post("/prefetch", status_code=202)
    async def prefetch(body: PrefetchHint, request: Request) -> dict:
        """A client's word on what comes next in the session (the draft being typed, the
        files open in an editor): the notes it matches are prefilled after the
        conversation in idle time, so the next message finds them in the cache."""
        user, session = session_of(request)
        hint = body.hint.strip()
        if not hint:
            raise APIError(400, "hint must not be empty", code="invalid_value", param="hint")
        if len(hint) > HINT_MAX_CHARS:
            raise APIError(400, f"hint must be at most {HINT_MAX_CHARS} characters",
                           code="invalid_value", param="hint")
        if not services.idle.prefetch_limits.hints_on:
            raise APIError(409, "this profile takes no prefetch hints (they need memory.mode "
                           "on, and memory.prefetch.hint_notes and budget above 0)",
                           code="prefetch_off")
        record = services.latest_record(user, session)
        if record is None or record.bare:
            raise APIError(409, "this session has no recorded turn with memory on to "
                           "prefetch after", code="no_conversation")
        services.idle.prefetch_due.hinted(user, session, hint)
        return {"status": "queued"}

    @router.get("/search")
    async def search(request: Request, q: str, limit: int = 10, mode: str | None = None,
                     collection: str | None = None) -> dict:
        """Notes by BM25 (as before); with `mode` or `collection`, the hybrid search over
        every layer."""
        return await searched(request, q, limit, mode, collection)

    @router.post("/search")
    async def search_form(body: SearchForm, request: Request) -> dict:
        return await searched(request, body.q, body.limit, body.mode, body.collection)

    async def searched(request: Request, q: str, limit: int, mode: str | None,
                       collection: str | None) -> dict:
        user, session = session_of(request)
        if not 1 <= limit <= 50:
            raise APIError(400, "limit must be between 1 and 50", code="invalid_value",
                           param="limit")
        store = services.store(user)
        visible = visible_note_ids(store, request.headers.get("x-tandem-project") or None,
                                   session)
        if mode is None and collection is None:
            hits = store.search(q, limit=limit, include_stale=False)
            return {"data": [{**note_json(note), "score": score} for note, score in hits
                             if note.id in visible]}
        return await hybrid_search(search_service(), user, q, mode or "hybrid", collection,
                                   limit, visible)

    @router.post("/read")
    async def read_form(body: ReadForm, request: Request) -> dict:
        return await read(body.id, request)

    @router.get("/{note_id}")
    async def read(note_id: str, request: Request) -> dict:
        user, session = session_of(request)
        store = services.store(user)
        project = request.headers.get("x-tandem-project") or None
        note = store.get(note_id) if note_id in visible_note_ids(store, project, session) \
            else None
        if note is None:
            raise APIError(404, f"no note {note_id!r}", code="not_found", param="note_id")
        return note_json(note)

    return router


async def hybrid_search(service: SearchService | None, user: str, query: str, mode: str,
                        collection: str | None, limit: int,
                        visible: set[str] | None = None) -> dict:
    """The hybrid search's answer, or a clear 4xx/503 for what cannot be searched.
    `visible`: the note ids the request may read (None: the admin's search, all)."""
    if service is None:
        raise APIError(503, "the engine is still loading", code="engine_not_ready",
                       kind="server_error")
    if mode not in MODES:
        raise APIError(400, f"mode must be one of {', '.join(MODES)}", code="invalid_value",
                       param="mode")
    if collection is not None and collection not in COLLECTIONS:
        raise APIError(400, f"collection must be one of {', '.join(COLLECTIONS)}",
                       code="invalid_value", param="collection")
    if not query.strip():
        raise APIError(400, "q must not be empty", code="invalid_value", param="q")
    try:
        wanted = limit if visible is None else hits_to_ask_for(limit)
        hits, dense = await service.search(user, query, mode, collection, wanted)
    except SourceError as exc:
        raise APIError(409, f"the search sources cannot be read: {exc}",
                       code="bad_sources") from None
    if visible is not None:
        hits = visible_hits(hits, visible, limit)
    return {"object": "list", "mode": mode if dense or mode == "sparse" else "sparse",
            "dense": dense, "data": [vars(h) for h in hits]}


def _result_json(result: WriteResult) -> dict:
    if not result.ok and result.reason in ("lease_busy", "stale_lease"):
        raise not_the_writer(result.reason, result.retry_after, result.holder)
    if not result.ok:
        raise APIError(422, f"refused: {result.reason}", code=result.reason, param=None)
    return {"ok": True, "op": result.op, "revised_existing": result.revised_existing,
            "redactions": result.redactions,
            "note": note_json(result.note) if result.note is not None else None}
