"""The hybrid search inside the server: one index a user, kept in sync in idle time.

A note write, a writer run or a job run marks the user's index stale; the idle loop
syncs it (incremental: unchanged files are skipped on their size and mtime) in a worker
thread, never while a client request is in flight: embedding is CPU work that would slow
the client's prefill on a small machine.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

from conductor.memory.services import MemoryServices
from conductor.memory.types import (
    Embedder,
    EmbedderError,
    EndpointEmbedder,
    Hit,
    SearchIndex,
    SourceError,
    SyncReport,
    default_embedder,
    drop_user_collections,
)
from engine.backend import EngineBackend
from server.http.load_tracking import ServerLoad
from server.idle.idle import IdleService

log = logging.getLogger("tandem.search")


class SearchService(IdleService):
    name = "search"

    def __init__(self, memory: MemoryServices, engine: EngineBackend,
                 embedder: Embedder | None = None, load_default: bool = True,
                 qdrant_url: str | None = None,
                 endpoint: tuple[str, str, str | None] | None = None,
                 allowed_roots: tuple[Path, ...] = (), door: ServerLoad | None = None) -> None:
        """`qdrant_url`: a Qdrant server for the points ($TANDEM_QDRANT_URL wins);
        `endpoint`: (base_url, model, api_key_env) of an embeddings endpoint to use
        rather than the packaged model."""
        super().__init__(memory, engine, door)
        self._endpoint = endpoint
        self.qdrant_url = os.environ.get("TANDEM_QDRANT_URL") or qdrant_url
        self._embedder = embedder
        self._load_default = load_default and embedder is None
        self.allowed_roots = allowed_roots
        self._indexes: dict[str, SearchIndex] = {}
        self.stale: set[str] = set()
        self._lock = threading.Lock()

    def embedder(self) -> Embedder | None:
        if self._load_default:
            self._load_default = False
            if self._endpoint is None:
                self._embedder = default_embedder()
            else:
                try:
                    self._embedder = EndpointEmbedder(*self._endpoint)
                except EmbedderError as exc:  # search runs on BM25 alone, and says so
                    log.warning("no dense vectors: %s", exc)
        return self._embedder

    def index(self, user: str) -> SearchIndex:
        with self._lock:
            if user not in self._indexes:
                self._indexes[user] = SearchIndex(
                    self.memory.root, user, self.embedder(), self.qdrant_url,
                    os.environ.get("TANDEM_QDRANT_API_KEY"), self.allowed_roots)
                if self.memory.settings.shared_memory is not None:
                    # replicas: another replica may have written the user's files since
                    # this one last synced, so a user arriving here syncs first
                    self.stale.add(user)
            return self._indexes[user]

    def forget(self, user: str) -> int:
        """The user's delete: no sync of their index due, the index closed (a sync in
        progress finishes first: blocking) and their collections on a Qdrant server
        dropped. Returns how many; embedded Qdrant's files go with the user's layers
        (conductor.memory.erase)."""
        with self._lock:
            self.stale.discard(user)
            index = self._indexes.pop(user, None)
        if index is not None:
            index.close()  # under the index's lock, which a sync holds
        if self.qdrant_url is None:
            return 0
        return drop_user_collections(self.qdrant_url, os.environ.get("TANDEM_QDRANT_API_KEY"),
                                     user)

    def mark_stale(self, user: str | None) -> None:
        if user is not None:
            self.stale.add(user)

    async def tick(self) -> list[SyncReport]:
        """Sync the stale indexes, one at a time, while nobody is waiting."""
        reports = []
        for user in sorted(self.stale):
            if self.client_busy():
                break
            self.stale.discard(user)
            try:
                reports.append(await asyncio.to_thread(self.index(user).sync))
            except SourceError as exc:  # the operator's registry: said in the log, kept off
                log.warning("search sync for a user skipped: %s", exc)
        return self.kept(reports)

    async def search(self, user: str, query: str, mode: str, collection: str | None,
                     limit: int) -> tuple[list[Hit], bool]:
        """(hits, whether dense vectors took part); a first search syncs first."""
        index = self.index(user)

        def run() -> list[Hit]:
            if user in self.stale or index.count() == 0:
                self.stale.discard(user)
                index.sync()
            return index.search(query, mode, collection, limit)

        hits = await asyncio.to_thread(run)
        return hits, index.embedder is not None and mode != "sparse"
