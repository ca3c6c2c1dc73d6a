"""One user's search index: their sources' chunks in an embedded Qdrant shard (Qdrant's
own engine in-process, `qdrant-edge-py`), a dense vector and a BM25 sparse vector each.

``layers/<user>/embed/index/<vector version>/``: ``shard/`` and ``manifest.json`` (each
indexed file's size, mtime and chunks). One folder a vector version: a new embedder
builds a new index from the files and the old one is removed only once it is complete,
so vectors of two embedders are never mixed.

Sync is incremental: an unchanged file is skipped on its size and mtime; in a changed
file, a chunk whose text is unchanged keeps its point; a chunk that moved to another file
(a rename) is re-pointed with its vectors, not embedded again; what is gone is deleted.
A sync that died half-way (``sync.pending`` still there) is followed by a full rebuild:
the store may hold points that no manifest lists.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor.search.chunks import Chunk, split_markdown
from conductor.search.embedders import Embedder
from conductor.search.fusion import depth, fused
from conductor.search.sources import Registry, Source, load_sources
from conductor.search.stores import (
    EdgeStore,
    ServerStore,
    Sparse,
    StoredPoint,
    VectorStore,
    collection_name,
)
from conductor.storage.atomic import atomic_write, remove_file
from conductor.storage.paths import index_home

MODES = ("hybrid", "dense", "sparse")
UPSERT_BATCH = 64
SYNC_MARK = "sync.pending"  # there while a sync changes the store: a crash leaves it
Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class Hit:
    collection: str
    path: str
    section: str
    score: float
    text: str
    source: str = ""  # the registry source's id: with `path`, what memory_read takes

    @property
    def ref(self) -> str:
        """`<source>/<path>#<section>`: the ref `memory_read` reads this hit's section by."""
        return f"{self.source}/{self.path}" + (f"#{self.section}" if self.section else "")


@dataclass
class SyncReport:
    files_seen: int = 0
    files_changed: int = 0
    files_removed: int = 0
    chunks_embedded: int = 0
    chunks_kept: int = 0
    chunks_repointed: int = 0
    chunks_deleted: int = 0
    seconds: float = 0.0
    rebuilt_after_crash: bool = False
    migrated_from: list[str] = field(default_factory=list)


def chunk_text(chunk: Chunk) -> str:
    """What a chunk's vectors are made of: its heading trail, then its text (a title-only
    note's chunk: its title alone)."""
    return "\n".join(part for part in (chunk.section, chunk.text) if part)


