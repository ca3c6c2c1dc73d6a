"""Parts 1-3: a multi-turn session per memory mode (and the naive baseline), interleaved
turn by turn, then a new session asking what is remembered, memory on against off."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.lanes.conversation import RECALL_QUESTIONS, THREADED_TURNS, TURNS, Turn
from bench.lanes.lane import MODES, PREFETCHING, Lane, PrefetchTally, TurnResult

Progress = Callable[[str], None]


def rotated(modes: Sequence[str], k: int) -> list[str]:
    """The modes starting at the k-th, so no mode always runs first (drift cancels)."""
    k %= len(modes)
    return [*modes[k:], *modes[:k]]


def _line(label: str, result: TurnResult) -> str:
    return (f"{label} mode {result.mode}: ttft {result.ttft_s:.2f} s, prompt "
            f"{result.prompt_tokens}, cached {result.cached_tokens}")


async def run_session(lanes: dict[str, Lane], turns: Sequence[Turn], script: bool,
                      progress: Progress, modes: Sequence[str] = MODES,
                      name: str = "session", label: str = "turn") -> list[TurnResult]:
    """Parts 1 and 2: every mode takes turn k before any takes turn k+1."""
    conversations = {mode: lanes[mode].conversation(name) for mode in modes}
    results: list[TurnResult] = []
    for k, turn in enumerate(turns):
        for mode in rotated(modes, k):
            result = await lanes[mode].ask(conversations[mode], turn, k + 1, script)
            progress(_line(f"{label} {k + 1}/{len(turns)}", result))
            results.append(result)
    return results


THREADED_MODES = ("off", "on", *PREFETCHING)


async def run_threaded(lanes: dict[str, Lane], script: bool, progress: Progress
                       ) -> dict[str, Any]:
    """Part 2b: the threaded conversation (a topic kept for two turns) in the modes the
    prefetch is judged by, interleaved as part 1; the prefetching lanes' guesses counted
    apart from part 1's."""
    for mode in PREFETCHING:
        lanes[mode].prefetch = PrefetchTally()
    results = await run_session(lanes, THREADED_TURNS, script, progress, THREADED_MODES,
                                name="threaded", label="threaded")
    return {"modes": list(THREADED_MODES), "turns": [r.as_dict() for r in results],
            **{mode: lanes[mode].prefetch.as_dict() for mode in PREFETCHING}}


async def run_recall(lanes: dict[str, Lane], samples: int, script: bool,
                     progress: Progress) -> list[TurnResult]:
    """Part 3: a new session's first question about memory, on against off."""
    results: list[TurnResult] = []
    for i, question in enumerate(RECALL_QUESTIONS[:samples]):
        for mode in rotated(("off", "on"), i):
            lane = lanes[mode]
            result = await lane.ask(lane.conversation(f"recall{i}"), question, i + 1, script)
            progress(_line(f"recall {i + 1}/{samples}", result))
            results.append(result)
    return results


def session_turns(count: int) -> tuple[Turn, ...]:
    """The first `count` turns of the synthetic conversation."""
    if not 1 <= count <= len(TURNS):
        raise ValueError(f"turns must be 1..{len(TURNS)}")
    return TURNS[:count]
