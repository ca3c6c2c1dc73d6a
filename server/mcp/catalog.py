"""The MCP server's catalog: each memory tool's name, description and argument schema (as
short as serves a model: names it knows from the engine's own tools, enums where the
choices are few, the limits in the schema), and the core layer files as resources.
"""

import logging
from collections.abc import Callable
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

from conductor.memory.types import COLLECTIONS, CORE_FILES
from server.mcp.access import MemoryAccess
from server.mcp.tools import (
    CAPS,
    FORGET,
    INSTRUCTIONS,
    QUERY_CHARS,
    READ,
    REASON_CHARS,
    RECENT,
    RECENT_MAX,
    REF_CHARS,
    REMEMBER,
    SEARCH,
    SEARCH_MAX,
    UPDATE,
    Caller,
    Kind,
    MemoryTools,
    NoteId,
    Tags,
    guarded,
)

CORE_URI = "tandem://core/{name}"

# Not `from __future__ import annotations`: the SDK reads the tools' argument types
# from their signatures at registration.
Collection = Literal[COLLECTIONS]  # type: ignore[valid-type]


def build_server(access: MemoryAccess, caller: Callable[[], Caller]) -> MCPServer:
    """The MCP server over `access`; `caller()` names whose memory the current call is."""
    tools = MemoryTools(access, caller)
    server = _quiet_server()
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                             open_world_hint=False)

    async def memory_search(
            query: Annotated[str, Field(min_length=1, max_length=QUERY_CHARS,
                                        description="what to look for, in words")],
            collection: Annotated[Collection | None, Field(
                description="one collection only")] = None,
            limit: Annotated[int, Field(ge=1, le=SEARCH_MAX)] = 5) -> dict:
        """Search your memory (notes, facts, preferences, projects, core files, the
        library) by words and meaning. Each result has a ref to read in full with
        memory_read, and a note's id."""
        return await tools.search(query, collection, limit)

    async def memory_read(
            ref: Annotated[str, Field(min_length=1, max_length=REF_CHARS,
                                      description="a note id, or a ref from memory_search")]
    ) -> str:
        """Read a memory item in full, by a note id or a ref from memory_search."""
        return await tools.read(ref)

    async def memory_remember(
            title: Annotated[str, Field(min_length=1, max_length=CAPS.title_chars,
                                        description="one line")],
            body: Annotated[str, Field(max_length=CAPS.body_chars,
                                       description=f"the fact, at most "
                                       f"{CAPS.body_words} words")] = "",
            kind: Kind = "reference",
            scope: Annotated[Literal["user", "project"], Field(
                description="user: every project of yours; project: this one")] = "user",
            tags: Tags = []) -> dict:  # noqa: B006 (pydantic copies the default)
        """Remember a lasting fact, preference or project detail (one fact a note, no
        secrets). The same fact said again revises the note already there."""
        return await tools.write("add", title=title, body=body, kind=kind, scope=scope,
                                 tags=tags)

    async def memory_update(
            id: NoteId,
            title: Annotated[str | None, Field(max_length=CAPS.title_chars)] = None,
            body: Annotated[str | None, Field(max_length=CAPS.body_chars)] = None,
            kind: Kind | None = None,
            tags: Tags | None = None,
            reason: Annotated[str | None, Field(max_length=REASON_CHARS)] = None) -> dict:
        """Correct a note: what you leave out stays as it was; the old text is kept as a
        revision."""
        return await tools.write("update", note_id=id, title=title, body=body or "",
                                 kind=kind, tags=tags or (), reason=reason)

    async def memory_forget(
            id: NoteId,
            reason: Annotated[str, Field(min_length=1, max_length=REASON_CHARS,
                                         description="why it no longer holds")]) -> dict:
        """Retire a note that no longer holds (archived, not deleted; a note the user
        confirmed stays until they agree)."""
        return await tools.write("archive", note_id=id, reason=reason)

    async def memory_recent(
            limit: Annotated[int, Field(ge=1, le=RECENT_MAX)] = 10) -> dict:
        """Your newest notes (id, title, kind, scope), newest first."""
        return await tools.recent(limit)

    for fn, name, annotations in ((memory_search, SEARCH, reads), (memory_read, READ, reads),
                                  (memory_remember, REMEMBER, writes),
                                  (memory_update, UPDATE, writes),
                                  (memory_forget, FORGET, writes),
                                  (memory_recent, RECENT, reads)):
        server.add_tool(guarded(name, fn), name=name, annotations=annotations,
                        structured_output=False)  # JSON text: what every client shows

    for file_name in CORE_FILES:
        _add_core_resource(server, tools, file_name)
    return server


def _add_core_resource(server: MCPServer, tools: MemoryTools, name: str) -> None:
    async def core_file() -> str:
        return await tools.core_file(name)

    server.resource(CORE_URI.format(name=name), name=name, mime_type="text/markdown",
                    description=f"the core layer file {name}: in every prompt of the "
                    "continuous conversation; the user's to edit")(core_file)


def _quiet_server() -> MCPServer:
    """The SDK's server without its logging set-up: `MCPServer()` calls
    `logging.basicConfig` (a rich handler at INFO on the root logger), which would change
    how the whole process logs; with a handler already there, basicConfig does nothing."""
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        return MCPServer("tandem-memory", instructions=INSTRUCTIONS, log_level="WARNING")
    finally:
        root.removeHandler(guard)
