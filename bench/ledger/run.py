"""The session ledger at agent scale: `tandem bench --ledger [--quick]`.

64 coding-agent sessions run interleaved, 10 turns each, every turn adding about 2,600
ids (a tool result and the model's next call) to a 4,000-id head, so each reaches 30k
ids; at turn 5 every session regenerates its answer once (a branch). Each turn asks the
ledger for the record the prompt starts with, as the server does, and counts a miss
when it is not the session's previous turn; then records the turn.

Measured in one run, on the real `Ledger` with the server's default bound: record
misses, the ids held (each shared block once) against what the same records would hold
as flat copies, and the process's resident memory before and after (RSS delta). The
bench holds no ids of its own between turns: each turn's ids are the previous record's
read back from the ledger, so the RSS delta is the ledger's. Then the same run on the
ledger as it was before shared blocks (flat copies, four records a session, the same
bound), for its misses.
"""

from __future__ import annotations

import os
import random
import time
from array import array
from pathlib import Path
from typing import Any

from bench.paths import RESULTS_DIR
from bench.report import fmt, write_run
from conductor.ledger.id_blocks import BLOCK_SIZE, BlockIds, IdBlocks, flat_ids
from conductor.ledger.records import MAX_TOKENS, Ledger, Record
from conductor.ledger.records import VisibleMessage as Message

RESULTS = RESULTS_DIR / "ledger"
USER = "bench"
HEAD_IDS = 4_000  # system prompt and tool definitions
TURN_IDS = 2_600  # a tool result and the next call
TURNS = 10
SESSIONS = 64
BRANCH_TURN = 5
VOCAB = 151_000


def say(message: str) -> None:
    print(f"[ledger bench] {message}", flush=True)


def rss_bytes() -> int:
    """The process's resident memory now (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _ids(rng: random.Random, count: int) -> array:
    return array("i", (rng.randrange(VOCAB) for _ in range(count)))


class FlatIds(IdBlocks):
    """The ledger before shared blocks: every record's ids a copy of its own."""

    def hold(self, ids) -> BlockIds:
        flat = array("i", flat_ids(ids))
        self.ids_held += len(flat)
        return BlockIds((), (), flat)


def run_ledger_bench(out_dir: Path | None = None, quick: bool = False,
                     max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
    sessions = 8 if quick else SESSIONS
    results = _run(Ledger(max_tokens=max_tokens), sessions)
    say("the same run on flat copies, four records a session")
    before = _run(Ledger(max_tokens=max_tokens, per_session=4, _ids=FlatIds()), sessions)
    results["flat_ledger"] = {k: before[k] for k in ("misses", "ids_held", "records_held")}
    out = out_dir or RESULTS / ("quick" if quick else "full")
    say(write_run(out, results, _summary(results), lambda folder: _plot(results, folder)))
    return results


def _run(ledger: Ledger, sessions: int) -> dict[str, Any]:
    rng = random.Random(34)
    before = rss_bytes()
    misses, turns_run, curve = 0, 0, []
    history: dict[str, list[Message]] = {
        f"agent-{n}": [Message.of("system", f"agent {n}: you edit the repository")]
        for n in range(sessions)}
    head = _ids(rng, HEAD_IDS)  # every agent runs the same system prompt and tools
    started = time.monotonic()
    for turn in range(TURNS):
        for session, messages in history.items():
            asked = [*messages, Message.of("tool" if turn else "user",
                                           f"{session} result {turn}")]
            match = ledger.find(USER, session, asked)
            if turn and (match is None or match.partial
                         or match.matched_messages != len(messages)):
                misses += 1
            latest = ledger.latest(USER, session) if turn else None
            # evicted (the flat ledger): the client's history is rendered afresh
            previous = (flat_ids(latest.ids) if latest is not None
                        else head + _ids(rng, turn * TURN_IDS))
            prompt = previous + _ids(rng, TURN_IDS - 100)
            answers = 2 if turn == BRANCH_TURN else 1  # a regenerate: a second answer
            for attempt in range(answers):
                answer = Message.of("assistant", f"{session} call {turn}.{attempt}")
                ledger.record(Record(USER, session, (*asked, answer), prompt + _ids(rng, 100),
                                     ended_cleanly=True))
            messages[:] = [*asked, answer]
            turns_run += 1
        curve.append({"turn": turn + 1, "ids_held": ledger.tokens,
                      "flat_ids": _flat(ledger), "rss_mb": (rss_bytes() - before) / 2**20})
        say(f"turn {turn + 1}/{TURNS}: {ledger.tokens:,} ids held, "
            f"{curve[-1]['flat_ids']:,} as flat copies, misses {misses}")
    after = rss_bytes()
    results = {
        "sessions": sessions, "turns": TURNS, "turns_run": turns_run,
        "ids_per_session": HEAD_IDS + TURNS * TURN_IDS, "block_size": BLOCK_SIZE,
        "records_per_session": ledger.per_session, "max_tokens": ledger.max_tokens,
        "records_held": len(ledger), "misses": misses, "ids_held": ledger.tokens,
        "flat_ids": _flat(ledger), "rss_delta_mb": round((after - before) / 2**20, 1),
        "ids_mb": round(ledger.tokens * 4 / 2**20, 1), "seconds": round(
            time.monotonic() - started, 1), "curve": curve,
    }
    results["sharing"] = round(results["flat_ids"] / max(results["ids_held"], 1), 2)
    return results


def _flat(ledger: Ledger) -> int:
    return sum(len(r.ids) for r in ledger.user_records(USER))


def _summary(r: dict[str, Any]) -> str:
    return "\n".join([
        "# The ledger at agent scale", "",
        f"{r['sessions']} sessions x {r['turns']} turns, interleaved, each reaching "
        f"{r['ids_per_session']:,} ids; one regenerate a session at turn {BRANCH_TURN}.", "",
        "| figure | value |", "| --- | --- |",
        f"| record misses | {r['misses']} of {r['turns_run'] - r['sessions']} later turns |",
        f"| records held | {r['records_held']} ({r['records_per_session']} a session at "
        "most) |",
        f"| ids held (shared blocks of {r['block_size']}) | {r['ids_held']:,} "
        f"({r['ids_mb']} MB) |",
        f"| the same records as flat copies | {r['flat_ids']:,} ids "
        f"({fmt(r['sharing'])}x) |",
        f"| ledger bound (memory.ledger_max_tokens) | {r['max_tokens']:,} ids |",
        f"| RSS delta | {r['rss_delta_mb']} MB |",
        f"| the ledger before (flat copies, 4 records a session, the same bound) | "
        f"{r['flat_ledger']['misses']} misses, {r['flat_ledger']['ids_held']:,} ids held |",
        f"| time | {r['seconds']} s |", ""])


def _plot(r: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = [p["turn"] for p in r["curve"]]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(turns, [p["flat_ids"] / 1e6 for p in r["curve"]], marker="o",
            label="the records as flat copies")
    ax.plot(turns, [p["ids_held"] / 1e6 for p in r["curve"]], marker="o",
            label="held (shared blocks)")
    ax.axhline(r["max_tokens"] / 1e6, color="grey", linestyle="--", label="bound")
    ax.set_xlabel("turn")
    ax.set_ylabel("million ids")
    ax.set_title(f"Ledger: {r['sessions']} agent sessions, {r['misses']} misses")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "ledger_ids.png")
    plt.close(fig)
