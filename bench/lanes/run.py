"""The bench's entry: `run_bench` measures parts 1-5 on one engine and writes the report."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.lanes.continuous import run_continuous
from bench.lanes.conversation import fill_store
from bench.lanes.jobs import run_jobs_part
from bench.lanes.lane import MODES, PREFETCHING, Lane
from bench.lanes.new_sessions import run_new_sessions
from bench.lanes.probe import EngineProbe
from bench.lanes.session import run_recall, run_session, run_threaded, session_turns
from bench.lanes.summary import write_report
from bench.lanes.writer import client_ids, client_ttft, measure_writer
from bench.paths import RESULTS_DIR
from bench.report import environment
from engine.engine import Engine
from engine.profiles import Profile, load_profile

Submit = Callable[[Coroutine[Any, Any, Any]], Any]


@dataclass(frozen=True)
class BenchConfig:
    """How much one run measures."""

    turns: int
    answer_tokens: int  # unscripted profiles: greedy answer length per turn
    recall_samples: int
    record_tokens: int  # the writer's session record (capped by the model's context)
    write_tokens: int  # the writer's output cap (a scripted profile ends sooner)
    preempt_samples: int


QUICK = BenchConfig(turns=4, answer_tokens=8, recall_samples=1, record_tokens=5000,
                    write_tokens=64, preempt_samples=2)
FULL = BenchConfig(turns=8, answer_tokens=16, recall_samples=2, record_tokens=5000,
                   write_tokens=96, preempt_samples=3)


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def default_out_dir(profile_name: str) -> Path:
    return RESULTS_DIR / f"{profile_name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


async def warm_up(engine: Engine, nonce: str) -> None:
    """One throwaway request, so the first measured turn pays no first-run costs (the
    engine's own warm-up covers the grammar and log-probability paths)."""
    await client_ttft(engine, client_ids(engine, nonce, "warm-up"))


async def measure(engine: Engine, config: BenchConfig, progress: Callable[[str], None] = say
                  ) -> dict[str, Any]:
    """Every figure of parts 1-4, measured on `engine` (on its event loop)."""
    profile = engine.profile
    nonce = secrets.token_hex(4)
    script = profile.scripted
    generation = {} if script else {"max_tokens": config.answer_tokens, "temperature": 0.0,
                                    "seed": 0}
    probe = EngineProbe(engine)
    started, load_start = time.time(), os.getloadavg()
    await warm_up(engine, nonce)
    with tempfile.TemporaryDirectory(prefix="tandem-bench-") as tmp:
        lanes = {m: Lane(m, probe, Path(tmp) / m, nonce, generation) for m in MODES}
        for mode in ("shadow", "on", *PREFETCHING):  # naive pastes the same notes
            fill_store(lanes[mode].store())
        progress(f"profile {profile.name}: {config.turns} turns x {len(MODES)} modes, "
                 "store of 50 notes")
        turns = await run_session(lanes, session_turns(config.turns), script, progress)
        session_prefetch = {m: lanes[m].prefetch.as_dict() for m in PREFETCHING}
        threaded = await run_threaded(lanes, script, progress)
        recall = await run_recall(lanes, config.recall_samples, script, progress)
        new_sessions = await run_new_sessions(lanes, script, profile.block_size, progress)
        continuous = await run_continuous(lanes["on"], session_turns(config.turns), script,
                                          progress)
        jobs = await run_jobs_part(lanes["on"], nonce, config.preempt_samples, progress)
    writer = await measure_writer(engine, nonce, config.record_tokens, config.write_tokens,
                                  config.preempt_samples, progress)
    return {
        "bench": {"profile": profile.name, "quick": config == QUICK, "config": asdict(config),
                  "scripted": script, "started_at": datetime.fromtimestamp(started).isoformat(
                      timespec="seconds"), "wall_s": time.time() - started,
                  # Another process on the same cores shows here: judge the figures by it.
                  "load_average_start": load_start, "load_average_end": os.getloadavg()},
        "environment": environment(profile, engine.model_path),
        "session": {"modes": list(MODES), "turns": [t.as_dict() for t in turns],
                    **session_prefetch},
        "threaded": threaded,
        "recall": [r.as_dict() for r in recall],
        "new_sessions": new_sessions,
        "continuous": continuous,
        "jobs": jobs,
        "writer": writer,
    }


async def _on_own_engine(profile: Profile, config: BenchConfig) -> dict[str, Any]:
    from engine.home import tandem_home

    say(f"starting the engine: profile {profile.name}, model {profile.model}")
    started = time.monotonic()
    engine = await Engine.start(profile, tandem_home(), progress=say)
    say(f"engine ready in {time.monotonic() - started:.0f} s")
    try:
        return await measure(engine, config)
    finally:
        engine.shutdown()


def run_bench(profile_name: str | Profile, quick: bool = False, out_dir: Path | None = None,
              engine: Engine | None = None, submit: Submit | None = None) -> Path:
    """Run the bench and write its report; returns the results folder.

    Without `engine` it starts (and stops) its own. With one, `submit` runs a coroutine on
    that engine's event loop and returns its result (default: `asyncio.run`).
    """
    profile = profile_name if isinstance(profile_name, Profile) else load_profile(profile_name)
    if engine is not None and engine.profile.name != profile.name:
        raise ValueError(f"the engine serves {engine.profile.name!r}, not {profile.name!r}")
    config = QUICK if quick else FULL
    out = Path(out_dir) if out_dir is not None else default_out_dir(profile.name)
    if engine is None:
        results = asyncio.run(_on_own_engine(profile, config))
    else:
        results = (submit or asyncio.run)(measure(engine, config))
    text = write_report(results, out)
    print(text, flush=True)
    say(f"results in {out}")
    return out

