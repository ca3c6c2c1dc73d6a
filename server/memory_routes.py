"""The memory routes, under the session's token: write, search and read notes.

The token comes with every chat answer (header `X-Tandem-Memory-Token`, and in the memory
card the model sees); a request without a known token is answered 403.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from conductor.notes import WriteResult
from server.errors import APIError
from server.memory import TOKEN_HEADER, MemoryServices, request_user


class MemoryWrite(BaseModel):
    op: Literal["add", "update", "archive"] = "add"
    scope: str | None = None
    kind: str | None = None
    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    body: str = ""
    id: str | None = None
    reason: str | None = None


def _note_json(note) -> dict:
    return {"id": note.id, "title": note.title, "kind": note.kind, "scope": note.scope,
            "status": note.status, "tags": list(note.tags), "body": note.body,
            "updated": str(note.updated)}


def memory_router(services: MemoryServices) -> APIRouter:
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
        store = services.store(user)
        project = request.headers.get("x-tandem-project") or None
        if body.op == "add":
            result = store.add(title=body.title or "", body=body.body, kind=body.kind or "",
                               scope=body.scope or "", tags=body.tags, project=project,
                               session=session, source="route")
        elif body.id is None:
            raise APIError(400, f"{body.op} needs an id", code="invalid_value", param="id")
        elif body.op == "update":
            result = store.update(body.id, title=body.title, body=body.body or None,
                                  tags=body.tags or None, kind=body.kind, source="route")
        else:
            result = store.archive(body.id, body.reason or "", source="route")
        return _result_json(result)

    @router.get("/search")
    async def search(request: Request, q: str, limit: int = 10) -> dict:
        user, session = session_of(request)
        if not 1 <= limit <= 50:
            raise APIError(400, "limit must be between 1 and 50", code="invalid_value",
                           param="limit")
        hits = services.store(user).search(q, limit=limit, include_stale=False)
        return {"data": [{**_note_json(note), "score": score} for note, score in hits]}

    @router.get("/{note_id}")
    async def read(note_id: str, request: Request) -> dict:
        user, _session = session_of(request)
        note = services.store(user).get(note_id)
        if note is None:
            raise APIError(404, f"no note {note_id!r}", code="not_found", param="note_id")
        return _note_json(note)

    return router


def _result_json(result: WriteResult) -> dict:
    if not result.ok:
        raise APIError(422, f"refused: {result.reason}", code=result.reason, param=None)
    return {"ok": True, "op": result.op, "revised_existing": result.revised_existing,
            "redactions": result.redactions,
            "note": _note_json(result.note) if result.note is not None else None}
