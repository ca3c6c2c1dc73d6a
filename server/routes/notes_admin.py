"""The Memory screen's notes routes (admin rule): the tree, the list, a note with its
history and uses, and the user's curation (edit, ratify, reject, archive, pin, delete).

Every write is `NoteStore`'s user side, the same call `tandem notes` makes, named
`via="dashboard"`; a refusal is a 4xx with the store's reason.

    GET    /v1/conductor/memory/tree                      scopes with their note counts
    GET    /v1/conductor/memory/notes?scope&project&session&kind&status&state&q&offset&limit
    GET    /v1/conductor/memory/notes/{id}                the note, its file, history, uses
    PATCH  /v1/conductor/memory/notes/{id}                edit: a ratified revision
    POST   /v1/conductor/memory/notes/{id}/{action}       ratify, reject, archive, pin, unpin
    DELETE /v1/conductor/memory/notes/{id}
"""

from __future__ import annotations

import asyncio
import difflib
import itertools
from datetime import timedelta

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from conductor.memory.types import (
    KINDS,
    SCOPES,
    STATUSES,
    Note,
    NoteStore,
    Reason,
    WriteResult,
    format_time,
    parse_time,
    users_under,
)
from server.access.keys import KeysError, KeyStore, label_folder
from server.http.errors import APIError

MAX_PAGE = 200
MAX_JOURNAL_SCAN = 20_000  # journal lines read for one note's uses (newest first)
USE_OPS = ("inject", "inject_index")
ACTIONS = ("ratify", "reject", "archive", "pin", "unpin")


class NoteEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = None
    body: str | None = None
    tags: list[str] | None = None
    kind: str | None = None


class NoteAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=500)


def note_summary(store: NoteStore, note: Note, uses: dict[str, int] | None = None) -> dict:
    """A note as the list shows it: no body, its uses in the last 7 days."""
    return {"id": note.id, "title": note.title, "kind": note.kind, "scope": note.scope,
            "project": note.project, "session": note.session, "status": note.status,
            "pinned": note.pinned, "tags": list(note.tags), "revision": note.revision,
            "updated": format_time(note.updated), "archived": note.archived,
            "stale": note.is_stale(store.clock()),
            "uses_7d": (uses if uses is not None else store.uses_of([note.id]))[note.id]}


def _user_entries(state, folders: list[str]) -> list[dict]:
    """One entry per user folder for the screen's picker, the engine's own user's first:
    {folder, name}, the name the server knows for it (the engine user's, a key's label),
    else the folder (`jose--<hash>` alone does not say it is josé)."""
    engine = state.memory.settings.user_name
    names = {}
    try:
        names = {label_folder(e.label): e.label for e in KeyStore(state.home).list()}
    except KeysError:  # a hand-broken keys file: the folders still list
        pass
    own = label_folder(engine)  # None only for a name that is no one's
    if own is not None:
        names[own] = engine
    ordered = dict.fromkeys([own, *folders] if own is not None else folders)
    return [{"folder": f, "name": names.get(f, f)} for f in ordered]


