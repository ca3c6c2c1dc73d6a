"""Part 4: background turns.

* write: the real background writer (gate, then its turn, then the notes store) on a
  session record of about 5,000 tokens (capped by the profile's context);
* preemption: a client request's TTFT while a background turn decodes against idle, and
  how many engine steps (background deltas) arrived after the client request was sent.

`measure_writer` is the one entry point.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.lanes.conversation import BASE_SYSTEM, NOTES, TURNS
from conductor.ledger.records import Ledger, Record, VisibleMessage
from conductor.notes import NoteStore
from conductor.writing.writer import Writer
from engine.engine import Engine, GenerationParams
from server.idle.writer import EngineWriterBackend

Progress = Callable[[str], None]

WRITER_SCRIPT = (
    '<tandem_memory op="add" scope="session" kind="gotcha">\n'
    "title: webhook retries need idempotent handlers\ntags: payments, webhooks\n\n"
    "Retry only on transport errors; the handler dedupes on the event id.\n"
    "</tandem_memory>")
PREEMPT_ROOM = 512  # decode room a preempted background turn keeps beyond the record
DECODING_BEFORE_CLIENT = 3  # background tokens out before the client request is sent


@dataclass
class PreemptSample:
    """A client request sent while a background turn decodes (or while idle)."""

    busy: bool
    client_ttft_s: float
    background_deltas_after_client: int = 0
    background_tokens_after_client: int = 0
    background_stop_s: float | None = None  # client sent -> background's final output
    background_finish_reason: str | None = None


def chat_ids(engine: Engine, messages: list[dict]) -> list[int]:
    """The prompt ids of a chat, rendered by the engine's template (thinking off)."""
    text = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                tokenize=False, enable_thinking=False)
    return engine.tokenizer.encode(text, add_special_tokens=False)


def record_size(engine: Engine, wanted: int, write_tokens: int) -> int:
    """`wanted`, capped so the write and a preempted turn fit in the model's context."""
    return min(wanted, engine.profile.max_model_len - max(write_tokens, PREEMPT_ROOM) - 64)


def writer_record(engine: Engine, nonce: str, target_tokens: int) -> Record:
    """A finished session of about `target_tokens` ids, as the ledger would hold it."""
    messages = [{"role": "system", "content": f"[bench {nonce} write]\n{BASE_SYSTEM}"}]

    def render(items: list[dict]) -> list[int]:
        text = engine.tokenizer.apply_chat_template(items, add_generation_prompt=False,
                                                    tokenize=False, enable_thinking=False)
        return engine.tokenizer.encode(text.rstrip("\n"), add_special_tokens=False)

    i = 0
    while True:
        turn = TURNS[i % len(TURNS)]
        kind, title, body = NOTES[i % len(NOTES)]
        added = [{"role": "user", "content": f"{turn.user} (take {i + 1})"},
                 {"role": "assistant", "content": f"{turn.answer} Also: {title}: {body}"}]
        if len(render([*messages, *added])) > target_tokens and i > 0:
            break
        messages += added
        i += 1
    ids = render(messages)
    visible = tuple(VisibleMessage.of(m["role"], m["content"]) for m in messages)
    return Record(user="bench", session=f"write-{nonce}", messages=visible, ids=tuple(ids),
                  ended_cleanly=ids[-1] == engine.tokens.end_of_turn)


async def write_notes(engine: Engine, record: Record, max_tokens: int) -> dict[str, Any]:
    """The real writer on the record: gate, turn, store (in a scratch memory folder)."""
    ledger = Ledger()
    ledger.record(record)
    with tempfile.TemporaryDirectory(prefix="tandem-bench-writer-") as scratch:
        root = Path(scratch) / "memory"
        writer = Writer(ledger.latest, lambda user: NoteStore(root, user),
                        EngineWriterBackend(engine),
                        root / "cognition" / "runs", mode="on", max_tokens=max_tokens)
        scripted = engine.profile.scripted
        run = await writer.run(record.user, record.session, "bench",
                               script=WRITER_SCRIPT if scripted else None,
                               gate_script="yes" if scripted else None)
    return asdict(run)


