"""The index bench's load half: the load bench's clients (bench/load/clients.py) against
plain vLLM, plain vLLM sent the tokens memory on hides in every prompt (the engine's tools
and the memory card, as plain request parts), Tandem memory on with an empty store, and
Tandem memory on for a user with the quality bench's 40 notes once per variant of what the
hidden context shows; the rounds interleaved as the load bench's are, ratios to vLLM as
paired medians, and each Tandem lane also over vLLM given memory's tokens: what is left
of its cost once the engine's work on those tokens is taken out."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.index.variants import Variant, profile_file
from bench.load.run import (
    Lane,
    measure_interleaved,
    memory_tokens_shape,
    paired_ratios,
    ratio_medians,
    tandem_server,
    vllm_server,
)
from bench.quality.facts import Fact
from engine.profiles import Profile

EMPTY = "memory_on_empty"  # memory on, no notes: the floor every variant stands on
# vLLM's own server sent memory's hidden tokens: what they cost the engine, not the server
MEMORY_TOKENS = "vllm_memory_tokens"
YARDSTICKS = ("vllm", MEMORY_TOKENS)
GROUP = 3  # variants up at once, beside vLLM (and, first, memory on with no notes)


def measure_load(profile: Profile, facts: Sequence[Fact], variants: Sequence[Variant],
                 client_counts: list[int], rounds: int, folder: Path,
                 progress: Callable[[str], None]) -> dict[str, Any]:
    """The variants in groups of `GROUP`, each group beside its own plain vLLM (a tiny
    server and its engine take about 3 GB: nine at once would not fit in 24); the first
    group also beside memory on with an empty store and vLLM sent memory's tokens (the
    same vLLM server). Each lane's rounds (bench.load.run.measure_interleaved) and its
    paired ratio to its group's vLLM."""
    groups: list[dict[str, Any]] = []
    to: dict[str, dict[str, Any]] = {}
    for first in range(0, len(variants), GROUP):
        chosen = variants[first:first + GROUP]
        starts: list[tuple[str, Callable[[], Any]]] = [("vllm", lambda: vllm_server(profile))]
        if first == 0:
            starts.append((EMPTY, lambda: tandem_server(profile, "on")))
        for variant in chosen:
            path = profile_file(profile, variant.notes_shown, folder / variant.name)
            starts.append((variant.name,
                           lambda path=path: tandem_server(profile, "on", facts, path)))
        with ExitStack() as stack:
            lanes: dict[str, Lane] = {}
            for name, start in starts:
                progress(f"starting {name}")
                lanes[name] = Lane(stack.enter_context(start()))
            if first == 0:
                lanes[MEMORY_TOKENS] = Lane(lanes["vllm"].base, memory_tokens_shape())
            servers = measure_interleaved(lanes, profile.name, client_counts, rounds,
                                          progress)
        groups.append(servers)
        to |= to_vllm(servers)
    return {"groups": groups, "to_vllm": to}


def to_vllm(servers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per lane and client count: the paired medians of wall and p95 TTFT over vLLM's,
    every paired wall ratio (the spread), the mean prompt the server counted, and beside
    vLLM's own (rounds' medians): what the engine prefilled a request (the prompt less its
    cached tokens) and the CPU a round of the server and of its engine, which split a
    lane's extra wall into the server's Python and the engine's work. Where the group
    has vLLM sent memory's tokens, a Tandem lane's paired wall median over that lane too
    (`wall_over_memory_tokens`)."""
    out: dict[str, dict[str, Any]] = {}
    vllm, tokens = servers["vllm"], servers.get(MEMORY_TOKENS)
    for lane, by_clients in servers.items():
        if lane == "vllm":
            continue
        out[lane] = {}
        for clients, figures in by_clients.items():
            walls, ttfts = paired_ratios(figures["rounds"], vllm[clients]["rounds"])
            out[lane][clients] = {**ratio_medians(walls, ttfts), "wall_ratios": walls,
                                  "prompt_tokens_mean": figures["best"]["prompt_tokens_mean"],
                                  **_medians(figures["rounds"], ""),
                                  **_medians(vllm[clients]["rounds"], "vllm_")}
            if tokens is not None and lane not in YARDSTICKS:
                over, _ = paired_ratios(figures["rounds"], tokens[clients]["rounds"])
                out[lane][clients]["wall_over_memory_tokens"] = statistics.median(over)
    return out


def _medians(rounds: list[dict[str, Any]], prefix: str) -> dict[str, float | None]:
    """A lane's rounds' medians: tokens prefilled a request, and the CPU seconds a round
    of the server's own process and of its engine (bench/load/cpu.py)."""
    out: dict[str, float | None] = {}
    for name, key in (("uncached_tokens", "uncached_tokens_mean"),
                      ("server_cpu_s", "server_cpu_s"), ("engine_cpu_s", "engine_cpu_s")):
        values = [r[key] for r in rounds if r.get(key) is not None]
        out[prefix + name] = statistics.median(values) if values else None
    return out
