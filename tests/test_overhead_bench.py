"""The overhead bench's harness (issue 58, item 4): it checks what is measured, not the
speed (performance is the bench's: ratios and percentiles from one run, never a timed test)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from bench.overhead.run import QUICK, judged, measure, summary_lines
from bench.overhead.stalls import StallWatcher


def test_the_stall_watcher_sees_work_that_holds_the_loop():
    """A 20 ms piece of work on the loop is a stall past the 1 ms bound, and the loop
    asleep is none of that length."""

    async def watched(block: bool) -> dict:
        async with StallWatcher() as watcher:
            await asyncio.sleep(0.05)
            if block:
                time.sleep(0.02)  # work that never yields to the loop
            await asyncio.sleep(0.05)
        return watcher.summary()

    blocked = asyncio.run(watched(True))
    assert blocked["stalls_over_bound"] >= 1 and blocked["max_ms"] >= 15
    assert blocked["beats"] > 10


def test_the_overhead_bench_measures_every_request_of_both_modes(built_models, tiny_profile):
    """Users, records and notes in place; every request's server share measured, memory
    on and off; the stall watcher ran through both and the idle spell; the summary judges
    the goal."""
    config = dataclasses.replace(QUICK, users=4, sessions_per_user=2, clients=2, turns=2,
                                 answer_s=(0.0, 0.0))
    results = judged(asyncio.run(measure(tiny_profile, str(built_models / "tiny-qwen3"),
                                         config)))
    population = results["population"]
    assert population["ledger_records"] >= 4 * 2 * config.turns_per_session
    assert population["notes_per_user"] > 40
    for mode in ("on", "off"):
        share = results["server_share"][mode]
        assert share["n"] == config.clients * config.conversations * config.turns
        assert 0 < share["p50_ms"] <= share["p95_ms"] <= share["max_ms"]
    assert {"on", "off", "idle"} <= set(results["stalls"])
    assert results["stalls"]["idle"]["beats"] > 0
    text = "\n".join(summary_lines(results))
    assert "server share of TTFT under load, p95" in text and "< 5 ms" in text
    assert isinstance(results["met"], bool)
