"""Hybrid search over a user's memory: the index, its collections and embedders.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/search/`, and nothing deeper."""

from __future__ import annotations

from conductor.search.embedders import (
    Embedder,
    EmbedderError,
    EndpointEmbedder,
    default_embedder,
)
from conductor.search.index import MODES, Hit, SearchIndex, SyncReport
from conductor.search.sources import COLLECTIONS, Registry, SourceError
from conductor.search.stores import IndexBusy, drop_user_collections

__all__ = [
    "COLLECTIONS",
    "Embedder",
    "EmbedderError",
    "EndpointEmbedder",
    "Hit",
    "IndexBusy",
    "MODES",
    "Registry",
    "SearchIndex",
    "SourceError",
    "SyncReport",
    "default_embedder",
    "drop_user_collections",
]