def notes_admin_router(state) -> APIRouter:
    router = APIRouter(prefix="/v1/conductor/memory")
    memory = state.memory

    async def store_for(request: Request, user: str | None) -> NoteStore:
        return memory.store(await state.admin.user(request, user))

    @router.get("/tree")
    async def tree(request: Request, user: str | None = None) -> dict:
        store = await store_for(request, user)
        counts = await asyncio.to_thread(store.scope_counts)
        branches = [{"scope": scope, "key": key, "live": c["live"], "archived": c["archived"]}
                    for (scope, key), c in sorted(counts.items(),
                                                  key=lambda kv: (kv[0][0], kv[0][1] or ""))]
        folders = await asyncio.to_thread(users_under, memory.root)
        entries = await asyncio.to_thread(_user_entries, state, [store.user, *folders])
        return {"user": store.user, "users": folders, "kinds": list(KINDS),
                "user_entries": entries, "data": branches}

    @router.get("/notes")
    async def list_notes(request: Request, user: str | None = None, scope: str | None = None,
                         project: str | None = None, session: str | None = None,
                         kind: str | None = None, status: str | None = None,
                         state_: str = Query("live", alias="state"), q: str | None = None,
                         offset: int = 0, limit: int = 50) -> dict:
        store = await store_for(request, user)
        _check_choice("scope", scope, SCOPES)
        _check_choice("kind", kind, KINDS)
        _check_choice("status", status, STATUSES)
        _check_choice("state", state_, ("live", "archived", "all"))
        if not 1 <= limit <= MAX_PAGE or offset < 0:
            raise APIError(400, f"limit must be between 1 and {MAX_PAGE}, offset at least 0",
                           code="invalid_value", param="limit")
        filters = {"scope": scope, "project": project, "session": session, "kind": kind,
                   "status": status, "state": state_}

        def page() -> tuple[list[tuple[Note, float | None]], int]:
            if q and q.strip():
                # one more than the page: whether there is a next page (a search's total
                # is not known without ranking every note)
                hits = store.search(q, limit=offset + limit + 1, **filters)
                return [(n, s) for n, s in hits[offset:offset + limit]], len(hits)
            notes, total = store.page(offset=offset, limit=limit, **filters)
            return [(n, None) for n in notes], total

        found, total = await asyncio.to_thread(page)
        uses = await asyncio.to_thread(store.uses_of, [n.id for n, _ in found])
        return {"object": "list", "total": total, "offset": offset,
                "has_more": total > offset + limit,
                "data": [{**note_summary(store, n, uses), **({"score": s} if s is not None
                                                            else {})} for n, s in found]}

    @router.get("/notes/{note_id}")
    async def read_note(note_id: str, request: Request, user: str | None = None) -> dict:
        store = await store_for(request, user)
        note = store.get(note_id)
        if note is None:
            raise APIError(404, f"no note {note_id!r}", code="not_found")
        return await asyncio.to_thread(_note_detail, store, note)

    @router.patch("/notes/{note_id}")
    async def edit_note(note_id: str, body: NoteEdit, request: Request,
                        user: str | None = None) -> dict:
        store = await store_for(request, user)
        result = await asyncio.to_thread(store.edit, note_id, title=body.title, body=body.body,
                                         tags=body.tags, kind=body.kind, via="dashboard")
        return _answer(store, result, memory)

    @router.post("/notes/{note_id}/{action}")
    async def act(note_id: str, action: str, request: Request, body: NoteAction | None = None,
                  user: str | None = None) -> dict:
        store = await store_for(request, user)
        if action not in ACTIONS:
            raise APIError(404, f"no action {action!r}; actions: {', '.join(ACTIONS)}",
                           code="not_found")
        reason = body.reason if body is not None else None
        calls = {"ratify": lambda: store.ratify(note_id, via="dashboard"),
                 "reject": lambda: store.reject(note_id, reason=reason, via="dashboard"),
                 "archive": lambda: store.user_archive(note_id, reason, via="dashboard"),
                 "pin": lambda: store.pin(note_id, True, via="dashboard"),
                 "unpin": lambda: store.pin(note_id, False, via="dashboard")}
        return _answer(store, await asyncio.to_thread(calls[action]), memory)

    @router.delete("/notes/{note_id}")
    async def delete_note(note_id: str, request: Request, user: str | None = None) -> dict:
        store = await store_for(request, user)
        return _answer(store, await asyncio.to_thread(store.delete, note_id, via="dashboard"),
                       memory)

    return router


def _check_choice(name: str, value: str | None, choices) -> None:
    if value is not None and value not in choices:
        raise APIError(400, f"{name} must be one of {', '.join(choices)}",
                       code="invalid_value", param=name)


def _answer(store: NoteStore, result: WriteResult, memory) -> dict:
    if not result.ok:
        status = 404 if result.reason == Reason.NOT_FOUND else 409 if result.reason in (
            Reason.ALREADY_RATIFIED, Reason.NOT_A_RULE, Reason.NOT_RATIFIED) else 422
        detail = f": {result.detail}" if result.detail else ""
        raise APIError(status, f"{result.op} refused ({result.reason}){detail}",
                       code=str(result.reason))
    memory.on_change(store.user)
    note = result.note
    return {"ok": True, "op": result.op, "redactions": result.redactions,
            "note": note_summary(store, note) if note is not None else None}


def _note_detail(store: NoteStore, note: Note) -> dict:
    text = note.path.read_text(encoding="utf-8") if note.path is not None else ""
    versions = [*store.revisions(note.id), (note.revision, text)]
    history = []
    for (old_n, old), (new_n, new) in zip(versions, versions[1:], strict=False):
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"revision {old_n}",
                                    f"revision {new_n}", lineterm="", n=1)
        history.append({"from": old_n, "to": new_n, "diff": "\n".join(diff)})
    return {**note_summary(store, note), "body": note.body, "file": text,
            "changelog": note.changelog, "history": history[::-1],
            "requests": _requests_of(store, note.id), "usage": store.usage(note.id)}


def _requests_of(store: NoteStore, note_id: str, limit: int = 50) -> list[dict]:
    """The requests the note went into, newest first (the journal's injection entries)."""
    cutoff = store.clock() - timedelta(days=30)
    found: list[dict] = []
    for entry in itertools.islice(store.journal.newest_first(), MAX_JOURNAL_SCAN):
        if entry.get("op") in USE_OPS and note_id in (entry.get("ids") or ()):
            at = parse_time(entry["at"]) if entry.get("at") else None
            if at is not None and at < cutoff:
                break
            found.append({"at": entry.get("at"), "request_id": entry.get("request_id"),
                          "how": "matched" if entry["op"] == "inject" else "index"})
            if len(found) >= limit:
                break
    return found
