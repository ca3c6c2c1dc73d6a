"""The dense models' bar on the tiny hybrid model (issue 56, item 4), in one run:

    python -m bench.hybrid.bars [--out DIR] [--longest TOKENS]

One engine (`tiny-hybrid`, vLLM's CPU path, prefix caching in align mode, 640-token
blocks). Two parts, each turn's figures from `usage.prompt_tokens_details.cached_tokens`:

* **The lanes' bar** (bench/README.md, "Targets": later-turn cached fraction on / off at
  least 0.95, the ratio of the two lanes' means): the lanes bench's own conversation
  (`bench.lanes.conversation.TURNS`, 8 turns, scripted answers) through its own `Lane`s,
  memory `off` and `on` (the 50 notes) interleaved turn by turn as `run_session` runs
  them, plus `on` with the lever below; with the boundary-aware layout and without it
  (the engine's `reuse_block` set to None: the layout of a dense profile, and what a user
  of plain vLLM gets), each with its own system prompts so no run reads another's cache.
* **The fraction against prompt length**: the same conversation's turns again and again
  (answers of about 250 tokens) until the prompt passes `--longest` tokens, in `off`,
  `on` and `on` with the lever; the engine's context is raised past the profile's 4,096
  for it (the tiny model's weights are random: its answers are scripted).

The lever, the server's record prefill (server/idle/record_prefill.py): after each
answer, in idle time, a background request prefills the session's record (prompt and
answer, as the next turn replays them) and one token more, as the prewarm does for the
shared context, so vLLM keeps the recurrent state at the last block boundary before the
next turn's new tokens instead of before the answer. The lever lane runs the service's
tick after each answer (the idle moment); the other lanes never do.

Writes results.json, summary.md and fraction_by_length.png (default:
bench/results/hybrid-bars/).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lanes.conversation import TURNS, Turn, fill_store
from bench.lanes.lane import Lane, TurnResult
from bench.lanes.probe import EngineProbe
from bench.lanes.session import rotated, run_session
from bench.lanes.summary import mode_summary
from bench.paths import RESULTS_DIR

OUT = RESULTS_DIR / "hybrid-bars"
LANES = ("off", "on", "lever")
LONGEST = 16_000  # the sweep's last prompt passes it
CONTEXT = 17_408  # the sweep's engine context (the profile's is 4,096)
# About 200 tokens more a sweep answer: a chat model's answer is rarely one line.
DETAIL = (" In more detail: the service reads its settings from the environment first, "
          "then from config/quayside.toml; the compose file starts Postgres on 5433 and "
          "Redis on 6380; the CLI's `quayside doctor` checks both and prints what is "
          "missing. The migrations run with `alembic upgrade head`, each revision with its "
          "downgrade, and the CI job `migrations` runs them against an empty database "
          "before the tests. Logs go to stderr as JSON lines; set QUAYSIDE_LOG=debug to "
          "see the SQL. The orders API validates with pydantic models in schemas.py and "
          "returns 422 with the field's name when one is missing or malformed.")


class LeverLane(Lane):
    """Memory on, and after each answer the idle moment in which the server's record
    prefill runs (server/idle/record_prefill.py): the record + one token."""

    prefills: list[dict[str, int]]

    async def ask(self, conversation, turn: Turn, number: int, script: bool) -> TurnResult:
        result = await super().ask(conversation, turn, number, script)
        for run in await self.app.state.tandem.record_prefill.tick():
            self.prefills.append({"prompt": run.prompt_tokens, "cached": run.cached_tokens,
                                  "outcome": run.outcome})
        return result


def lanes_for(probe: EngineProbe, home: Path) -> dict[str, Lane]:
    """off, on (the 50 notes) and on with the lever, each its own system prompt (nonce)."""
    lanes: dict[str, Lane] = {}
    for name in LANES:
        nonce = secrets.token_hex(4)
        if name == "lever":
            lane = LeverLane("on", probe, home / name, nonce, {})
            lane.prefills = []
        else:
            lane = Lane(name, probe, home / name, nonce, {})
        # The job in the lever lane only; there even without the layout (the engine's
        # reuse_block set to None), to weigh it on plain vLLM's layout too.
        lane.services.idle.records_due.on = name == "lever"
        if name != "off":
            fill_store(lane.store())
        lanes[name] = lane
    return lanes


def labelled(results: list[TurnResult], names: list[str]) -> list[dict[str, Any]]:
    """Each turn's figures under its lane's name (the lever lane's app mode is `on`):
    run_session asks the lanes of turn k in `rotated(names, k)` order."""
    order = [name for k in range(len(results) // len(names)) for name in rotated(names, k)]
    return [{**result.as_dict(), "mode": name}
            for result, name in zip(results, order, strict=True)]


async def lanes_bar(probe: EngineProbe, home: Path, say) -> dict[str, Any]:
    """The lanes' conversation in off, on and lever, interleaved; later-turn means."""
    lanes = lanes_for(probe, home)
    results = await run_session(lanes, TURNS, True, say, modes=tuple(lanes))
    turns = labelled(results, list(lanes))
    means = {name: mode_summary(turns, name) for name in lanes}
    off = means["off"]["cached_fraction"]

    def over_off(name: str) -> float | None:  # None: memory off read nothing at all
        return round(means[name]["cached_fraction"] / off, 4) if off else None

    return {"turns": turns, "means": means,
            "on_over_off": over_off("on"), "lever_over_off": over_off("lever"),
            "lever_prefills": lanes["lever"].prefills}


def sweep_turn(n: int) -> Turn:
    """The lanes' turns over and over, answers with DETAIL and no memory block."""
    base = TURNS[n % len(TURNS)]
    return Turn(f"{base.user} (round {n // len(TURNS) + 1})",
                base.answer.split("\n<tandem_memory")[0] + DETAIL)


async def length_sweep(probe: EngineProbe, home: Path, longest: int, say) -> dict[str, Any]:
    """One long conversation a lane, interleaved turn by turn as run_session does, each
    lane's ending once its prompt passes `longest` tokens."""
    lanes = lanes_for(probe, home)
    conversations = {name: lane.conversation("sweep") for name, lane in lanes.items()}
    by_lane: dict[str, list[dict[str, int]]] = {name: [] for name in lanes}
    active, n = list(lanes), 0
    while active:
        turn = sweep_turn(n)
        for name in rotated(active, n):
            result = await lanes[name].ask(conversations[name], turn, n + 1, True)
            series = by_lane[name]
            row = {"turn": n + 1, "prompt": result.prompt_tokens,
                   "cached": result.cached_tokens, "answer": result.completion_tokens}
            if series:  # past the turn before's prompt and answer: the message, its notes
                row["new"] = row["prompt"] - series[-1]["prompt"] - series[-1]["answer"]
            series.append(row)
            if n % 8 == 0:
                say(f"sweep turn {n + 1} {name}: prompt {row['prompt']}, "
                    f"cached {row['cached']}")
            if row["prompt"] > longest:
                active.remove(name)
        n += 1
    return {"turns": by_lane}


async def measure(engine, longest: int, say) -> dict[str, Any]:
    probe = EngineProbe(engine)
    block = engine.reuse_block
    load_start, started = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory(prefix="tandem-hybrid-bars-") as folder:
        home = Path(folder)
        say("the lanes' bar, with the layout")
        with_layout = await lanes_bar(probe, home / "with", say)
        engine.reuse_block = None  # a dense profile's layout, and plain vLLM's
        say("the lanes' bar, without the layout")
        without = await lanes_bar(probe, home / "without", say)
        engine.reuse_block = block
        say(f"the fraction against prompt length, to {longest} tokens")
        sweep = await length_sweep(probe, home / "sweep", longest, say)
    return {"profile": engine.profile.name, "block_size": block,
            "context": engine.profile.max_model_len, "wall_s": round(time.time() - started),
            "load_average_start": load_start, "load_average_end": os.getloadavg(),
            "lanes_bar": {"with_layout": with_layout, "without_layout": without},
            "length_sweep": sweep}


async def _on_own_engine(longest: int, say) -> dict[str, Any]:
    from engine.engine import Engine
    from engine.home import tandem_home
    from engine.model_builder import ensure_model
    from engine.profiles import load_profile

    ensure_model(tandem_home(), "tiny-hybrid", progress=lambda _m: None)
    # Past the tiny model's 8,192 positions (random weights: nothing to extrapolate).
    os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    profile = dataclasses.replace(load_profile("tiny-hybrid"),
                                  max_model_len=max(CONTEXT, longest + 1400))
    engine = await Engine.start(profile, tandem_home(), progress=say)
    try:
        return await measure(engine, longest, say)
    finally:
        engine.shutdown()


def main(argv: list[str] | None = None) -> int:
    from bench.hybrid.bars_report import write_report

    parser = argparse.ArgumentParser(prog="python -m bench.hybrid.bars")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--longest", type=int, default=LONGEST)
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(f"[hybrid-bars] {message}", flush=True)

    results = asyncio.run(_on_own_engine(args.longest, say))
    print(write_report(results, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
