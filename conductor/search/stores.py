"""Where a user's chunks live: Qdrant's engine embedded in the process (`EdgeStore`,
`qdrant-edge-py`: one shard a folder), or a Qdrant server (`ServerStore`, `qdrant-client`:
one collection a user and vector version). The same points, the same queries.

A point: a dense vector under "dense" (when there is an embedder), a BM25 sparse vector
under "bm25" (with the IDF modifier), and its chunk's payload.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from conductor.storage.atomic import ensure_dir, make_private

DENSE, SPARSE = "dense", "bm25"


@dataclass(frozen=True)
class Sparse:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True)
class StoredPoint:
    id: str
    dense: list[float] | None
    sparse: Sparse
    payload: dict[str, Any]


def _by_id(records) -> dict[str, tuple[list[float] | None, Sparse]]:
    """Retrieved records (either engine's) as id -> (dense, sparse)."""
    out = {}
    for record in records:
        sparse = record.vector[SPARSE]
        out[str(record.id)] = (record.vector.get(DENSE),
                               Sparse(list(sparse.indices), list(sparse.values)))
    return out


class IndexBusy(RuntimeError):
    """The index is open in another process (the running server holds its write lock)."""


class VectorStore(Protocol):
    def upsert(self, points: list[StoredPoint]) -> None: ...
    def delete(self, ids: list[str]) -> None: ...
    def vectors(self, ids: list[str]) -> dict[str, tuple[list[float] | None, Sparse]]: ...
    def query(self, dense: list[float] | None, sparse: Sparse, mode: str,
              collection: str | None, limit: int) -> list[tuple[float, dict[str, Any]]]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


class EdgeStore:
    def __init__(self, path: Path, dimensions: int | None) -> None:
        from qdrant_edge import (
            Distance,
            EdgeConfig,
            EdgeShard,
            EdgeSparseVectorParams,
            EdgeVectorParams,
            Modifier,
        )

        if path.exists():
            try:
                self._shard = EdgeShard.load(str(path))
            except Exception as exc:  # the engine says only "Exception": read its words
                if "WouldBlock" in str(exc):
                    raise IndexBusy(f"{path} is open in another process") from None
                raise
        else:
            ensure_dir(path.parent)
            dense = ({DENSE: EdgeVectorParams(size=dimensions, distance=Distance.Cosine)}
                     if dimensions else None)
            self._shard = EdgeShard.create(str(path), EdgeConfig(
                vectors=dense,
                sparse_vectors={SPARSE: EdgeSparseVectorParams(modifier=Modifier.Idf)}))
        self.path = path
        self.make_private()

    def make_private(self) -> None:
        """The engine writes its files with the process's umask; the memory folder's rule
        is files 0600 and folders 0700 (conductor/NOTES_STORE.md)."""
        make_private(self.path)

    def flush(self) -> None:
        """Write the pending changes (new segment files) to disk, private."""
        self._shard.flush()
        self.make_private()

    def upsert(self, points: list[StoredPoint]) -> None:
        from qdrant_edge import Point, SparseVector, UpdateOperation

        def vector(p: StoredPoint) -> dict[str, Any]:
            out: dict[str, Any] = {SPARSE: SparseVector(p.sparse.indices, p.sparse.values)}
            if p.dense is not None:
                out[DENSE] = p.dense
            return out

        if points:
            self._shard.update(UpdateOperation.upsert_points(
                [Point(p.id, vector(p), p.payload) for p in points]))

    def delete(self, ids: list[str]) -> None:
        from qdrant_edge import UpdateOperation

        if ids:
            self._shard.update(UpdateOperation.delete_points(ids))

    def vectors(self, ids: list[str]) -> dict[str, tuple[list[float] | None, Sparse]]:
        return _by_id(self._shard.retrieve(ids, with_payload=False, with_vector=True))

    def query(self, dense: list[float] | None, sparse: Sparse, mode: str,
              collection: str | None, limit: int) -> list[tuple[float, dict[str, Any]]]:
        from qdrant_edge import (
            FieldCondition,
            Filter,
            MatchValue,
            Query,
            QueryRequest,
            SparseVector,
        )

        where = (Filter(must=[FieldCondition(key="collection",
                                             match=MatchValue(value=collection))])
                 if collection else None)
        by_words = Query.Nearest(SparseVector(sparse.indices, sparse.values), using=SPARSE)
        # hybrid is fused by the caller (conductor/search/fusion.py) from these two
        if dense is None or mode == "sparse":
            request = QueryRequest(limit=limit, query=by_words, filter=where, with_payload=True)
        else:
            request = QueryRequest(limit=limit, query=Query.Nearest(dense, using=DENSE),
                                   filter=where, with_payload=True)
        return [(float(p.score), p.payload) for p in self._shard.query(request)]

    def count(self) -> int:
        from qdrant_edge import CountRequest

        return self._shard.count(CountRequest())

    def close(self) -> None:
        self._shard.flush()
        self._shard.close()
        self.make_private()

    def optimize(self) -> None:
        self._shard.optimize()
        self.make_private()


def collection_name(user: str, version: str) -> str:
    """One user's collection for one vector version on a Qdrant server. The user is a
    fixed-length hash (names a collection may hold would fold `alice.b` and `alice-b`
    into one), so `user_prefix` names this user's collections and no one else's."""
    return user_prefix(user) + re.sub(r"[^A-Za-z0-9_-]+", "-", version)


def user_prefix(user: str) -> str:
    digest = hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"tandem-u{digest}-"


def drop_user_collections(url: str, api_key: str | None, user: str) -> int:
    """The user's delete: every collection of `user` on a Qdrant server (each vector
    version's), found by `user_prefix`. Returns how many went."""
    from qdrant_client import QdrantClient

    local = url == ":memory:" or not url.startswith(("http://", "https://"))
    client = (QdrantClient(location=url) if url == ":memory:" else QdrantClient(path=url)
              if local else QdrantClient(url=url, api_key=api_key))
    try:
        mine = [c.name for c in client.get_collections().collections
                if c.name.startswith(user_prefix(user))]
        for name in mine:
            client.delete_collection(name)
        return len(mine)
    finally:
        client.close()


class ServerStore:
    """The same data model in a Qdrant server's collection (or `qdrant-client`'s local
    mode when `url` is ":memory:" or a path: the same client code, for tests)."""

    def __init__(self, url: str, collection: str, dimensions: int | None,
                 api_key: str | None = None) -> None:
        from qdrant_client import QdrantClient, models

        self._models = models
        self.collection = collection
        if url == ":memory:" or not url.startswith(("http://", "https://")):
            self._client = QdrantClient(location=url) if url == ":memory:" else QdrantClient(
                path=url)
        else:
            self._client = QdrantClient(url=url, api_key=api_key)
        self._dimensions = dimensions
        # Made here: whatever a local manifest says, the collection holds no point yet.
        self.created = not self._client.collection_exists(collection)
        if self.created:
            self._create()

    def _create(self) -> None:
        models = self._models
        dense = ({DENSE: models.VectorParams(size=self._dimensions,
                                             distance=models.Distance.COSINE)}
                 if self._dimensions else {})
        sparse = {SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)}
        self._client.create_collection(self.collection, vectors_config=dense,
                                       sparse_vectors_config=sparse)

    def clear(self) -> None:
        """Every point gone: the collection dropped and made again."""
        self._client.delete_collection(self.collection)
        self._create()

    def _sparse(self, sparse: Sparse):
        return self._models.SparseVector(indices=sparse.indices, values=sparse.values)

    def upsert(self, points: list[StoredPoint]) -> None:
        m = self._models
        if points:
            self._client.upsert(self.collection, [m.PointStruct(
                id=p.id, payload=p.payload,
                vector={SPARSE: self._sparse(p.sparse),
                        **({DENSE: p.dense} if p.dense is not None else {})})
                for p in points])

    def delete(self, ids: list[str]) -> None:
        if ids:
            self._client.delete(self.collection,
                                points_selector=self._models.PointIdsList(points=ids))

    def vectors(self, ids: list[str]) -> dict[str, tuple[list[float] | None, Sparse]]:
        return _by_id(self._client.retrieve(self.collection, ids, with_vectors=True))

    def query(self, dense: list[float] | None, sparse: Sparse, mode: str,
              collection: str | None, limit: int) -> list[tuple[float, dict[str, Any]]]:
        m = self._models
        where = (m.Filter(must=[m.FieldCondition(key="collection",
                                                 match=m.MatchValue(value=collection))])
                 if collection else None)
        if dense is None or mode == "sparse":
            found = self._client.query_points(self.collection, query=self._sparse(sparse),
                                              using=SPARSE, query_filter=where, limit=limit)
        else:  # dense; hybrid is fused by the caller (conductor/search/fusion.py)
            found = self._client.query_points(self.collection, query=dense, using=DENSE,
                                              query_filter=where, limit=limit)
        return [(float(p.score), p.payload or {}) for p in found.points]

    def count(self) -> int:
        return self._client.count(self.collection).count

    def close(self) -> None:
        self._client.close()

    def drop_other_versions(self, user: str) -> list[str]:
        """Collections of this user's earlier vector versions (a migration's leftovers)."""
        prefix = user_prefix(user)
        stale = [c.name for c in self._client.get_collections().collections
                 if c.name.startswith(prefix) and c.name != self.collection]
        for name in stale:
            self._client.delete_collection(name)
        return stale