def _slug(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", version)


class SearchIndex:
    """Not safe across processes writing at once: one server syncs a user's index.
    `qdrant_url`: keep the points in a Qdrant server rather than in the process."""

    def __init__(self, root: Path, user: str, embedder: Embedder | None,
                 qdrant_url: str | None = None, qdrant_api_key: str | None = None,
                 allowed_roots: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.allowed_roots = allowed_roots  # the profile's memory.search.allowed_roots
        self.user = user
        self.embedder = embedder
        self.qdrant_url = qdrant_url
        self._api_key = qdrant_api_key
        self.embed_dir = root / "layers" / user / "embed"
        self.version = embedder.version if embedder is not None else "bm25-only"
        # derived: this replica's own folder when replicas share the notes (paths.py)
        self.index_dir = index_home(root) / "layers" / user / "embed" / "index"
        self.dir = self.index_dir / _slug(self.version)
        self._store: VectorStore | None = None
        self._bm25: Any = None
        self._lock = threading.RLock()

    def store(self) -> VectorStore:
        from qdrant_edge import Bm25

        if self._store is None:
            dims = self.embedder.dimensions if self.embedder is not None else None
            if self.qdrant_url is None:
                self._store = EdgeStore(self.dir / "shard", dims)
            else:
                self._store = ServerStore(self.qdrant_url,
                                          collection_name(self.user, self.version), dims,
                                          self._api_key)
            self._bm25 = Bm25()
        return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def registry(self) -> Registry:
        return load_sources(self.root, self.user, self.embed_dir, self.allowed_roots)

    # -- sync -------------------------------------------------------------------------------
    def _manifest(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads((self.dir / "manifest.json").read_text())
        except (OSError, ValueError):
            return {}

    def _clear(self) -> VectorStore:
        """An empty store in place of this version's: every file is embedded again."""
        store = self.store()
        if isinstance(store, ServerStore):
            store.clear()
            return store
        store.close()
        self._store = None
        shutil.rmtree(self.dir / "shard", ignore_errors=True)
        return self.store()

    def stale_versions(self) -> list[str]:
        folder = self.index_dir
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and p != self.dir)

    def sync(self, source_id: str | None = None, progress: Progress | None = None) -> SyncReport:
        """Bring the index up to date with the files; SourceError for a bad registry,
        KeyError for an unknown source id."""
        started = time.perf_counter()
        sources = self.registry().sources
        if source_id is not None:
            sources = tuple(s for s in sources if s.id == source_id)
            if not sources:
                raise KeyError(source_id)
        report = SyncReport()
        with self._lock:
            store = self.store()
            manifest = self._manifest()
            if isinstance(store, ServerStore) and store.created:
                manifest, store.created = {}, False  # a new collection: every file again
            if (self.dir / SYNC_MARK).exists():  # a sync died half-way: start afresh
                store, manifest = self._clear(), {}
                report.rebuilt_after_crash = True
            # Points are upserted before the manifest names them: should the process die
            # in between, the mark says the store may hold points no manifest lists.
            atomic_write(self.dir / SYNC_MARK, "", kind="sync_mark")
            for source in sources:
                manifest[source.id] = self._sync_source(store, source,
                                                        manifest.get(source.id, {}),
                                                        report, progress)
            if source_id is None:  # sources no longer in the registry: their chunks go
                for gone in [s for s in manifest if s not in {x.id for x in sources}]:
                    ids = [c[0] for f in manifest.pop(gone).values() for c in f["chunks"]]
                    store.delete(ids)
                    report.chunks_deleted += len(ids)
            if isinstance(store, EdgeStore):  # its files on disk, 0600/0700, not the umask's
                store.flush()
            atomic_write(self.dir / "manifest.json", json.dumps(manifest) + "\n", kind="sync")
            remove_file(self.dir / SYNC_MARK, kind="sync")
            if source_id is None:  # complete under this version: older ones can go
                for stale in self.stale_versions():
                    shutil.rmtree(self.index_dir / stale, ignore_errors=True)
                    report.migrated_from.append(stale)
                if isinstance(store, ServerStore):
                    store.drop_other_versions(self.user)
        report.seconds = time.perf_counter() - started
        return report

    def _sync_source(self, store: VectorStore, source: Source, old: dict[str, Any],
                     report: SyncReport, progress: Progress | None) -> dict[str, Any]:
        files = source.files()
        report.files_seen += len(files)
        current = {rel for rel, _ in files}
        new_manifest: dict[str, Any] = {}
        changed: list[tuple[str, Path, Any]] = []
        for rel, path in files:
            stat = path.stat()
            entry = old.get(rel)
            if entry and entry["mtime_ns"] == stat.st_mtime_ns and entry["size"] == stat.st_size:
                new_manifest[rel] = entry
            else:
                changed.append((rel, path, stat))
        gone = [rel for rel in old if rel not in current]
        # Chunks of changed and removed files, by text: a rename finds its vectors here.
        loose: dict[str, list[str]] = {}
        for rel in [*gone, *(r for r, _, _ in changed)]:
            for point_id, chunk_hash in old.get(rel, {}).get("chunks", []):
                loose.setdefault(chunk_hash, []).append(point_id)
        to_embed: list[tuple[str, str, Chunk]] = []  # (point id, rel, chunk)
        to_move: list[tuple[str, str, str, Chunk]] = []  # (old id, new id, rel, chunk)
        used: set[str] = set()
        for rel, path, stat in changed:
            chunks = split_markdown(source.read(path),
                                    whole=source.type == "chunked_markdown_tree")
            mine = {h: i for i, h in old.get(rel, {}).get("chunks", [])}
            entries = []
            for chunk in chunks:
                kept = mine.get(chunk.hash)
                if kept is not None and kept not in used:  # the same text, the same file
                    used.add(kept)
                    report.chunks_kept += 1
                    entries.append([kept, chunk.hash])
                    continue
                donors = [i for i in loose.get(chunk.hash, []) if i not in used]
                point_id = str(uuid.uuid4())
                if donors:
                    used.add(donors[0])
                    to_move.append((donors[0], point_id, rel, chunk))
                else:
                    to_embed.append((point_id, rel, chunk))
                entries.append([point_id, chunk.hash])
            new_manifest[rel] = {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size,
                                 "chunks": entries}
        report.files_changed += len(changed)
        report.files_removed += len(gone)
        self._move(store, source, to_move)
        report.chunks_repointed += len(to_move)
        self._embed(store, source, to_embed, progress)
        report.chunks_embedded += len(to_embed)
        dropped = [i for ids in loose.values() for i in ids if i not in used]
        store.delete(dropped)
        report.chunks_deleted += len(dropped)
        return new_manifest

    def _payload(self, source: Source, rel: str, chunk: Chunk) -> dict[str, Any]:
        return {"collection": source.collection, "source": source.id, "path": rel,
                "section": chunk.section, "text": chunk.text, "hash": chunk.hash,
                "vector_version": self.version}

    def _points(self, source: Source, items: list[tuple[str, str, Chunk]]) -> list[StoredPoint]:
        texts = [chunk_text(c) for _, _, c in items]
        dense = self.embedder.embed(texts) if self.embedder is not None else [None] * len(texts)
        points = []
        for (point_id, rel, chunk), text, vector in zip(items, texts, dense, strict=True):
            sparse = self._bm25.embed_document(text)
            points.append(StoredPoint(point_id, vector, Sparse(list(sparse.indices),
                                                                list(sparse.values)),
                                      self._payload(source, rel, chunk)))
        return points

    def _embed(self, store: VectorStore, source: Source, items: list[tuple[str, str, Chunk]],
               progress: Progress | None) -> None:
        for start in range(0, len(items), UPSERT_BATCH):
            batch = items[start:start + UPSERT_BATCH]
            store.upsert(self._points(source, batch))
            if progress is not None:
                progress(f"embedding {source.id}", start + len(batch), len(items))

    def _move(self, store: VectorStore, source: Source,
              moves: list[tuple[str, str, str, Chunk]]) -> None:
        """Re-point moved chunks: their vectors under new ids, with the new path."""
        if not moves:
            return
        vectors = store.vectors([m[0] for m in moves])
        store.upsert([StoredPoint(new_id, *vectors[old_id], self._payload(source, rel, chunk))
                      for old_id, new_id, rel, chunk in moves if old_id in vectors])
        store.delete([m[0] for m in moves])

    # -- search -----------------------------------------------------------------------------
    def search(self, query: str, mode: str = "hybrid", collection: str | None = None,
               limit: int = 10) -> list[Hit]:
        """Hybrid: the dense and BM25 rankings fused by the mean of their z-scored
        scores (`conductor/search/fusion.py`); without an embedder every mode runs on
        BM25 (`self.embedder is None` tells the caller)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        with self._lock:
            store = self.store()
            words = self._bm25.embed_query(query)
            sparse = Sparse(list(words.indices), list(words.values))
            dense = (self.embedder.embed([query])[0]
                     if self.embedder is not None and mode != "sparse" else None)
            if mode == "hybrid" and dense is not None:
                deep = depth(limit)
                found = fused(store.query(dense, sparse, "dense", collection, deep),
                              store.query(dense, sparse, "sparse", collection, deep), limit)
            else:
                found = store.query(dense, sparse, mode, collection, limit)
        return [Hit(p["collection"], p["path"], p["section"], score, p["text"],
                    p.get("source", ""))
                for score, p in found]

    def count(self) -> int:
        with self._lock:
            return self.store().count()
