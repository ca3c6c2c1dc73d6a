"""The memory tools and resources an MCP client gets, over either transport.

Named as the engine's own memory tools where they overlap (`memory_search`,
`memory_read`: server/turn/answering/engine_tools.py), and calling what the memory routes
call: the hybrid search, `conductor.hidden.memory_refs.read_ref`, and
`conductor.writing.client_writes.write_note` (the rules, secret check, dedupe, journal and
revisions of `POST /v1/memory`). Every read follows
`conductor.hidden.shared_context.visible_note_ids`: the caller's user, their live notes and
their project's, never another user's, project's or session's, never an archived note.

Every failure is a tool error (an `isError` result) whose text says what to do next and
holds no stack trace; a failure this code did not foresee is logged by its type only
(notes never reach the log) and told to the model by the tool's name.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from conductor.memory.hiding import (
    NOTE_ID,
    RefError,
    hits_to_ask_for,
    note_id_of_file,
    read_ref,
    visible_hits,
    visible_note_ids,
)
from conductor.memory.types import (
    NoteCaps,
    NoteNotVisible,
    Registry,
    SourceError,
    WriteOp,
    WriteResult,
    note_json,
    write_note,
)
from server.mcp.access import MemoryAccess, Unavailable
from server.turn.memory import MEMORY_SWITCHES

log = logging.getLogger("tandem.mcp")

SEARCH, READ = "memory_search", "memory_read"
REMEMBER, UPDATE, FORGET, RECENT = ("memory_remember", "memory_update", "memory_forget",
                                    "memory_recent")
SOURCE = "mcp"  # the journal's and the changelog's name for these writes

# What one call may take and give: a model's context is the budget.
QUERY_CHARS = 1_000
REF_CHARS = 1_000
SEARCH_MAX = 20
RECENT_MAX = 50
SNIPPET_CHARS = 300
READ_CHARS = 16_000  # a longer file is cut, and says how to read the rest
REASON_CHARS = 300
TAGS_MAX = 10
TAG_CHARS = 60
CAPS = NoteCaps()

Kind = Literal["reference", "gotcha", "runbook", "rule", "ruling", "registry"]
NoteId = Annotated[str, Field(pattern=r"^[0-9a-f]{10}$",
                              description="a note's id, as memory_search, memory_recent or "
                              "memory_remember gave it")]
Tags = Annotated[list[Annotated[str, Field(max_length=TAG_CHARS)]],
                 Field(max_length=TAGS_MAX, description="a few words to find it by")]

INSTRUCTIONS = (
    "Tandem's memory of this user: the notes every model and session of theirs shares. "
    "Search it (memory_search) before you answer about the user, their projects or past "
    "decisions; read an entry in full with memory_read. Keep a lasting fact, preference or "
    "project detail with memory_remember (one fact a note, no secrets); correct one with "
    "memory_update, retire one with memory_forget."
)


@dataclass(frozen=True)
class Caller:
    """Whose memory a call reads and writes: the user (None: a relayed request naming
    nobody), the project (X-Tandem-Project over HTTP, --project over stdio), and the
    request's X-Tandem-Memory ("read" or "off": this call may not write, as on the chat
    routes; None: no header)."""

    user: str | None
    project: str | None = None
    memory: str | None = None

    @property
    def writes(self) -> bool:
        return self.memory not in MEMORY_SWITCHES


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1].rstrip() + "…"


def _refusal(result: WriteResult) -> ToolError:
    """A store refusal in words the model can act on (reasons and limits, no content)."""
    detail = f": {result.detail}" if result.detail else ""
    hint = {"secret": " (leave the secret out: Tandem never stores one)",
            "cap_user": " (forget notes that no longer hold first)",
            "rule_needs_user_message": " (the user can add it themselves: the Memory "
                                       "screen or `tandem notes add`)",
            "project_required": " (this client sends no project: use scope \"user\")",
            }.get(result.reason or "", "")
    return ToolError(f"refused ({result.reason}){detail}{hint}")


def guarded(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`fn` with every failure turned into a tool error the model can act on."""

    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except ToolError:
            raise
        except (Unavailable, RefError, SourceError) as exc:
            raise ToolError(str(exc)) from None
        except NoteNotVisible:
            raise ToolError("no such note in your memory (ids come from memory_search or "
                            "memory_recent)") from None
        except Exception as exc:  # noqa: BLE001 (the model is told, the log gets the type)
            log.warning("%s failed: %s", name, type(exc).__name__)
            raise ToolError(f"{name} failed ({type(exc).__name__}); try again, or tell the "
                            "user memory is not answering") from None
    return run


