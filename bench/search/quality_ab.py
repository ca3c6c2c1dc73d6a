"""The quality bench's strict figures under the previous fusion rule and under the served
one, in one run on one engine: `python -m bench.search.quality_ab [--out FILE]
[--items N]` (default `bench/results/search-external/quality_ab.json`, which
`python -m bench.search.external --quality FILE` puts in its summary).

The question: is memory on's fall on the quality bench the fusion's doing? Matched notes
reach a memory-on prompt through the notes store's own BM25 (`conductor/hidden/
tail_notes.py` calls `NoteStore.search`, tantivy over the notes' files), not through
hybrid search; `smol` calls no tools, so `memory_search` (which is hybrid) is not asked
either. This run says so by measurement: it counts every hybrid search
(`SearchIndex.search`) and every fusion while the lanes run, under each rule, and
compares the replies. The `on` lane runs under each rule (a fresh store each), `naive`
(every note pasted, memory off) once for reference. Greedy decoding: the same prompt
gives the same reply.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.paths import RESULTS_DIR
from bench.quality.facts import FACTS, load_facts
from bench.quality.run import FULL_TOKENS, QualityBench, summarise_lane
from bench.search.fusion import RRF
from conductor.search import fusion as served
from conductor.search import index as index_module
from conductor.search.index import SearchIndex

OUT = RESULTS_DIR / "search-external" / "quality_ab.json"
PREVIOUS = RRF(5, 4.0)  # issue 39's served rule


def say(message: str) -> None:
    print(f"[quality a/b] {message}", flush=True)


def previous_fused(by_meaning: served.Found, by_words: served.Found,
                   limit: int) -> served.Found:
    """The rule served before issue 59, over the served fusion's input and output."""
    payloads = {served.key_of(p): p for _, p in [*by_meaning, *by_words]}
    order = PREVIOUS.fuse([(served.key_of(p), s) for s, p in by_meaning],
                          [(served.key_of(p), s) for s, p in by_words])
    return [(0.0, payloads[key]) for key in order[:limit]]


async def measure(items: int | None, max_tokens: int) -> dict[str, Any]:
    from engine.engine import Engine
    from engine.home import tandem_home
    from engine.profiles import load_profile

    facts = load_facts(FACTS)[:items]
    calls: Counter[str] = Counter()
    rule = {"fuse": served.fused}
    real_search = SearchIndex.search

    def counted_search(self, *args, **kwargs):
        calls[f"search/{rule['label']}"] += 1
        return real_search(self, *args, **kwargs)

    def counted_fused(by_meaning, by_words, limit):
        calls[f"fused/{rule['label']}"] += 1
        return rule["fuse"](by_meaning, by_words, limit)

    SearchIndex.search = counted_search  # type: ignore[method-assign]
    index_module.fused = counted_fused  # type: ignore[assignment]
    engine = await Engine.start(load_profile("smol"), tandem_home(), progress=say)
    runs: dict[str, dict[str, float | None]] = {}
    replies: dict[str, list[str]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tandem-quality-ab-") as tmp:
            for label, fuse, lanes in (
                    (f"before: {PREVIOUS.name}", previous_fused, ("on", "naive")),
                    (f"after: {served.RULE}", served.fused, ("on",))):
                rule.update(fuse=fuse, label=label)
                bench = QualityBench(engine, Path(tmp) / label.split(":")[0], max_tokens)
                bench.write_notes(facts)
                rows = []
                for n, fact in enumerate(facts):
                    for lane in lanes:
                        rows.append(await bench.question(lane, n, fact, facts))
                    say(f"{label} item {n + 1}/{len(facts)}")
                runs[label] = {lane: summarise_lane([r for r in rows if r["lane"] == lane])[
                    "accuracy"] for lane in ("on", "naive") if lane in lanes} | (
                    {"naive": None} if "naive" not in lanes else {})
                replies[label] = [r["reply"] for r in rows if r["lane"] == "on"]
    finally:
        engine.shutdown()
        SearchIndex.search = real_search  # type: ignore[method-assign]
        index_module.fused = served.fused
    before, after = replies.values()
    same = sum(a == b for a, b in zip(before, after, strict=True))
    searches = sum(v for k, v in calls.items() if k.startswith("search/"))
    return {"items": len(facts), "max_tokens": max_tokens, "runs": runs,
            "hybrid_calls": dict(calls), "same_on_replies": same,
            "note": (f"Quality bench (smol, {len(facts)} items, strict judge), memory on "
                     f"under each rule: hybrid search was called {searches} times and "
                     f"fused {sum(v for k, v in calls.items() if k.startswith('fused/'))} "
                     f"times across both runs; {same} of {len(facts)} memory-on replies are "
                     "the same under both. " + (
                         "Matched notes come from the notes store's BM25, not from this "
                         "fusion: the two falls are not one cause." if searches == 0 and
                         same == len(facts) else "The fusion reaches these prompts: see "
                         "the replies that differ."))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--items", type=int, default=None)
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.items, FULL_TOKENS))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    say(results["note"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
