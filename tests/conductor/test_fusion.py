"""Hybrid search's fusion: dense leads, an exact match BM25 ranks first still rises, a hit
both rankings hold is one hit, and the served rule is the one the held-out bench scored."""

from __future__ import annotations

import json

from bench.paths import RESULTS_DIR
from bench.search.fusion import RRF
from conductor.search.fusion import DENSE_WEIGHT, RRF_K, SPARSE_WEIGHT, fused


def hits(*names: str) -> list[tuple[float, dict]]:
    return [(1.0 - n / 100, {"source": "s", "path": f"{name}.md", "section": "",
                             "hash": name}) for n, name in enumerate(names)]


def paths(found) -> list[str]:
    return [payload["path"].removesuffix(".md") for _, payload in found]


def test_dense_leads_where_bm25_matches_only_common_words():
    found = fused(hits("meaning", "b", "c", "d", "e"), hits("x", "y", "z", "b"), 5)
    assert paths(found)[0] == "meaning"
    assert "x" not in paths(found)[:3], "a lone BM25 hit does not outrank dense's top three"


def test_an_identifier_bm25_ranks_first_and_dense_second_comes_first():
    found = fused(hits("look-alike", "E4012", "c"), hits("E4012", "other"), 3)
    assert paths(found)[0] == "E4012"


def test_a_hit_in_both_rankings_is_one_hit_and_limit_holds():
    found = fused(hits("a", "b", "c"), hits("b", "a", "c"), 2)
    assert paths(found) == ["a", "b"] and len(found) == 2
    assert found[0][0] == DENSE_WEIGHT / RRF_K + SPARSE_WEIGHT / (RRF_K + 1)


def test_the_served_rule_is_the_one_the_committed_held_out_run_chose():
    results = json.loads((RESULTS_DIR / "search-held-out" / "results.json").read_text())
    chosen = results["embedders"]["minilm"]["chosen"]
    assert chosen == RRF(RRF_K, DENSE_WEIGHT / SPARSE_WEIGHT).name
    assert results["embedders"]["minilm"]["chosen_holds_on_dev"]


def test_the_served_fusion_ranks_as_the_bench_s_formula():
    dense, sparse = hits("a", "b", "c", "d", "e", "f"), hits("f", "e", "x", "a")
    bench = RRF(RRF_K, DENSE_WEIGHT / SPARSE_WEIGHT).fuse(
        [(p["path"], s) for s, p in dense], [(p["path"], s) for s, p in sparse])
    assert [p["path"] for _, p in fused(dense, sparse, 7)] == bench[:7]
