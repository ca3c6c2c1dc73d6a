"""The quality bench's writer lane: what the background writer writes on a real model, with
its turn under the writer's grammar and without (`conductor/writing/writer_grammar.py`).

For each fact, a new session: the user states the fact (the note's body), the model
answers as served (memory on, greedy), then the writer runs on that session as the idle
loop would (its own gate, then its turn). Counted per run: blocks the turn wrote, the
blocks the parser took (well-formed), the notes the store took, and "nothing to
remember" answers. Then the pipeline item: a new session asks the fact's question, and
the strict judge scores the reply (the fact reached the notes only through the writer).
The same conversations go through both modes: only the grammar differs.
"""

from __future__ import annotations

import dataclasses
import secrets
import statistics
from pathlib import Path
from typing import Any

import httpx

from bench.quality.facts import Fact
from bench.quality.judge import judge
from conductor.memory.settings import MemorySettings
from server.app import create_app

NO_TURN = frozenset({"gated", "no_record", "preempted", "over_budget"})
MALFORMED = frozenset({"malformed_block", "missing_title", "unknown_kind", "unknown_scope",
                       "unknown_op", "missing_id", "missing_reason"})


def _writer_app(engine, home: Path, user: str):
    profile = engine.profile
    memory = dataclasses.replace(profile.memory, mode="on", writer_mode="on",
                                 jobs_mode="off", conversation="sessions")
    return create_app(dataclasses.replace(profile, memory=memory), home, engine=engine,
                      memory_settings=MemorySettings(user_name=user))


async def _converse(app, model: str, text: str, session: str, max_tokens: int) -> str:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                 timeout=None) as client:
        response = await client.post("/v1/chat/completions", headers={
            "X-Tandem-Session": session}, json={
            "model": model, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0,
            "messages": [{"role": "user", "content": text}]})
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
    return response.json()["choices"][0]["message"]["content"] or ""


async def writer_lane(engine, home: Path, facts: list[Fact], max_tokens: int, progress,
                      user: str) -> dict[str, Any]:
    """Both modes over the same conversations, as `user`; each run's counts and the
    modes' means."""
    nonce = secrets.token_hex(3)
    modes: dict[str, Any] = {}
    for constrained in (False, True):
        mode = "grammar" if constrained else "free"
        app = _writer_app(engine, home / f"writer-{mode}", user)
        service = app.state.tandem.writer
        service.writer.constrained = constrained
        runs = []
        for n, fact in enumerate(facts):
            session = f"w-{nonce}-{mode}-{n}"
            await _converse(app, engine.profile.name, f"{fact.body} Keep that in mind.",
                            session, max_tokens)
            run = await service.run(user, session, "bench")
            malformed = sum(1 for r in run.refusals if r in MALFORMED)
            # the pipeline item: a new session asks, with whatever the writer stored
            reply = await _converse(app, engine.profile.name, fact.question,
                                    f"{session}-asked", max_tokens)
            verdict = judge(fact.question, reply, fact.answers, fact.wrong)
            runs.append({"item": n, "outcome": run.outcome, "gate": run.gate_answer,
                         "answered": verdict.correct, "scored": verdict.scored,
                         "blocks": run.blocks_seen, "well_formed": run.blocks_seen - malformed,
                         "notes": run.notes_written, "said_nothing": run.said_nothing,
                         "tokens": run.tokens_generated, "refusals": run.refusals})
            progress(f"writer {mode} {n + 1}/{len(facts)}: {run.outcome}, "
                     f"{run.blocks_seen} blocks, {run.notes_written} notes")
        turns = [r for r in runs if r["outcome"] not in NO_TURN]
        modes[mode] = {"runs": runs, "turns": len(turns),
                       "gated": sum(r["outcome"] == "gated" for r in runs),
                       "blocks_per_turn": _mean(r["blocks"] for r in turns),
                       "well_formed_per_turn": _mean(r["well_formed"] for r in turns),
                       "notes_per_turn": _mean(r["notes"] for r in turns),
                       "nothing_to_remember": sum(r["said_nothing"] for r in turns),
                       "pipeline_answered": _mean(r["answered"] for r in runs if r["scored"])}
    return modes


def _mean(values) -> float | None:
    values = list(values)
    return round(statistics.mean(values), 3) if values else None


def writer_markdown(modes: dict[str, Any]) -> list[str]:
    lines = ["", "The writer (each fact stated in a new session, then the writer run on it):",
             "", "| writer turn | runs past the gate | gated | blocks a turn | well-formed "
             "a turn | notes stored a turn | \"nothing to remember\" | pipeline items "
             "answered (strict) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode, m in modes.items():
        lines.append(f"| {mode} | {m['turns']} | {m['gated']} | {m['blocks_per_turn']} | "
                     f"{m['well_formed_per_turn']} | {m['notes_per_turn']} | "
                     f"{m['nothing_to_remember']} | {m['pipeline_answered']} |")
    return lines
