"""The engine tools' cost, measured in one run: `python -m bench.lanes.tools [--profile P]`.

A conversation's second turn asked twice, in two sessions with the same first turn: once
with one `memory_search` call in the answer (the call is forced with the scripted driver,
which every engine loads; the answer after the response is the model's own on an
unscripted profile) and once without. Per sample, alternating which goes first:

* the continuation's prefilled tokens (its prompt less what the prefix cache served)
  against the tool exchange's tokens: the target is the exchange, within one KV block;
* the continuation's first-token time, against the first generation's;
* the whole answer's time with the call over the time without it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import secrets
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.lanes.conversation import TURNS, fill_store
from bench.lanes.lane import parse_stream
from bench.paths import RESULTS_DIR
from bench.report import environment
from conductor.memory.settings import MemorySettings
from engine.engine import Engine
from engine.profiles import Profile, load_profile
from server.app import create_app

RESULTS = RESULTS_DIR / "tools"
USER = "bench"
QUERY = "database for the tests"
CALL = ('<tool_call>\n{"name": "memory_search", "arguments": {"query": "' + QUERY + '"}}'
        "\n</tool_call>")
ANSWER_TOKENS = 16  # unscripted profiles: greedy answer after the call, and without it


def say(message: str) -> None:
    print(f"[tools bench] {message}", flush=True)


class ToolsBench:
    def __init__(self, engine: Engine, home: Path) -> None:
        profile = engine.profile
        memory = dataclasses.replace(profile.memory, mode="on", writer_mode="off",
                                     jobs_mode="off", conversation="sessions")
        # `scripted` lets the bench force the call: the server takes `script` only then.
        served = dataclasses.replace(profile, memory=memory, scripted=True)
        self.engine = engine
        self.app = create_app(served, home, engine=engine,
                              memory_settings=MemorySettings(user_name=USER))
        self.state = self.app.state.tandem
        self.own_answers = not profile.scripted
        self.nonce = secrets.token_hex(3)

    def prepare(self) -> None:
        fill_store(self.state.memory.store(USER))
        report = self.state.search.index(USER).sync()
        say(f"memory: 50 notes, {report.chunks_embedded} chunks indexed")

    def _script(self, with_call: bool, answer: str) -> list[str | None]:
        own = None if self.own_answers else answer
        return [CALL, own] if with_call else [own]

    def _body(self, messages: list[dict], script: list[str | None]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.engine.profile.name, "messages": messages,
                                "stream": True, "stream_options": {"include_usage": True},
                                "script": script}
        if self.own_answers:
            call_tokens = len(self.engine.tokenizer.encode(CALL, add_special_tokens=False))
            extra = call_tokens + 1 if script[0] == CALL else 0
            body.update(max_tokens=ANSWER_TOKENS + extra, temperature=0.0, seed=0)
        return body

    async def _post(self, body: dict, session: str) -> tuple[str, dict, str, float]:
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                     timeout=None) as client:
            sent = time.perf_counter()
            response = await client.post("/v1/chat/completions", json=body,
                                         headers={"X-Tandem-Session": session})
            done = time.perf_counter()
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
        content, usage, completion_id = parse_stream(response.text)
        return content, usage, completion_id, done - sent

    async def turn(self, sample: int, with_call: bool) -> dict[str, Any]:
        way = "with_search" if with_call else "without"
        session = f"tools-{sample}-{way}"
        opener, question = TURNS[0], TURNS[1]
        # Each sample's question differs, so no sample finds another's exchange cached;
        # the two ways of one sample share it (whichever goes second finds its prompt).
        asked = f"{question.user} (ticket {self.nonce}-{sample})"
        first = [{"role": "user", "content": opener.user}]
        shown, _, _, _ = await self._post(self._body(first, [opener.answer]), session)
        history = [*first, {"role": "assistant", "content": shown},
                   {"role": "user", "content": asked}]
        content, usage, completion_id, total_s = await self._post(
            self._body(history, self._script(with_call, question.answer)), session)
        recent = self.engine.stats.recent
        first_gen = recent.get(completion_id)
        row: dict[str, Any] = {
            "sample": sample, "way": way, "total_s": total_s,
            "prompt_tokens": usage["prompt_tokens"],
            "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "first_ttft_s": first_gen.ttft_s if first_gen else None,
            "called": content.startswith("› searched memory:"),
        }
        if with_call:
            continuation = recent[f"{completion_id}-1"]
            row.update(
                first_ttft_s=None,  # the first generation was ended right after the call
                exchange_tokens=self._exchange_tokens(session),
                continuation_prompt_tokens=continuation.prompt_tokens,
                continuation_prefilled_tokens=(continuation.prompt_tokens
                                               - continuation.cached_tokens),
                continuation_ttft_s=continuation.ttft_s)
        return row

    def _exchange_tokens(self, session: str) -> int:
        """The ids the server appended after the call: the message's end, the tool
        response, the next assistant header."""
        record = self.state.memory.latest_record(USER, session)
        (span,) = [s for s in record.spans if s.kind == "tool"]
        ids = list(record.ids[span.start:span.end])
        return len(ids) - (ids.index(self.engine.tokens.tool_call_end) + 1)

    async def run(self, samples: int) -> list[dict[str, Any]]:
        rows = []
        for sample in range(samples):
            for with_call in ((True, False) if sample % 2 == 0 else (False, True)):
                row = await self.turn(sample, with_call)
                rows.append(row)
                say(f"sample {sample + 1}/{samples} {row['way']}: {row['total_s']:.2f} s"
                    + (f", continuation prefilled {row['continuation_prefilled_tokens']} of "
                       f"an exchange of {row['exchange_tokens']}" if with_call else ""))
        return rows


def summarise(rows: list[dict[str, Any]], block_size: int) -> dict[str, Any]:
    withs = [r for r in rows if r["way"] == "with_search"]
    withouts = {r["sample"]: r for r in rows if r["way"] == "without"}
    over = [r["continuation_prefilled_tokens"] - r["exchange_tokens"] for r in withs]
    return {
        "samples": len(withs),
        "all_called": all(r["called"] for r in withs),
        "continuation_prefilled_minus_exchange_max": max(over),
        "continuation_prefilled_within_a_block": all(0 <= o < block_size for o in over),
        "exchange_tokens_median": statistics.median(r["exchange_tokens"] for r in withs),
        "continuation_ttft_s_median": statistics.median(r["continuation_ttft_s"]
                                                        for r in withs),
        "first_ttft_without_s_median": statistics.median(
            r["first_ttft_s"] for r in withouts.values()),
        "continuation_ttft_over_first_ttft_without": statistics.median(
            r["continuation_ttft_s"] / withouts[r["sample"]]["first_ttft_s"] for r in withs),
        "answer_time_with_over_without": statistics.median(
            r["total_s"] / withouts[r["sample"]]["total_s"] for r in withs),
    }


def markdown(results: dict[str, Any]) -> str:
    s, bench = results["summary"], results["bench"]
    lines = [f"# Engine tools: one memory_search in a turn ({bench['profile']})", "",
             f"{bench['started_at']}, {s['samples']} samples a way, "
             f"{bench['wall_s']:.0f} s. Every answer called the tool: {s['all_called']}.", "",
             "| figure | value | target |", "| --- | ---: | --- |",
             f"| continuation prefilled - tool exchange, tokens (max) | "
             f"{s['continuation_prefilled_minus_exchange_max']} | 0 to "
             f"{bench['block_size'] - 1} (one block) |",
             f"| tool exchange, tokens (median) | {s['exchange_tokens_median']} | - |",
             f"| continuation TTFT, s (median) | {s['continuation_ttft_s_median']:.3f} | - |",
             f"| turn without the call: TTFT, s (median) | "
             f"{s['first_ttft_without_s_median']:.3f} | - |",
             f"| continuation TTFT / TTFT without the call | "
             f"{s['continuation_ttft_over_first_ttft_without']:.2f} | reported |",
             f"| whole answer with the call / without | "
             f"{s['answer_time_with_over_without']:.2f} | reported |", "",
             "| sample | way | prompt | cached | exchange | cont. prefilled | cont. TTFT s | "
             "total s |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results["rows"]:
        cont = r.get("continuation_ttft_s")
        lines.append(f"| {r['sample']} | {r['way']} | {r['prompt_tokens']} | "
                     f"{r['cached_tokens']} | {r.get('exchange_tokens', '-')} | "
                     f"{r.get('continuation_prefilled_tokens', '-')} | "
                     f"{'-' if cont is None else f'{cont:.3f}'} | {r['total_s']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    withs = [r for r in rows if r["way"] == "with_search"]
    withouts = [r for r in rows if r["way"] == "without"]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    names = ["TTFT without", "continuation TTFT", "answer without", "answer with search"]
    values = [statistics.median(r["first_ttft_s"] for r in withouts),
              statistics.median(r["continuation_ttft_s"] for r in withs),
              statistics.median(r["total_s"] for r in withouts),
              statistics.median(r["total_s"] for r in withs)]
    ax.bar(names, values, color=["#888", "#2a7", "#888", "#2a7"])
    ax.set_ylabel("seconds (median)")
    ax.set_title("One memory_search inside a turn")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


async def measure(profile: Profile, samples: int) -> dict[str, Any]:
    from engine.home import tandem_home

    say(f"starting the engine: profile {profile.name}")
    engine = await Engine.start(profile, tandem_home(), progress=say)
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="tandem-tools-bench-") as tmp:
            bench = ToolsBench(engine, Path(tmp))
            await asyncio.to_thread(bench.prepare)
            rows = await bench.run(samples)
        return {"bench": {"profile": profile.name, "samples": samples,
                          "block_size": profile.block_size,
                          "started_at": datetime.fromtimestamp(started).isoformat(
                              timespec="seconds"), "wall_s": time.time() - started},
                "environment": environment(profile, engine.model_path),
                "rows": rows, "summary": summarise(rows, profile.block_size)}
    finally:
        engine.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lanes.tools", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    results = asyncio.run(measure(profile, args.samples))
    out = args.out or RESULTS / profile.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    (out / "summary.md").write_text(text)
    plot(results["rows"], out / "tools.png")
    print(text)
    say(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
