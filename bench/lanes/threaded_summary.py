"""Part 2b's figures: the threaded conversation (a topic kept for two turns) in off, on,
prefetch and hinted; its follow-up turns (the second of each topic) are where a guess from
the turn before can be right, its openers where it cannot (and a client's draft can).
With the prefetching lanes' tallies, which part 1 reports the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.report import fmt, mean_of, ratio

LATER_FROM_TURN = 2


def _mean_ttft(turns: list[dict], mode: str, which: Callable[[int], bool]) -> float | None:
    return mean_of(t["ttft_s"] for t in turns
                   if t["mode"] == mode and t["turn"] >= LATER_FROM_TURN and which(t["turn"]))


def _follow_up(turn: int) -> bool:
    return turn % 2 == 0


def _opener(turn: int) -> bool:
    return turn % 2 == 1


def _every(_turn: int) -> bool:
    return True


def hit_turns_ratio(part: dict[str, Any], mode: str) -> float | None:
    """`mode`'s mean TTFT over off's on the later turns where every note the message
    matched had been prefetched: what a right guess leaves of memory's cost."""
    hit_turns = set((part.get(mode) or {}).get("hit_turns") or ())

    def mean_ttft(m: str) -> float | None:
        return mean_of(t["ttft_s"] for t in part["turns"] if t["mode"] == m
                       and t["turn"] >= LATER_FROM_TURN and t["turn"] in hit_turns)

    return ratio(mean_ttft(mode), mean_ttft("off"))


def threaded_ratios(threaded: dict[str, Any] | None) -> dict[str, float | None]:
    if not threaded:
        return {}
    turns = threaded["turns"]

    def over_off(mode: str, which: Callable[[int], bool]) -> float | None:
        return ratio(_mean_ttft(turns, mode, which), _mean_ttft(turns, "off", which))

    return {
        "threaded_ttft_on_over_off": over_off("on", _every),
        "threaded_ttft_prefetch_over_off": over_off("prefetch", _every),
        "threaded_follow_up_ttft_on_over_off": over_off("on", _follow_up),
        "threaded_follow_up_ttft_prefetch_over_off": over_off("prefetch", _follow_up),
        "threaded_opener_ttft_prefetch_over_off": over_off("prefetch", _opener),
        "threaded_prefetch_hit_rate": (threaded.get("prefetch") or {}).get("hit_rate"),
        "threaded_ttft_hinted_over_off": over_off("hinted", _every),
        "threaded_hinted_hit_rate": (threaded.get("hinted") or {}).get("hit_rate"),
        "threaded_hit_turns_ttft_hinted_over_off": hit_turns_ratio(threaded, "hinted"),
    }


def threaded_markdown(threaded: dict[str, Any] | None) -> list[str]:
    if not threaded:
        return []
    turns = threaded["turns"]
    lines = ["", "Threaded conversation (part 2b: a topic kept for two turns), TTFT s of "
             "later turns:", "", "| mode | all later | follow-ups | openers |",
             "| --- | ---: | ---: | ---: |"]
    for mode in threaded["modes"]:
        lines.append(f"| {mode} | {fmt(_mean_ttft(turns, mode, _every))} | "
                     f"{fmt(_mean_ttft(turns, mode, _follow_up))} | "
                     f"{fmt(_mean_ttft(turns, mode, _opener))} |")
    return lines + prefetch_lines(threaded)


WHAT_GUESSED = {"prefetch": "branches after each turn",
                "hinted": "the client's drafts as hints"}


def prefetch_lines(part: dict[str, Any]) -> list[str]:
    """A line per prefetching lane of a part: notes prefetched, matched, never used."""
    lines = []
    for mode, what in WHAT_GUESSED.items():
        tally = part.get(mode)
        if tally and tally.get("branches"):  # nothing recorded: no prompt pays for a miss
            lines += ["", f"`{mode}` ({what}): {len(tally['runs'])} runs, "
                      f"{tally['branches']} of them branches, over {tally['prefetched_notes']}"
                      f" notes; {tally['hit_notes']} of them matched by a message after "
                      f"them (hit rate {fmt(tally['hit_rate'], 2)}), every note it matched "
                      f"prefetched on {len(tally['hit_turns'])} turns; a branch not matched "
                      f"adds no token to a prompt."]
        elif tally:
            lines += ["", f"`{mode}` ({what}): {len(tally['runs'])} runs, "
                      f"{tally['prefetched_notes']} notes ({tally['prefetched_tokens']} "
                      f"tokens) prefetched, {tally['hit_notes']} of them matched by the "
                      f"message they were fetched for (hit rate {fmt(tally['hit_rate'], 2)}), "
                      f"{tally['wasted_tokens']} tokens not matched by it."]
    return lines
