"""An embedder that keeps every vector it made on disk, by its text's hash, so a second
run of the search benches embeds only what is new (thousands of turns take minutes on
two cores). Outside git: `~/.cache/tandem/search-bench/<version>.sqlite` unless
`$TANDEM_BENCH_CACHE` names another folder. The vectors are the wrapped embedder's,
bit for bit (float32 as the model computes them): the index cannot tell the difference.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
from array import array
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("TANDEM_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tandem" / "search-bench"


class CachedEmbedder:
    """`embed` as the wrapped embedder's, from the cache where the text was seen before."""

    def __init__(self, inner, folder: Path | None = None) -> None:
        self.inner = inner
        self.version = inner.version
        self.dimensions = inner.dimensions
        folder = folder or cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", self.version)
        self._db = sqlite3.connect(folder / f"{name}.sqlite", check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS v (k BLOB PRIMARY KEY, vec BLOB)")
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def embed(self, texts: list[str]) -> list[list[float]]:
        keys = [self._key(t) for t in texts]
        with self._lock:
            found: dict[bytes, list[float]] = {}
            for start in range(0, len(keys), 500):
                part = keys[start:start + 500]
                rows = self._db.execute(
                    f"SELECT k, vec FROM v WHERE k IN ({','.join('?' * len(part))})", part)
                found |= {k: array("f", vec).tolist() for k, vec in rows}
            missing = [i for i, k in enumerate(keys) if k not in found]
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            if missing:
                made = self.inner.embed([texts[i] for i in missing])
                for i, vector in zip(missing, made, strict=True):
                    found[keys[i]] = vector
                self._db.executemany("INSERT OR REPLACE INTO v VALUES (?, ?)",
                                     [(keys[i], array("f", found[keys[i]]).tobytes())
                                      for i in missing])
                self._db.commit()
            return [found[k] for k in keys]

    def prefill(self, texts: list[str], say=print, batch: int = 256) -> int:
        """Embed the texts not cached yet, shortest first (a batch pads to its longest
        text, so like lengths together cost least); how many were made."""
        seen = set()
        todo = []
        for text in texts:
            key = self._key(text)
            if key not in seen:
                seen.add(key)
                todo.append(text)
        with self._lock:
            cached = {k for (k,) in self._db.execute("SELECT k FROM v")}
        todo = sorted((t for t in todo if self._key(t) not in cached), key=len)
        for start in range(0, len(todo), batch):
            self.embed(todo[start:start + batch])
            say(f"embedded {min(start + batch, len(todo))}/{len(todo)} new chunks")
        return len(todo)

    def close(self) -> None:
        with self._lock:
            self._db.close()