def client_ids(engine: Engine, nonce: str, tag: str) -> list[int]:
    """A client prompt no earlier request shares a cached block with."""
    return chat_ids(engine, [
        {"role": "system", "content": f"[bench {nonce} client {tag}]\n{BASE_SYSTEM}"},
        {"role": "user", "content": TURNS[3].user}])


async def client_ttft(engine: Engine, ids: list[int]) -> float:
    """TTFT of a short client request (two greedy tokens)."""
    first = None
    started = time.perf_counter()
    async for delta in engine.generate(ids, GenerationParams(max_tokens=2, temperature=0.0)):
        if delta.token_ids and first is None:
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


async def busy_sample(engine: Engine, record: list[int], client: list[int]) -> PreemptSample:
    """A client request sent while a background turn over the record is decoding."""
    room = engine.profile.max_model_len - len(record) - 1
    params = GenerationParams(max_tokens=max(1, min(2048, room)), temperature=1.0, seed=1)
    stamps: list[tuple[float, int]] = []
    ended: dict[str, Any] = {}

    async def background() -> None:
        async for delta in engine.generate(record, params, kind="background"):
            if delta.token_ids:
                stamps.append((time.perf_counter(), len(delta.token_ids)))
            if delta.finished:
                ended.update(at=time.perf_counter(), reason=delta.finish_reason)

    task = asyncio.create_task(background())
    while len(stamps) < DECODING_BEFORE_CLIENT and not task.done():
        await asyncio.sleep(0.002)
    sent = time.perf_counter()
    ttft = await client_ttft(engine, client)
    await task
    after = [n for at, n in stamps if at > sent]
    return PreemptSample(
        busy=True, client_ttft_s=ttft, background_deltas_after_client=len(after),
        background_tokens_after_client=sum(after),
        background_stop_s=ended["at"] - sent if "at" in ended else None,
        background_finish_reason=ended.get("reason"))


async def measure_writer(engine: Engine, nonce: str, record_tokens: int, write_tokens: int,
                         samples: int, progress: Progress) -> dict[str, Any]:
    """Part 4's figures: the write, and client TTFT busy against idle."""
    size = record_size(engine, record_tokens, write_tokens)
    session = writer_record(engine, nonce, size)
    progress(f"writer: the background writer on a {len(session.ids)}-token record")
    write = await write_notes(engine, session, write_tokens)
    progress(f"writer: {write['outcome']}, {write['notes_written']} notes, "
             f"{write['tokens_generated']} tokens in {write['duration_s']:.2f} s "
             f"(gate {write['gate_answer']} p={write['gate_probability']})")
    # The busy samples decode over the same record, which the writer's run left cached.
    record = list(session.ids)
    runs: list[PreemptSample] = []
    for i in range(samples):
        for busy in (True, False) if i % 2 == 0 else (False, True):
            await engine.wait_idle()
            ids = client_ids(engine, nonce, f"{i}-{'busy' if busy else 'idle'}")
            sample = (await busy_sample(engine, record, ids) if busy
                      else PreemptSample(busy=False, client_ttft_s=await client_ttft(engine, ids)))
            runs.append(sample)
            progress(f"writer: client ttft {'busy' if busy else 'idle'} {i + 1}/{samples}: "
                     f"{sample.client_ttft_s:.3f} s" + (
                         f", background steps after client {sample.background_deltas_after_client}"
                         f" ({sample.background_finish_reason})" if busy else ""))
    busy_ttft = [s.client_ttft_s for s in runs if s.busy]
    idle_ttft = [s.client_ttft_s for s in runs if not s.busy]
    return {
        "record_tokens": len(record),
        "write": write,
        "preemption": [asdict(s) for s in runs],
        "client_ttft_busy_s": statistics.median(busy_ttft),
        "client_ttft_idle_s": statistics.median(idle_ttft),
        "client_ttft_busy_over_idle": statistics.median(busy_ttft) / statistics.median(idle_ttft),
        "background_steps_after_client_max": max(
            s.background_deltas_after_client for s in runs if s.busy),
        "background_all_preempted": all(
            s.background_finish_reason == "abort" for s in runs if s.busy),
    }
