"""The search's figures, measured in one run: `python -m bench.search.run [--quick]`.

* quality: recall@5 of sparse (BM25), dense and hybrid on the labelled set in
  `data/` (55 queries over 26 files: paraphrases that share no content word with
  their answer, exact identifiers, and mixed ones), overall and per kind;
* sync: cold throughput (chunks/s) over 1,000 files, and an unchanged re-sync of them;
* query latency p50/p95 of a hybrid query, its embedding included, at 1k, 10k and 100k
  chunks in the embedded engine (`qdrant-edge-py`), against `qdrant-client`'s local mode.
  The stored vectors there are synthetic (random unit vectors, texts of random words):
  embedding 100k chunks on this CPU would take about half an hour.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.paths import RESULTS_DIR
from conductor.search.embedders import default_embedder
from conductor.search.index import MODES, SearchIndex

DATA = Path(__file__).resolve().parent / "data"
RESULTS = RESULTS_DIR / "search"
RECALL_AT = 5


def say(message: str) -> None:
    print(f"[search bench] {message}", flush=True)


def _registry(root: Path, user: str) -> None:
    """The user's library folder (library/<user>: a source stays in the user's folders)."""
    embed = root / "layers" / user / "embed"
    embed.mkdir(parents=True, exist_ok=True)
    (embed / "sources.json").write_text(json.dumps({"sources": [
        {"id": "lib", "collection": "library", "type": "markdown_tree",
         "path": "library/{user}"}]}))


def quality(root: Path, embedder) -> dict[str, Any]:
    shutil.copytree(DATA / "corpus", root / "library" / "quality")
    _registry(root, "quality")
    index = SearchIndex(root, "quality", embedder)
    index.sync()
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").read_text().splitlines()]
    rows = []
    for q in queries:
        row = {"kind": q["kind"], "query": q["query"]}
        for mode in MODES:
            hits = index.search(q["query"], mode, limit=RECALL_AT)
            found = [(h.path, h.section) for h in hits]
            wanted = (q["path"], q["section"])
            row[mode] = found.index(wanted) + 1 if wanted in found else None
        rows.append(row)
    index.close()

    def recall(mode: str, kind: str | None = None) -> float:
        mine = [r for r in rows if kind is None or r["kind"] == kind]
        return sum(r[mode] is not None for r in mine) / len(mine)

    kinds = sorted({r["kind"] for r in rows})
    table = {mode: {"all": recall(mode), **{k: recall(mode, k) for k in kinds}} for mode in MODES}
    for mode in MODES:
        say(f"recall@{RECALL_AT} {mode}: {table[mode]['all']:.3f} "
            + ", ".join(f"{k} {table[mode][k]:.2f}" for k in kinds))
    return {"queries": len(rows), "recall_at": RECALL_AT, "recall": table, "rows": rows}


def sync_speed(root: Path, embedder, files: int) -> dict[str, Any]:
    """`files` files made from the corpus, each with a line of its own (no two alike)."""
    docs = sorted((DATA / "corpus").glob("*.md"))
    folder = root / "library" / "speed"
    folder.mkdir(parents=True)
    for n in range(files):
        text = docs[n % len(docs)].read_text()
        (folder / f"doc-{n:05d}.md").write_text(text.replace("\n\n", f"\n\nFile {n}.\n\n", 1))
    _registry(root, "speed")
    index = SearchIndex(root, "speed", embedder)
    progress_at = [0.0]

    def progress(phase: str, done: int, total: int) -> None:
        if time.monotonic() - progress_at[0] > 5:
            progress_at[0] = time.monotonic()
            say(f"sync: {phase} {done}/{total} chunks")

    cold = index.sync(progress=progress)
    warm = index.sync()
    index.close()
    out = {"files": files, "chunks": cold.chunks_embedded, "cold_s": cold.seconds,
           "chunks_per_s": cold.chunks_embedded / cold.seconds,
           "unchanged_resync_s": warm.seconds, "unchanged_resync_embedded": warm.chunks_embedded}
    say(f"sync: {files} files, {cold.chunks_embedded} chunks cold in {cold.seconds:.1f} s "
        f"({out['chunks_per_s']:.0f} chunks/s); unchanged re-sync {warm.seconds:.2f} s")
    return out


WORDS = ("deploy release cache token invoice refund replica backup network vault flag build "
         "test load browser bundle api limit page cursor log audit tenant quota error code "
         "session cookie proxy gateway certificate kernel node drain rotate secret review "
         "approval mobile crash rollout search index synonym travel hotel lunch risotto").split()


def _synthetic(n: int, dims: int, seed: int = 7):
    rng = random.Random(seed)
    for i in range(n):
        vector = [rng.gauss(0, 1) for _ in range(dims)]
        norm = sum(v * v for v in vector) ** 0.5
        text = " ".join(rng.choice(WORDS) for _ in range(24)) + f" item{i}"
        yield str(uuid.UUID(int=i + 1)), [v / norm for v in vector], text


QUERIES = ("how do releases reach staging", "E4012 proxy body limit", "rotate the vault secret",
           "tenant export quota", "why did the mobile rollout stop", "cache session cookie")


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": 1000 * statistics.median(ordered),
            "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]}


def edge_latency(root: Path, embedder, size: int, rounds: int) -> dict[str, Any]:
    from conductor.search.stores import Sparse, StoredPoint

    index = SearchIndex(root, f"size{size}", embedder)
    store = index.store()  # the bench fills the store directly with synthetic points
    started = time.perf_counter()
    batch = []
    for point_id, vector, text in _synthetic(size, embedder.dimensions):
        words = index._bm25.embed_document(text)
        batch.append(StoredPoint(point_id, vector, Sparse(list(words.indices), list(words.values)),
                                 {"collection": "library", "path": "synthetic.md",
                                  "section": "", "text": text, "hash": "",
                                  "vector_version": index.version}))
        if len(batch) == 512:
            store.upsert(batch)
            batch = []
    store.upsert(batch)
    store.optimize()  # build the HNSW index, as a long-lived shard has
    load_s = time.perf_counter() - started
    samples = []
    for r in range(rounds):
        query = QUERIES[r % len(QUERIES)]
        t = time.perf_counter()
        index.search(query, "hybrid", limit=10)
        samples.append(time.perf_counter() - t)
    index.close()
    return {"engine": "qdrant-edge", "chunks": size, "load_s": load_s, **_percentiles(samples)}


def client_local_latency(embedder, size: int, rounds: int) -> dict[str, Any]:
    """The same data and query in qdrant-client's local mode (pure Python)."""
    from qdrant_client import QdrantClient, models
    from qdrant_edge import Bm25

    bm25 = Bm25()
    client = QdrantClient(location=":memory:")
    client.create_collection(
        "bench", vectors_config={"dense": models.VectorParams(
            size=embedder.dimensions, distance=models.Distance.COSINE)},
        sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)})
    started = time.perf_counter()
    points = []
    for point_id, vector, text in _synthetic(size, embedder.dimensions):
        sparse = bm25.embed_document(text)
        points.append(models.PointStruct(id=point_id, vector={
            "dense": vector, "bm25": models.SparseVector(indices=sparse.indices,
                                                        values=sparse.values)},
            payload={"text": text}))
        if len(points) == 512:
            client.upsert("bench", points)
            points = []
    if points:
        client.upsert("bench", points)
    load_s = time.perf_counter() - started
    samples = []
    for r in range(rounds):
        query = QUERIES[r % len(QUERIES)]
        t = time.perf_counter()
        dense = embedder.embed([query])[0]
        sparse = bm25.embed_query(query)
        client.query_points("bench", prefetch=[
            models.Prefetch(query=dense, using="dense", limit=40),
            models.Prefetch(query=models.SparseVector(indices=sparse.indices,
                                                      values=sparse.values),
                            using="bm25", limit=40)],
            query=models.FusionQuery(fusion=models.Fusion.RRF), limit=10)
        samples.append(time.perf_counter() - t)
    client.close()
    return {"engine": "qdrant-client local", "chunks": size, "load_s": load_s,
            **_percentiles(samples)}


