"""The background writer: a hidden turn of the model, on a conversation the engine already
holds, that writes memory notes when nobody is waiting.

Engine-agnostic: the server hands it a `WriterBackend` that renders turns to ids and runs
background generations. The turn: the session's record (its end anchor) plus a gate
question (yes/no, constrained, read with its probability); a confident no ends the run.
Otherwise the record plus the writer's own user turn, with the notes that already match
the session listed so the model updates instead of adding. Its blocks go through the
same parser and notes store as inline blocks (source `writer`, never a rule about the
user). A call written despite the tool-call ban ends the turn at its function's name.
Each run leaves one JSON record under `cognition/runs/YYYY/MM/DD/`, ids and counts only.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from conductor.ledger.records import LatestRecord, Record
from conductor.notes import NoteStore
from conductor.notes.note_format import SCOPES
from conductor.storage.atomic import append_line, atomic_write
from conductor.writing.block_writes import write_block
from conductor.writing.blocks import Block, BlockRefusal, BlockScanner, parse_block
from conductor.writing.writer_grammar import NOTHING, writer_grammar

WriterMode = Literal["off", "shadow", "on"]
GATE_CONFIDENCE = 0.8  # a "no" at least this sure skips the turn
WRITER_MAX_TOKENS = 512

GATE_QUESTION = (
    "Background check, not from the user: does the conversation above hold a lasting fact, "
    "preference, rule or project detail worth remembering in later conversations? "
    "Answer yes or no.")
WRITER_TASK = (
    "Background task, not from the user: write memory notes for what in the conversation "
    "above is worth remembering in later conversations. One fact per block:\n"
    '<tandem_memory op="add" scope="user|project|session" kind="reference|gotcha|runbook">'
    "\ntitle: one line\n\nthe fact\n</tandem_memory>\n"
    'When a note below already covers a fact, write op="update" id="ID" instead. '
    "Write only blocks, no other text, and never call a tool. If nothing is worth "
    f"remembering, write: {NOTHING}")

# A tool call written as text despite the ban: JSON with a name, or a function tag. The
# turn ends as soon as the function's name is complete.
_CALL_NAME = re.compile(r'"name"\s*:\s*"[^"\n]+"|<function=[^>\s]+>|<tool_call>\s*\{?\s*"?\w+')


@dataclass(frozen=True)
class GenerationPiece:
    text: str
    tokens: int
    finish_reason: str | None = None


class WriterBackend(Protocol):
    def turn_ids(self, record: Record, text: str) -> list[int]:
        """The record's ids, then a user turn with `text`, then the assistant's opening."""

    async def gate(self, prompt_ids: list[int], script: str | None) -> tuple[str, float]:
        """Ask yes/no; the answer and its probability."""

    def generate(self, prompt_ids: list[int], max_tokens: int, script: str | None,
                 grammar: str | None = None) -> AsyncIterator[GenerationPiece]:
        """A background generation, under `grammar` when given (a script, in tests, is
        the answer itself and goes without it); closing the iterator aborts it."""

    def client_busy(self) -> bool:
        """True while a client request is in flight."""


@dataclass
class WriterRun:
    """One run's record: what happened, in ids and counts."""

    run_id: str
    trigger: str
    session: str
    mode: str
    started_at: str
    record_tokens: int = 0
    gate_answer: str | None = None
    gate_probability: float | None = None
    tokens_generated: int = 0
    duration_s: float = 0.0
    # wrote, wrote_nothing, preempted, gated, refused, over_budget, ...
    outcome: str = "wrote_nothing"
    notes_written: int = 0
    blocks_seen: int = 0
    refusals: list[str] = field(default_factory=list)
    stopped_at_tool_call: bool = False
    said_nothing: bool = False  # the turn's answer was "nothing to remember"
    note_ids: list[str] = field(default_factory=list)


