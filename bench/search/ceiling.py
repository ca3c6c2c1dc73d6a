"""What any fusion of the two rankings could reach, and what changes that bound.

A fusion rule only reorders the hits the dense and BM25 rankings hold. So the best
recall@10 *any* rule could reach is bounded by their union: a question's evidence found
in the union, at most 10 of it (one hit holds at most one evidence side: a side is its
own section). `ceiling` measures, per set:

* `either_at10`: the better of the two modes chosen per question, knowing the answer (the
  best a per-query choice of one mode could do);
* `union10_at10`: the best reordering of the two top 10s (20 hits at most) into 10;
* `union50_at10`: the best reordering of the two 50-deep lists (what the served fusion
  reads) into 10: **no fusion of these rankings can beat it**;
* `union50_recall`: the share of evidence in the 50-deep union at all.

`variants` asks what moves the bound on LoCoMo: the same questions over the other ways
of laying a chat out as turns (`external_sets.LAYOUTS`) and a larger embedder
(all-mpnet-base-v2, from the package registry), each scored as the server would serve
it (the served hybrid) beside its ceiling. all-mpnet-base-v2 embeds about six times
slower than MiniLM on this machine's two cores, so it is scored on LoCoMo's first two
conversations (788 messages, 231 questions), beside MiniLM on the same two.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from bench.search.embed_cache import CachedEmbedder
from bench.search.external_sets import public, rank_public, texts_of
from bench.search.held_out import CUTS, Case, table

MEASURES = ("either_at10", "union10_at10", "union50_at10", "union50_recall")
SUBSET = 2  # conversations the larger embedder is scored on
# name: (layout, embedder, conversations: all or the first SUBSET); "pairs minilm" is the
# served one (the main run's rankings)
VARIANTS: dict[str, tuple[str, str, int | None]] = {
    "pairs minilm": ("pairs", "minilm", None),
    "single minilm": ("single", "minilm", None),
    "neighbour minilm": ("neighbour", "minilm", None),
    f"pairs minilm first {SUBSET}": ("pairs", "minilm", SUBSET),
    f"pairs mpnet first {SUBSET}": ("pairs", "mpnet", SUBSET),
}


def _found(case: Case, keys: list[Hashable]) -> int:
    """How many of the question's evidence sides one of `keys` holds."""
    return sum(any(match(key) for key in keys) for match in case.evidence)


def bounds(case: Case) -> dict[str, float]:
    """The question's ceilings (`MEASURES`)."""
    n = len(case.evidence)
    dense, sparse = [k for k, _ in case.dense], [k for k, _ in case.sparse]
    union10 = list(dict.fromkeys([*dense[:10], *sparse[:10]]))
    union50 = list(dict.fromkeys([*dense, *sparse]))
    in50 = _found(case, union50)
    return {"either_at10": max(case.recall(dense, 10), case.recall(sparse, 10)),
            "union10_at10": min(_found(case, union10), 10) / n,
            "union50_at10": min(in50, 10) / n,
            "union50_recall": in50 / n}


def ceiling(cases: list[Case]) -> dict[str, dict[str, float]]:
    """{"<set>/<split>": {measure: mean over its questions}}, "all" splits included."""
    cells: dict[str, list[dict[str, float]]] = {}
    for case in cases:
        row = bounds(case)
        for split in dict.fromkeys((case.split, "all")):
            cells.setdefault(f"{case.set}/{split}", []).append(row)
    return {cell: {m: statistics.fmean(r[m] for r in rows) for m in MEASURES}
            for cell, rows in sorted(cells.items())}


def row(cases: list[Case], cell: str = "locomo/all") -> dict[str, float]:
    """A variant's line: each mode's and the served hybrid's recall, and the ceilings."""
    figures = table(cases, ["sparse", "dense", "hybrid"])
    out = {f"{rule}@{cut}": figures[rule][f"{cell}@{cut}"]
           for rule in ("sparse", "dense", "hybrid") for cut in CUTS}
    return out | ceiling(cases)[cell]


def variants(base: Path, served: list[Case], embedders: dict[str, Callable[[], Any]],
             names: list[str], say: Callable[[str], None] = print) -> dict[str, Any]:
    """Each variant of `names` on LoCoMo: {name: {layout, embedder, conversations, turns,
    questions, seconds, figures}}.
    `served` is the main run's LoCoMo (pairs, MiniLM), scored again, not ranked again."""
    out: dict[str, Any] = {}
    made: dict[str, Any] = {}
    for name in names:
        layout, model, limit = VARIANTS[name]
        start = time.perf_counter()
        if name == "pairs minilm":
            cases, turns = served, None
        else:
            if model not in made:
                made[model] = CachedEmbedder(embedders[model]())
            embedder = made[model]
            root = base / name.replace(" ", "-")
            laid = public("locomo", root, layout, limit)
            fresh = embedder.prefill(texts_of(root, [user for user, _, _ in laid]), say)
            say(f"{name}: {fresh} chunks embedded")
            cases, info = rank_public("locomo", root, laid, embedder, say)
            turns = info["turns"]
        out[name] = {"layout": layout, "embedder": model, "conversations": limit or "all",
                     "turns": turns, "questions": len(cases),
                     "seconds": round(time.perf_counter() - start, 1),
                     "figures": row(cases)}
        say(f"{name}: hybrid@10 {out[name]['figures']['hybrid@10']:.3f}, ceiling "
            f"{out[name]['figures']['union50_at10']:.3f}")
    for embedder in made.values():
        embedder.close()
    return out
