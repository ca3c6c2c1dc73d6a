"""Where the MCP tools find a user's memory: the running server's own services (the `/mcp`
endpoint of `tandem serve`), or the memory folder itself (`tandem mcp` over stdio when no
server runs).

Both give the tools the same things (the user's note store, layers, search registry and
hybrid search, and a word that the user's files changed), so every tool runs one code
path whichever way it was reached. Everything here blocks or may: the tools call it in
worker threads, except `search`, which is a coroutine that runs its own work in one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from conductor.memory.types import (
    Embedder,
    Hit,
    IndexBusy,
    NoteStore,
    Registry,
    SearchIndex,
    UserLayers,
)

if TYPE_CHECKING:
    from conductor.memory.interface import MemoryDoor
    from server.idle.search import SearchService

log = logging.getLogger("tandem.mcp")


class Unavailable(RuntimeError):
    """The memory cannot be reached now; the message says what to do (it holds no
    content)."""


class MemoryAccess(Protocol):
    def store(self, user: str) -> NoteStore: ...
    def layers(self, user: str) -> UserLayers: ...
    def registry(self, user: str) -> Registry: ...
    async def search(self, user: str, query: str, collection: str | None,
                     limit: int) -> list[Hit]: ...
    def changed(self, user: str) -> None: ...


class ServedMemory:
    """The server's own memory services: the stores, layers and search index every other
    route uses, so a note written here is in the next prompt's hidden context and the
    search index is synced by the server's idle loop."""

    def __init__(self, services: MemoryDoor,
                 search_service: Callable[[], SearchService | None]) -> None:
        self.services = services
        self._search_service = search_service

    def _service(self) -> SearchService:
        service = self._search_service()
        if service is None:
            raise Unavailable("the engine is still loading; search and file reads start "
                              "when it is ready (about a minute): try again then")
        return service

    def store(self, user: str) -> NoteStore:
        return self.services.store(user)

    def layers(self, user: str) -> UserLayers:
        return self.services.layers(user)

    def registry(self, user: str) -> Registry:
        return self._service().index(user).registry()

    async def search(self, user: str, query: str, collection: str | None,
                     limit: int) -> list[Hit]:
        hits, _dense = await self._service().search(user, query, "hybrid", collection, limit)
        return hits

    def changed(self, user: str) -> None:
        self.services.on_change(user)


class LocalMemory:
    """The memory folder with no server running (`tandem mcp` over stdio). The notes store
    is safe across processes (each write holds the user's flock); the search index is not
    (embedded Qdrant takes its folder's lock in one process), so this process opens it for
    a search and closes it after, and a server that starts meanwhile can take it."""

    def __init__(self, home: Path, embedder_factory: Callable[[], Embedder | None]) -> None:
        self.root = home / "memory"
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._embedder_loaded = False
        self._stores: dict[str, NoteStore] = {}
        self._layers: dict[str, UserLayers] = {}
        self._indexes: dict[str, SearchIndex] = {}
        self._synced_at: dict[str, tuple[int, int]] = {}  # the journal's size when synced
        self._lock = threading.Lock()

    def store(self, user: str) -> NoteStore:
        with self._lock:
            if user not in self._stores:
                self._stores[user] = NoteStore(self.root, user)
            return self._stores[user]

    def layers(self, user: str) -> UserLayers:
        with self._lock:
            if user not in self._layers:
                self._layers[user] = UserLayers(self.root, user)
            return self._layers[user]

    def _index(self, user: str) -> SearchIndex:
        with self._lock:
            if not self._embedder_loaded:  # the packaged MiniLM: loaded on the first search
                self._embedder, self._embedder_loaded = self._embedder_factory(), True
            if user not in self._indexes:
                self._indexes[user] = SearchIndex(
                    self.root, user, self._embedder, os.environ.get("TANDEM_QDRANT_URL"),
                    os.environ.get("TANDEM_QDRANT_API_KEY"))
            return self._indexes[user]

    def registry(self, user: str) -> Registry:
        return self._index(user).registry()

    def _journal_mark(self) -> tuple[int, int]:
        """The journal's size and mtime: every note write, by any process, appends to it."""
        try:
            stat = (self.root / "journal.jsonl").stat()
        except FileNotFoundError:
            return (0, 0)
        return (stat.st_size, stat.st_mtime_ns)

    async def search(self, user: str, query: str, collection: str | None,
                     limit: int) -> list[Hit]:
        index = self._index(user)

        def run() -> list[Hit]:
            mark = self._journal_mark()
            try:
                # Synced when a note was written since (here or by another process), so a
                # note remembered by the last call is found by this one.
                if self._synced_at.get(user) != mark or index.count() == 0:
                    index.sync()
                    self._synced_at[user] = mark
                return index.search(query, "hybrid", collection, limit)
            except IndexBusy:
                raise Unavailable("a Tandem server holds this memory's search index; it "
                                  "answers this call once its address is in "
                                  "$TANDEM_HOME/server.json (restart `tandem serve`)") from None
            finally:
                index.close()  # the folder's lock: free for a server that starts

        return await asyncio.to_thread(run)

    def changed(self, user: str) -> None:
        self._synced_at.pop(user, None)