@dataclass
class Writer:
    latest_record: LatestRecord  # a session's newest record in the ledger
    store_for: Callable[[str], NoteStore]
    backend: WriterBackend
    runs_dir: Path
    mode: WriterMode = "off"
    max_tokens: int = WRITER_MAX_TOKENS
    # The turn under writer_grammar: only well-formed blocks or "nothing to remember".
    constrained: bool = True
    # Proxy mode on a paid backend: why a run whose prompts have these sizes may not
    # start (its budget), or None. Asked before the run's first request.
    admit: Callable[[list[int], int], str | None] | None = None
    live_tokens: int = 0  # tokens of the run in progress (for tests and the dashboard)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self, user: str, session: str, trigger: str, script: str | None = None,
                  gate_script: str | None = None, record: Record | None = None) -> WriterRun:
        """Run the writer on one session now (one background turn at a time), over
        `record` when given (a compaction's dropped history), else the session's latest."""
        async with self._lock:
            started = time.monotonic()
            run = WriterRun(run_id=uuid.uuid4().hex[:12], trigger=trigger, session=session,
                            mode=self.mode, started_at=datetime.now(UTC).isoformat())
            try:
                await self._run(run, user, session, script, gate_script, record)
            finally:
                run.duration_s = round(time.monotonic() - started, 4)
                self.live_tokens = 0
                self._save(run)
            return run

    async def _run(self, run: WriterRun, user: str, session: str, script: str | None,
                   gate_script: str | None, record: Record | None) -> None:
        record = record or self.latest_record(user, session)
        if record is None:
            run.outcome = "no_record"
            return
        if self.backend.client_busy():
            run.outcome = "preempted"  # never start beside a client; try the next window
            return
        run.record_tokens = len(record.ids)
        store = self.store_for(user)
        gate_prompt = self.backend.turn_ids(record, GATE_QUESTION)
        task, listed = self._task(store, record, session)
        prompt = self.backend.turn_ids(record, task)
        if self.admit is not None:
            refused = self.admit([len(gate_prompt), len(prompt)], self.max_tokens)
            if refused is not None:
                run.outcome = "over_budget"
                run.refusals.append(refused)
                return
        answer, probability = await self.backend.gate(gate_prompt, gate_script)
        run.gate_answer, run.gate_probability = answer, round(probability, 4)
        if answer not in ("yes", "no"):
            run.outcome = "preempted"  # the gate itself was ended by a client request
            return
        if answer == "no" and probability >= GATE_CONFIDENCE:
            run.outcome = "gated"
            return
        if self.backend.client_busy():  # came during the gate: the long turn waits too
            run.outcome = "preempted"
            return
        # a project note only where the conversation ran in one
        scopes = SCOPES if record.project else tuple(x for x in SCOPES if x != "project")
        grammar = writer_grammar(listed, scopes) if self.constrained else None
        text, finish = await self._generate(run, prompt, script, grammar)
        if finish == "abort":
            run.outcome = "preempted"
            return
        self._take_blocks(run, store, session, text, record.project)

    def _task(self, store: NoteStore, record: Record, session: str) -> tuple[str, list[str]]:
        """The writer's instruction with the notes that already match, and their ids."""
        asked = " ".join(m.content for m in record.messages if m.role == "user")[-2000:]
        hits = store.search(asked, limit=5, include_stale=False) if asked.strip() else []
        lines = [f"[{note.id}] {note.kind}: {note.title}" for note, _ in hits]
        known = "\n".join(lines) if lines else "(none)"
        return (f"{WRITER_TASK}\nNotes that already match this conversation:\n{known}",
                [note.id for note, _ in hits])

    async def _generate(self, run: WriterRun, prompt: list[int], script: str | None,
                        grammar: str | None) -> tuple[str, str | None]:
        text, finish = "", None
        stream = self.backend.generate(prompt, self.max_tokens, script, grammar)
        try:
            async for piece in stream:
                text += piece.text
                run.tokens_generated += piece.tokens
                self.live_tokens = run.tokens_generated
                finish = piece.finish_reason or finish
                if _CALL_NAME.search(text):
                    run.stopped_at_tool_call = True
                    break
        finally:
            await stream.aclose()
        if run.stopped_at_tool_call:
            return "", "tool_call"
        return text, finish

    def _take_blocks(self, run: WriterRun, store: NoteStore, session: str, text: str,
                     project: str | None = None) -> None:
        run.said_nothing = text.strip() == NOTHING
        scanner = BlockScanner()
        blocks = [e for e in [*scanner.feed(text), *scanner.finish()] if isinstance(e, Block)]
        run.blocks_seen = len(blocks)
        if self.mode == "shadow":
            run.outcome = "shadow"  # counted and logged; nothing is stored
            self._log_shadow(run)
            return
        for block in blocks:
            request = parse_block(block.raw)
            if isinstance(request, BlockRefusal):
                run.refusals.append(request.reason)
                continue
            result = write_block(store, request, source="writer", session=session,
                                 project=project)
            if result.ok and result.note is not None:
                run.note_ids.append(result.note.id)
            elif not result.ok:
                run.refusals.append(result.reason or "refused")
        run.notes_written = len(run.note_ids)
        if run.notes_written:
            run.outcome = "wrote"
        elif run.refusals:
            run.outcome = "refused"
        else:
            run.outcome = "wrote_nothing"

    def _log_shadow(self, run: WriterRun) -> None:
        line = json.dumps({"at": run.started_at, "run_id": run.run_id, "session": run.session,
                           "blocks": run.blocks_seen})
        append_line(self.runs_dir.parent / "writer-shadow.jsonl", line, kind="writer_log")

    def _save(self, run: WriterRun) -> None:
        day = datetime.now(UTC)
        folder = self.runs_dir / f"{day:%Y}" / f"{day:%m}" / f"{day:%d}"
        atomic_write(folder / f"{day:%H%M%S}-{run.run_id}.json",
                     json.dumps(asdict(run), indent=2))
