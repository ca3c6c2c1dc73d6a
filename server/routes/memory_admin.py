"""The Memory screen's other admin routes: what memory did (the journal's writes and
refusals, the writer's runs), the running profile's switches, export, the user's delete,
and the bench's latest figures.

    GET  /v1/conductor/memory/journal?user=&op=&refused=&limit=   one user's writes and
                                                            refusals, newest first
    GET  /v1/conductor/memory/writer/runs?limit=            the writer's runs, newest first
    GET  /v1/conductor/memory/settings                      memory and writer switches
    PUT  /v1/conductor/memory/settings                      change them for this run
    GET  /v1/conductor/memory/export?user=                  the user's notes as a zip
    POST /v1/conductor/memory/delete-user                   {"user", "confirm": their name}
    GET  /v1/conductor/bench                                each bench's summary and plots
    GET  /v1/conductor/bench/{path}                         one plot (PNG) or summary
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.background import BackgroundTask

from server.access.admin import user_named
from server.access.keys import KeyStore
from server.http.errors import APIError
from server.turn.prompt import drop_text_memos

log = logging.getLogger("tandem.memory")

MAX_PAGE = 200
# The bench's results beside the package (a source checkout; an installed wheel has none).
BENCH_RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
BENCH_FILES = (".png", ".md", ".json")
MEMORY_OPS = ("inject", "inject_index")  # the per-request entries: uses, not writes


class SettingsChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    memory_mode: Literal["off", "shadow", "on"] | None = None
    writer_mode: Literal["off", "shadow", "on"] | None = None


class UserDelete(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str
    confirm: str


def memory_admin_router(state) -> APIRouter:
    router = APIRouter(prefix="/v1/conductor")
    memory = state.memory

    @router.get("/memory/journal")
    async def journal(request: Request, user: str | None = None, op: str | None = None,
                      refused: bool | None = None, limit: int = 50) -> dict:
        name = await state.admin.user(request, user)
        if not 1 <= limit <= MAX_PAGE:
            raise APIError(400, f"limit must be between 1 and {MAX_PAGE}",
                           code="invalid_value", param="limit")

        def newest() -> list[dict]:
            out = []
            for entry in memory.journal.newest_first():  # every user's: this one's only
                if entry.get("user") != name or entry.get("op") in MEMORY_OPS or (
                        op is not None and entry.get("op") != op):
                    continue
                if refused is not None and bool(entry.get("ok")) == refused:
                    continue
                out.append(entry)
                if len(out) >= limit:
                    break
            return out

        return {"object": "list", "user": name, "data": await asyncio.to_thread(newest)}

    @router.get("/memory/writer/runs")
    async def writer_runs(request: Request, limit: int = 20) -> dict:
        await state.admin.check(request)
        if not 1 <= limit <= MAX_PAGE:
            raise APIError(400, f"limit must be between 1 and {MAX_PAGE}",
                           code="invalid_value", param="limit")
        folder = memory.root / "cognition" / "runs"
        return {"object": "list", "data": await asyncio.to_thread(_newest_json, folder, limit)}

    @router.get("/memory/settings")
    async def settings(request: Request) -> dict:
        await state.admin.check(request)
        return _settings(state)

    @router.put("/memory/settings")
    async def change_settings(body: SettingsChange, request: Request) -> dict:
        await state.admin.check(request)
        if body.memory_mode is not None:
            # For this run only: the profile's file is the operator's and stays as it is.
            state.profile = replace(state.profile, memory=replace(
                state.profile.memory, mode=body.memory_mode))
        if body.writer_mode is not None:
            if state.writer is None:
                raise APIError(503, "the engine is still loading", code="engine_not_ready",
                               kind="server_error")
            state.writer.writer.mode = body.writer_mode
        return _settings(state)

    @router.get("/memory/export")
    async def export(request: Request, user: str | None = None) -> FileResponse:
        name = await state.admin.user(request, user)
        store = memory.store(name)
        folder = Path(tempfile.mkdtemp(prefix="tandem-export-"))
        stamp = datetime.now(UTC).strftime("%Y%m%d")
        path = await asyncio.to_thread(store.export_zip, folder / f"tandem-notes-{name}-"
                                       f"{stamp}.zip", via="dashboard")
        return FileResponse(path, media_type="application/zip", filename=path.name,
                            background=BackgroundTask(_remove_tree, folder))

    @router.post("/memory/delete-user")
    async def delete_user(body: UserDelete, request: Request) -> dict:
        name = await state.admin.user(request, body.user)
        if not _confirms(body.confirm, name):
            raise APIError(400, "type the user's name in confirm to delete their memory",
                           code="confirmation_mismatch", param="confirm")
        try:
            removed = await asyncio.to_thread(_delete_user, state, name)
        except OSError as exc:  # disk full, read-only: what is done stays done; run it again
            raise APIError(500, f"the delete stopped: {exc.strerror or type(exc).__name__}; "
                           "send it again to finish", code="io_error",
                           kind="server_error") from None
        log.info("user deleted from the Memory screen: %s", ", ".join(
            f"{count} {kind}" for kind, count in removed.items() if count))
        return {"ok": True, "user": name, "notes_deleted": removed["notes"],
                "records_dropped": removed["records"], "removed": removed}

    @router.get("/bench")
    async def bench(request: Request) -> dict:
        await state.admin.check(request)
        return {"object": "list", "data": await asyncio.to_thread(_bench_runs)}

    @router.get("/bench/{path:path}")
    async def bench_file(path: str, request: Request) -> Response:
        await state.admin.check(request)
        # Only a file the listing has: the request's path never reaches the file system.
        files = await asyncio.to_thread(_bench_files)
        if path not in files:
            raise APIError(404, "no such bench file", code="not_found")
        return FileResponse(files[path])

    return router


def _confirms(typed: str, folder: str) -> bool:
    """Whether `typed` names the user whose folder is `folder`: their name in any case or
    spelling (josé, José, for the folder `jose--<hash>`) or the folder itself, as the
    screen lists it (`user_named`). Empty, or a name that is no one's, confirms nothing."""
    typed = typed.strip()
    if not typed:  # user_named would take the engine's own user for it
        return False
    try:
        return user_named(typed, folder) == folder
    except APIError:  # a control character, too long: not this user's name
        return False