def run(quick: bool, out: Path) -> dict[str, Any]:
    embedder = default_embedder()
    if embedder is None:
        raise SystemExit("the search bench needs the embedder: make setup installs it")
    results: dict[str, Any] = {"quick": quick, "embedder": embedder.version}
    with tempfile.TemporaryDirectory(prefix="tandem-search-bench-") as tmp:
        root = Path(tmp)
        results["quality"] = quality(root, embedder)
        results["sync"] = sync_speed(root, embedder, 100 if quick else 1000)
        sizes = (1000, 10_000) if quick else (1000, 10_000, 100_000)
        rounds = 20 if quick else 60
        latency = []
        for size in sizes:
            row = edge_latency(root, embedder, size, rounds)
            latency.append(row)
            say(f"edge {size}: loaded in {row['load_s']:.1f} s, hybrid p50 "
                f"{row['p50_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms")
            if size <= 10_000 or not quick:
                local = client_local_latency(embedder, size, max(5, rounds // 6)
                                             if size > 10_000 else rounds)
                latency.append(local)
                say(f"qdrant-client local {size}: loaded in {local['load_s']:.1f} s, p50 "
                    f"{local['p50_ms']:.1f} ms, p95 {local['p95_ms']:.1f} ms")
        results["latency"] = latency
    write(results, out)
    return results


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    q, s = results["quality"], results["sync"]
    kinds = [k for k in q["recall"]["hybrid"] if k != "all"]
    lines = [f"## Tandem search bench ({results['embedder']})", "",
             f"Quality: recall@{q['recall_at']} on {q['queries']} labelled queries", "",
             "| mode | all | " + " | ".join(kinds) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in kinds) + " |"]
    for mode, table in q["recall"].items():
        lines.append(f"| {mode} | {table['all']:.3f} | "
                     + " | ".join(f"{table[k]:.3f}" for k in kinds) + " |")
    lines += ["", f"Sync: {s['files']} files, {s['chunks']} chunks embedded cold in "
              f"{s['cold_s']:.1f} s ({s['chunks_per_s']:.0f} chunks/s); an unchanged re-sync "
              f"{s['unchanged_resync_s']:.2f} s ({s['unchanged_resync_embedded']} embedded).",
              "", "Hybrid query latency, the query's embedding included (synthetic stored "
              "vectors):", "", "| engine | chunks | load s | p50 ms | p95 ms |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for row in results["latency"]:
        lines.append(f"| {row['engine']} | {row['chunks']} | {row['load_s']:.1f} | "
                     f"{row['p50_ms']:.1f} | {row['p95_ms']:.1f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    _plot(results, out / "search_latency.png")


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    recall = results["quality"]["recall"]
    left.bar(list(recall), [recall[m]["all"] for m in recall])
    left.set_ylim(0, 1)
    left.set_title(f"recall@{results['quality']['recall_at']}, {results['quality']['queries']} "
                   "queries")
    for engine in sorted({r["engine"] for r in results["latency"]}):
        rows = [r for r in results["latency"] if r["engine"] == engine]
        right.plot([r["chunks"] for r in rows], [r["p95_ms"] for r in rows], marker="o",
                   label=f"{engine} p95")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("chunks")
    right.set_ylabel("hybrid query, ms")
    right.grid(True, alpha=0.3)
    right.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    run(args.quick, args.out)
