"""The index bench's accuracy half: the quality bench's questions in a new session each,
memory on, once per variant of what the hidden context shows (bench/index/variants.py),
all on one engine, scored by the strict judge (bench/quality/judge.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.index.variants import Variant
from bench.quality.facts import Fact
from bench.quality.run import QualityBench, summarise_lane
from engine.engine import Engine


async def measure_accuracy(engine: Engine, home: Path, facts: list[Fact],
                           variants: Sequence[Variant], max_tokens: int,
                           progress: Callable[[str], None]) -> dict[str, Any]:
    """Every question in every variant's lane (the order rotates item by item, so none
    always goes first); each lane's rows and its summary."""
    bench = QualityBench(engine, home, max_tokens,
                         shown={v.name: v.notes_shown for v in variants})
    progress(f"{bench.write_notes(facts)} notes written through the store, "
             f"{len(variants)} variants")
    names = [v.name for v in variants]
    rows: list[dict[str, Any]] = []
    for n, fact in enumerate(facts):
        for name in names[n % len(names):] + names[: n % len(names)]:
            rows.append(await bench.question(name, n, fact, facts))
        progress(f"item {n + 1}/{len(facts)}: " + ", ".join(
            f"{r['lane']} {'ok' if r['correct'] else '-' if r['scored'] else 'unscored'}"
            for r in rows if r["item"] == n))
    return {"rows": rows, "by_variant": {name: summarise_lane(
        [r for r in rows if r["lane"] == name]) for name in names}}