def _delete_user(state, name: str) -> dict[str, int]:
    """Delete means gone: the user's API keys revoked first (no new request of theirs
    starts), their search index let go, then their tokens, caches and every file
    (`MemoryServices.delete_user`). Counts of what went, by kind; never a title."""
    keys = KeyStore(state.home).revoke_user(name)  # the file the key check reloads
    collections = state.search.forget(name) if state.search is not None else 0
    if state.jobs is not None:
        state.jobs.prewarm_due.discard(name)
    removed = state.memory.delete_user(name, via="dashboard", also={
        "api_keys": keys, "search_collections": collections})
    drop_text_memos()  # the prompt's memos keyed by text, and the token counts'
    if state.engine is not None:  # (an engine still loading has counted nothing)
        state.engine.count_tokens.cache_clear()  # memoised in both engines (lru_cache)
    return removed


def _settings(state) -> dict:
    writer = state.writer.writer.mode if state.writer is not None else None
    return {"profile": state.profile.name, "memory_mode": state.profile.memory.mode,
            "writer_mode": writer, "conversation": state.profile.memory.conversation,
            "for_this_run": True}


def _newest_json(folder: Path, limit: int) -> list[dict]:
    paths = sorted(folder.rglob("*.json"), reverse=True) if folder.is_dir() else []
    out = []
    for path in paths[:limit * 2]:
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if len(out) >= limit:
            break
    return out


def _bench_runs() -> list[dict]:
    """Each folder under bench/results with a summary.md: its text and its plots."""
    if not BENCH_RESULTS.is_dir():
        return []
    runs = []
    for summary in sorted(BENCH_RESULTS.rglob("summary.md")):
        folder = summary.parent
        rel = folder.relative_to(BENCH_RESULTS).as_posix()
        runs.append({"name": rel, "summary": summary.read_text(encoding="utf-8")[:20_000],
                     "updated": datetime.fromtimestamp(summary.stat().st_mtime, UTC)
                     .isoformat(timespec="seconds"),
                     "plots": [f"{rel}/{p.name}" for p in sorted(folder.glob("*.png"))]})
    return runs


def _bench_files() -> dict[str, Path]:
    """Every result file under bench/results, by its path relative to it."""
    if not BENCH_RESULTS.is_dir():
        return {}
    return {p.relative_to(BENCH_RESULTS).as_posix(): p for p in BENCH_RESULTS.rglob("*")
            if p.suffix in BENCH_FILES and p.is_file()}


def _remove_tree(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
