"""What the next prompt of a session holds, part by part: the Memory screen's Context.

The next turn of a session starts with its latest ledger record's exact ids (a replay), so
the record *is* that prompt up to the client's next message: the system prompt and tools,
the shared context, the replayed turns with the hidden parts where they were (notes,
session tail, corrections, held-back blocks, engine tool exchanges). The matching notes of
the next message are chosen when it comes, so they are not here yet.

Cached: vLLM's prefix cache keeps every full block of a request it computed, so after the
turn the record's ids up to the last full block before its final token are cached
(unless evicted since, by other requests' blocks).

    GET /v1/conductor/memory/sessions?user=          sessions with records, newest first
    GET /v1/conductor/memory/context?session=&user=  the parts of the session's next prompt
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request

from conductor.memory.hiding import CORRECTION_KIND, PREFETCH_KIND, SESSION_KIND, SHARED_KIND
from conductor.memory.types import Record, flat_ids
from server.http.errors import APIError

IM_START = "<|im_start|>"
# What each hidden span kind is called on the screen; a visible block is named by its role.
HIDDEN_NAMES = {SHARED_KIND: "shared context", SESSION_KIND: "session tail",
                "index": "matched notes", "notes": "matched notes",
                PREFETCH_KIND: "prefetched notes",
                CORRECTION_KIND: "corrections", "block": "memory block (held back)",
                "tool": "engine tool exchange", "time": "time line"}
VISIBLE_NAMES = {"system": "system prompt and tools", "user": "replayed turns",
                 "assistant": "replayed turns", "tool": "replayed turns"}
MAX_TEXT = 4000  # characters of a part's text the screen gets


@dataclass
class Part:
    name: str
    kind: str  # a hidden span's kind, or "visible"
    start: int
    end: int
    note_ids: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        return self.end - self.start


def prompt_parts(record: Record, im_start: int, role_of) -> list[Part]:
    """The record's ids cut at hidden spans and visible block starts, adjacent pieces of
    one name merged. `role_of(start)` names the role of the block opened at `start`."""
    ids = flat_ids(record.ids)
    spans = sorted(record.spans, key=lambda s: s.start)
    cuts = {0, len(ids)} | {s.start for s in spans} | {s.end for s in spans}
    inside = [None] * len(ids)
    for span in spans:
        for i in range(span.start, min(span.end, len(ids))):
            inside[i] = span
    cuts |= {i for i, token in enumerate(ids) if token == im_start and inside[i] is None}
    edges = sorted(c for c in cuts if 0 <= c <= len(ids))
    parts: list[Part] = []
    role = "system"
    for start, end in zip(edges, edges[1:], strict=False):
        span = inside[start]
        if span is not None:
            part = Part(HIDDEN_NAMES.get(span.kind, f"hidden {span.kind}"), span.kind, start,
                        end, span.note_ids)
        else:
            if ids[start] == im_start:
                role = role_of(start)
            part = Part(VISIBLE_NAMES.get(role, "replayed turns"), "visible", start, end)
        last = parts[-1] if parts else None
        if last is not None and (last.name, last.kind) == (part.name, part.kind) \
                and last.end == part.start and part.kind == "visible":
            last.end = end
        else:
            parts.append(part)
    return parts


def context_router(state) -> APIRouter:
    router = APIRouter(prefix="/v1/conductor/memory")
    memory = state.memory

    @router.get("/sessions")
    async def sessions(request: Request, user: str | None = None) -> dict:
        name = await state.admin.user(request, user)
        data = []
        for session in memory.sessions_of(name):
            record = memory.latest_record(name, session)
            if record is not None:
                data.append({"session": session, "project": record.project,
                             "messages": len(record.messages), "tokens": len(record.ids),
                             "records": len(memory.records(name, session))})
        return {"object": "list", "user": name, "data": data}

    @router.get("/context")
    async def context(request: Request, session: str, user: str | None = None) -> dict:
        name = await state.admin.user(request, user)
        engine = state.engine
        if engine is None:
            raise APIError(503, "the engine is still loading", code="engine_not_ready",
                           kind="server_error")
        record = memory.latest_record(name, session)
        if record is None:
            raise APIError(404, f"no recorded turn of session {session!r} for {name}: the "
                           "next prompt is rendered afresh", code="not_found")
        # a hybrid model's effective block (vLLM raised it): its state is kept at the
        # last boundary of it, so that is what is cached
        return describe(record, engine.tokenizer,
                        engine.reuse_block or state.profile.block_size)

    return router


def describe(record: Record, tokenizer, block_size: int) -> dict:
    """The context screen's answer for a record: parts with counts, text and cache."""
    ids = flat_ids(record.ids)
    im_start = tokenizer.convert_tokens_to_ids(IM_START)

    def role_of(start: int) -> str:
        head = tokenizer.decode(ids[start + 1:start + 4])
        return head.split("\n", 1)[0].strip() or "system"

    # every full block before the last token was computed by the last turn's requests
    cached_end = max(0, (len(ids) - 1) // block_size * block_size)
    parts = []
    for part in prompt_parts(record, im_start, role_of):
        text = tokenizer.decode(ids[part.start:part.end])
        parts.append({"name": part.name, "kind": part.kind, "tokens": part.tokens,
                      "start": part.start, "note_ids": list(part.note_ids),
                      "cached_tokens": max(0, min(part.end, cached_end) - part.start),
                      "text": text[:MAX_TEXT], "text_cut": len(text) > MAX_TEXT})
    return {"session": record.session, "project": record.project, "tokens": len(ids),
            "messages": len(record.messages), "cached_tokens": cached_end,
            "block_size": block_size, "memory_on": not record.bare, "parts": parts,
            "pending": "the next message, its matching notes and the answer's opening are "
                       "added when it comes"}
