"""Part 7: the cognition jobs, on the continuous conversation part 6 left behind.

* each job once: prompt, cached and output tokens, duration, outcome (scripted JSON on a
  scripted profile, the model's own under the grammar elsewhere, with small caps);
* a client request's TTFT while a job decodes, against idle (the job is preempted);
* the first message after a consolidation (its new prefix prefilled in idle time)
  against the normal message after it.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from bench.lanes.conversation import TURNS
from bench.lanes.lane import USER, Lane
from bench.lanes.writer import DECODING_BEFORE_CLIENT, client_ids, client_ttft
from conductor.cognition.job import JobCaps
from conductor.cognition.jobs import JOBS
from conductor.layers.semantic import SEMANTIC_FILES
from conductor.layers.working import SECTIONS

Progress = Callable[[str], None]
BENCH_CAPS = JobCaps(max_items=3, max_chars=80, max_flags=3, reason_chars=48)
# A model writing its own JSON on random weights fills every item to its cap: on the
# CPU at 4 tokens a second, these keep each job's answer to a minute or less.
UNSCRIPTED_CAPS = JobCaps(max_items=1, max_chars=24, max_flags=1, reason_chars=16)
UNSCRIPTED_MAX_TOKENS = 400
CONSOLIDATE = "working_memory.consolidate"


def _compact(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"))


def scripted_answer(job: str, long: bool = False) -> str:
    """A valid answer for a scripted profile; `long` for the preemption samples."""
    item = [{"id": "new", "text": ("the release moves to Friday " * (6 if long else 1))[:80]}]
    if job == "verification_review":
        return _compact({"flags": []})
    if job == CONSOLIDATE:
        return _compact({"sections": {s: item * (3 if long else 1) for s in SECTIONS}})
    files = {name: {s: [] for s in sections} for name, (_t, sections, _p)
             in SEMANTIC_FILES.items()}
    files["projects.md"]["Active"] = item
    return _compact({"files": files})


async def run_jobs_part(lane: Lane, nonce: str, samples: int, progress: Progress
                        ) -> dict[str, Any]:
    state = lane.app.state.tandem
    jobs, engine = state.jobs, state.engine
    scripted = engine.profile.scripted
    jobs.caps = BENCH_CAPS if scripted else UNSCRIPTED_CAPS
    if not scripted:
        jobs.max_tokens = UNSCRIPTED_MAX_TOKENS

    def script(job: str, long: bool = False) -> str | None:
        return scripted_answer(job, long) if scripted else None

    preemption = []
    for i in range(samples):
        for busy in (True, False) if i % 2 == 0 else (False, True):
            await engine.wait_idle()
            ids = client_ids(engine, nonce, f"job-{i}-{'busy' if busy else 'idle'}")
            if not busy:
                preemption.append({"busy": False, "client_ttft_s": await client_ttft(engine, ids)})
                continue
            before = jobs.live_tokens
            task = asyncio.create_task(jobs.run(USER, CONSOLIDATE, "manual",
                                                script(CONSOLIDATE, long=True)))
            # Send the client request once the job decodes (its prefill is done).
            while jobs.live_tokens - before < DECODING_BEFORE_CLIENT and not task.done():
                await asyncio.sleep(0.002)
            ttft = await client_ttft(engine, ids)
            run = await task
            preemption.append({"busy": True, "client_ttft_s": ttft, "job_outcome": run.outcome})
            progress(f"jobs: client ttft while a job decodes {ttft:.3f} s ({run.outcome})")
    runs = []
    for name in JOBS:
        await engine.wait_idle()
        run = await jobs.run(USER, name, "manual", script(name))
        runs.append(asdict(run))
        progress(f"jobs: {name} {run.outcome}: prompt {run.prompt_tokens}, cached "
                 f"{run.cached_tokens}, output {run.output_tokens}, {run.duration_s:.2f} s")
    prefill = None
    if USER in jobs.prewarm_due:
        prefill = asdict(await jobs.prewarm_conversation(USER))
    after = await lane.converse(TURNS[0], 1, scripted)
    normal = await lane.converse(TURNS[1], 2, scripted)
    progress(f"jobs: first message after the consolidation {after.ttft_s:.3f} s, the next "
             f"{normal.ttft_s:.3f} s")
    busy = [s["client_ttft_s"] for s in preemption if s["busy"]]
    idle = [s["client_ttft_s"] for s in preemption if not s["busy"]]
    return {
        "runs": runs,
        "preemption": preemption,
        "client_ttft_busy_over_idle": statistics.median(busy) / statistics.median(idle),
        "conversation_prefill": prefill,
        "after_consolidation": after.as_dict(),
        "next_message": normal.as_dict(),
        "after_consolidation_ttft_over_next": after.ttft_s / normal.ttft_s,
    }


def markdown_lines(part: dict[str, Any]) -> list[str]:
    lines = ["", "Cognition jobs (part 7):", "",
             "| job | outcome | prompt tok | cached tok | output tok | s |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in part["runs"]:
        lines.append(f"| {r['job']} | {r['outcome']} | {r['prompt_tokens']} | "
                     f"{r['cached_tokens']} | {r['output_tokens']} | {r['duration_s']:.2f} |")
    after, nxt = part["after_consolidation"], part["next_message"]
    lines += ["",
              f"- client TTFT while a job decodes / idle (median): "
              f"{part['client_ttft_busy_over_idle']:.2f}",
              f"- first message after a consolidation (prefilled): TTFT {after['ttft_s']:.3f} s, "
              f"cached {after['cached_tokens']} of {after['prompt_tokens']}; the next message "
              f"{nxt['ttft_s']:.3f} s; ratio {part['after_consolidation_ttft_over_next']:.2f}"]
    return lines