class MemoryTools:
    """The tools' work for one access (served or local) and one way to know the caller."""

    def __init__(self, access: MemoryAccess, caller: Callable[[], Caller]) -> None:
        self.access = access
        self.caller = caller
        self._writes: set[asyncio.Task] = set()  # held while they finish (see write)

    def _who(self) -> Caller:
        caller = self.caller()
        if caller.user is None:
            raise ToolError("this request names no user: a trusted proxy relays the user "
                            "in X-Tandem-User")
        return caller

    def _visible(self, caller: Caller) -> set[str]:
        store = self.access.store(caller.user)
        with store.one_scan():  # the user's and the project's notes from one scan
            return visible_note_ids(store, caller.project, None)

    async def search(self, query: str, collection: str | None, limit: int) -> dict:
        caller = self._who()
        if not query.strip():
            raise ToolError("query is empty: give a few words to search for")
        # The store's scan (who may see what) and the index's search, side by side: each
        # in a worker thread, the answer as soon as the slower is done.
        visible, hits = await asyncio.gather(
            asyncio.to_thread(self._visible, caller),
            self.access.search(caller.user, query, collection, hits_to_ask_for(limit)))
        hits = visible_hits(hits, visible, limit)
        return {"query": query, "results": [
            {"ref": h.ref, **({"id": i} if (i := note_id_of_file(h.path)) else {}),
             "collection": h.collection, "score": round(h.score, 4),
             # a title-only note's chunk has no text: its title (the trail) is the snippet
             "snippet": _snippet(h.text or h.section)} for h in hits]}

    async def read(self, ref: str) -> str:
        caller = self._who()

        def read() -> str:
            self.access.layers(caller.user).ensure()  # a first use makes the core files
            store = self.access.store(caller.user)
            visible = self._visible(caller)
            # A note id needs no registry (no search index opened, none loading).
            registry = (Registry(Path()) if NOTE_ID.match(ref.strip())
                        else self.access.registry(caller.user))
            return read_ref(ref, store, self.access.layers(caller.user), registry, visible)

        text = await asyncio.to_thread(read)
        if len(text) <= READ_CHARS:
            return text
        return (text[:READ_CHARS] + f"\n[cut at {READ_CHARS} characters: read one section "
                "by its ref (file#Section) for the rest]")

    async def write(self, op: WriteOp, **fields: Any) -> dict:
        """A write that a client gone mid-call cannot cut short: it runs in a task of its
        own (shielded), whose thread finishes the files and the journal, and the search
        index is told, whether or not anyone is still waiting for the answer."""
        caller = self._who()
        if not caller.writes:  # refused before the store is touched: nothing is written
            raise ToolError(f"memory is read-only for this request (X-Tandem-Memory: "
                            f"{caller.memory}): nothing was written; memory_search, "
                            "memory_read and memory_recent still answer")
        user = caller.user

        async def write_then_tell() -> WriteResult:
            result = await asyncio.to_thread(
                write_note, self.access.store(user), op, project=caller.project,
                session=None, source=SOURCE, **fields)
            if result.ok:
                self.access.changed(user)
            return result

        task = asyncio.ensure_future(write_then_tell())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        result = await asyncio.shield(task)
        if not result.ok:
            raise _refusal(result)
        note = result.note
        out = {"ok": True, "op": op, "id": note.id, "title": note.title, "kind": note.kind,
               "scope": note.scope, "status": "archived" if note.archived else note.status}
        if result.revised_existing:
            out["revised_existing"] = True  # the same fact was there: it was revised
        if result.redactions:
            out["redactions"] = result.redactions
        if result.kept_live:
            out["kept_live"] = result.detail
        return out

    async def recent(self, limit: int) -> dict:
        caller = self._who()

        def recent() -> list[dict]:
            store = self.access.store(caller.user)
            with store.one_scan():
                visible = self._visible(caller)
                notes = [n for n in store.list(include_stale=False) if n.id in visible]
            return [{k: v for k, v in note_json(n).items() if k != "body"}
                    for n in notes[:limit]]

        return {"notes": await asyncio.to_thread(recent)}

    async def core_file(self, name: str) -> str:
        caller = self._who()

        def read() -> str:
            layers = self.access.layers(caller.user)
            layers.ensure()
            return next(f.text for f in layers.core() if f.name == name)

        return await asyncio.to_thread(read)

