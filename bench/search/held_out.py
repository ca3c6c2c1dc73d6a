"""Search quality on held-out questions: `python -m bench.search.held_out [--embedders
minilm,mpnet] [--out DIR]` (default `bench/results/search-held-out/`).

Two sets, each split in `dev` (what a rule is chosen on) and `test` (what is reported):

* conversational (`conversations.py`): 8 multi-session conversations as history turns,
  ~290 questions of five kinds, split by topic;
* the first set (`data/`): 55 queries over Markdown files, split by a seeded shuffle.

For each embedder: sparse (BM25) and dense rankings of every question, 50 deep, then
every fusion rule of `fusion.candidates()` over those rankings, recall@5 and @10 (a
question's recall: the share of its evidence found, a speaker's side when it names
one). The rule chosen is the one with the best mean dev recall among those at least as
good as the better single mode in every dev cell (both sets, at 5 and 10); its test
figures are the ones to quote. Also the cost: seconds to index 1,000 turns, and a
query's embedding p50/p95.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.paths import RESULTS_DIR
from bench.report import cpu_model
from bench.search import fusion
from bench.search.conversations import build_all
from bench.search.held_out_report import write
from conductor.search.index import SearchIndex

DATA = Path(__file__).resolve().parent / "data"
RESULTS = RESULTS_DIR / "search-held-out"
DEPTH = 50
CUTS = (5, 10)
SETS = ("conversational", "first")


def say(message: str) -> None:
    print(f"[held-out] {message}", flush=True)


@dataclass
class Case:
    set: str
    split: str
    kind: str
    query: str
    evidence: list[Callable[[Hashable], bool]]
    dense: fusion.Ranking = field(default_factory=list)
    sparse: fusion.Ranking = field(default_factory=list)
    hybrid: list[Hashable] = field(default_factory=list)  # as served: Qdrant's fusion

    def recall(self, ranked: list[Hashable], cut: int) -> float:
        top = ranked[:cut]
        return sum(any(match(key) for key in top) for match in self.evidence) / len(
            self.evidence)


def _rank(index: SearchIndex, case: Case, collection: str | None) -> None:
    for mode in ("dense", "sparse"):
        hits = index.search(case.query, mode, collection, DEPTH)
        setattr(case, mode, [((h.path, h.section), h.score) for h in hits])
    case.hybrid = [(h.path, h.section) for h in index.search(case.query, "hybrid",
                                                             collection, max(CUTS))]


def _turn_side(rel: str, side: str) -> Callable[[Hashable], bool]:
    return lambda key: key[0] == rel and (side == "turn" or key[1].endswith(f"> {side}"))


def conversational(root: Path, embedder) -> tuple[list[Case], dict[str, float]]:
    questions = build_all(root)
    cases, seconds, turns = [], 0.0, 0
    for user in sorted({q.conversation for q in questions}):
        index = SearchIndex(root, user, embedder)
        report = index.sync()
        seconds += report.seconds
        turns += report.files_seen
        for q in (q for q in questions if q.conversation == user):
            case = Case("conversational", q.split, q.kind, q.query,
                        [_turn_side(rel, side) for rel, side in q.evidence])
            _rank(index, case, "history")
            cases.append(case)
        index.close()
    say(f"conversational: {len(cases)} questions over {turns} turns, indexed in "
        f"{seconds:.1f} s")
    return cases, {"turns": turns, "index_s": seconds, "s_per_1000_turns": seconds / turns * 1000}


def first_set(root: Path, embedder) -> list[Case]:
    shutil.copytree(DATA / "corpus", root / "library" / "first")
    embed = root / "layers" / "first" / "embed"
    embed.mkdir(parents=True, exist_ok=True)
    (embed / "sources.json").write_text(json.dumps({"sources": [
        {"id": "lib", "collection": "library", "type": "markdown_tree",
         "path": "library/{user}"}]}))
    index = SearchIndex(root, "first", embedder)
    index.sync()
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").read_text().splitlines()]
    order = list(range(len(queries)))
    random.Random("tandem-first-set-split").shuffle(order)
    dev = set(order[: len(order) // 2])
    cases = []
    for n, q in enumerate(queries):
        wanted = (q["path"], q["section"])
        case = Case("first", "dev" if n in dev else "test", q["kind"], q["query"],
                    [lambda key, wanted=wanted: key == wanted])
        _rank(index, case, None)
        cases.append(case)
    index.close()
    return cases


def _ranked(case: Case, rule) -> list[Hashable]:
    if rule == "dense":
        return [key for key, _ in case.dense]
    if rule == "sparse":
        return [key for key, _ in case.sparse]
    if rule == "hybrid":
        return case.hybrid
    return rule.fuse(case.dense, case.sparse)


def table(cases: list[Case], rules: list) -> dict[str, dict[str, float]]:
    """{rule name: {"<set>/<split>@<cut>": recall}}."""
    out: dict[str, dict[str, float]] = {}
    for rule in rules:
        name = rule if isinstance(rule, str) else rule.name
        cells: dict[str, list[float]] = {}
        for case in cases:
            ranked = _ranked(case, rule)
            for cut in CUTS:
                for split in (case.split, "all"):
                    cells.setdefault(f"{case.set}/{split}@{cut}", []).append(
                        case.recall(ranked, cut))
        out[name] = {cell: statistics.fmean(values) for cell, values in sorted(cells.items())}
    return out


def by_kind(cases: list[Case], rules: list, split: str = "test") -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for rule in rules:
        name = rule if isinstance(rule, str) else rule.name
        kinds: dict[str, list[float]] = {}
        for case in (c for c in cases if c.set == "conversational" and c.split == split):
            kinds.setdefault(case.kind, []).append(case.recall(_ranked(case, rule), 10))
        out[name] = {k: statistics.fmean(v) for k, v in sorted(kinds.items())}
    return out


def choose(figures: dict[str, dict[str, float]]) -> tuple[str, bool]:
    """The rule with the best mean dev recall among those at least as good as the better
    single mode in every dev cell; (name, whether any rule met that)."""
    cells = [f"{s}/dev@{cut}" for s in SETS for cut in CUTS]
    best_single = {c: max(figures["dense"][c], figures["sparse"][c]) for c in cells}
    rules = [n for n in figures if n not in ("dense", "sparse", "hybrid")]

    def margin(name: str) -> float:
        return min(figures[name][c] - best_single[c] for c in cells)

    def mean(name: str) -> float:
        return statistics.fmean(figures[name][c] for c in cells)

    holding = [n for n in rules if margin(n) >= 0]
    if holding:
        return max(holding, key=mean), True
    return max(rules, key=margin), False


def query_cost(embedder, queries: list[str]) -> dict[str, float]:
    times = []
    for query in queries:
        start = time.perf_counter()
        embedder.embed([query])
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {"embed_p50_ms": times[len(times) // 2],
            "embed_p95_ms": times[int(len(times) * 0.95)]}


def run(embedders: dict[str, Any], out: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"depth": DEPTH, "cuts": CUTS, "embedders": {},
                               "environment": {"cpu": cpu_model()}}
    rules = ["dense", "sparse", "hybrid", *fusion.candidates()]
    for name, make in embedders.items():
        say(f"embedder {name}")
        embedder = make()
        with tempfile.TemporaryDirectory() as tmp:
            convo, cost = conversational(Path(tmp) / "c", embedder)
            first = first_set(Path(tmp) / "f", embedder)
        cases = convo + first
        figures = table(cases, rules)
        chosen, holds = choose(figures)
        cost |= query_cost(embedder, [c.query for c in cases[:200]])
        results["embedders"][name] = {
            "version": embedder.version, "cost": cost, "figures": figures,
            "chosen": chosen, "chosen_holds_on_dev": holds,
            "test_by_kind_at_10": by_kind(cases, ["dense", "sparse",
                                                  "hybrid"]),
            "questions": {s: {sp: sum(c.set == s and c.split == sp for c in cases)
                              for sp in ("dev", "test")} for s in SETS}}
        for rule in ("sparse", "dense", "hybrid", chosen):
            row = figures[rule]
            say(f"{name} {rule}: " + ", ".join(f"{s}/test@{cut} {row[f'{s}/test@{cut}']:.3f}"
                                               for s in SETS for cut in CUTS))
    write(results, out)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="minilm,mpnet")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from bench.search.mpnet import mpnet_embedder
    from conductor.search.embedders import default_embedder

    known = {"minilm": default_embedder, "mpnet": mpnet_embedder}
    chosen = {n: known[n] for n in args.embedders.split(",")}
    run(chosen, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
