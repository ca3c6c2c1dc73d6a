"""The background writer inside the server: the engine backend, the idle loop, its triggers."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing

from conductor.memory.services import MemoryServices
from conductor.memory.types import GenerationPiece, Record, Writer, WriterRun
from engine.backend import EngineBackend
from engine.generation import GenerationParams
from server.http.load_tracking import ServerLoad
from server.idle.idle import IdleService, client_waits
from server.idle.writer_budget import RequestUsage, WriterBudget, WriterPolicy


class EngineWriterBackend:
    """Runs the writer's turns as background requests of the engine."""

    def __init__(self, engine: EngineBackend, door: ServerLoad | None = None) -> None:
        self._engine = engine
        self._door = door or ServerLoad()  # the server's generation requests in flight
        # The user of the session the writer visits now (WriterService sets it per run):
        # their prefix-cache salt, so the turn finds their record cached.
        self.cache_salt: str | None = None
        self.usage: list[RequestUsage] = []  # the run's requests so far (a budget's rows)
        tokenizer = engine.tokenizer
        self._encode = lambda text: tokenizer.encode(text, add_special_tokens=False)
        self._yes = self._encode("yes")[0]
        self._no = self._encode("no")[0]

    def turn_ids(self, record: Record, text: str) -> list[int]:
        closing = [] if record.ended_cleanly else [self._engine.tokens.end_of_turn]
        # Thinking off, as a model with think tokens is told so (Qwen3's empty block); a
        # model without them (Qwen2.5) is not shown one.
        empty_think = "<think>\n\n</think>\n\n" if self._engine.tokens.think is not None else ""
        turn = f"\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n{empty_think}"
        return [*record.ids, *closing, *self._encode(turn)]

    def _script(self, script: str | None) -> tuple[int, ...] | None:
        return tuple(self._encode(script)) if script is not None else None

    async def gate(self, prompt_ids: list[int], script: str | None) -> tuple[str, float]:
        params = GenerationParams(max_tokens=4, temperature=0.0, choices=("yes", "no"),
                                  logprob_token_ids=(self._yes, self._no),
                                  script_ids=self._script(script), cache_salt=self.cache_salt)
        text, first = "", None
        async with aclosing(self._counted(prompt_ids, params)) as stream:
            async for delta in stream:
                text += delta.text
                if first is None and delta.logprobs:
                    first = delta.logprobs[0]
                if delta.finish_reason == "abort":
                    return "", 0.0
        # A constrained backend answers exactly; a plain chat API may say "Yes." or more:
        # its first word, and anything else is no sure "no" (the turn runs).
        words = text.strip().lower().split()
        answer = words[0].strip(".,!:;") if words else ""
        if answer not in ("yes", "no"):
            return "yes", 0.5
        if first is None:
            return answer, 1.0
        yes, no = first.get(self._yes, -math.inf), first.get(self._no, -math.inf)
        top = max(yes, no)
        p_yes = 1.0 if top == -math.inf else math.exp(yes - top) / (
            math.exp(yes - top) + math.exp(no - top))
        return answer, p_yes if answer == "yes" else 1.0 - p_yes

    async def generate(self, prompt_ids: list[int], max_tokens: int, script: str | None,
                       grammar: str | None = None) -> AsyncIterator[GenerationPiece]:
        if script is not None or not getattr(self._engine, "takes_grammar", True):
            grammar = None  # a script is the answer itself; a plain OpenAI API takes none
        params = GenerationParams(max_tokens=max_tokens, temperature=0.7, grammar=grammar,
                                  script_ids=self._script(script), cache_salt=self.cache_salt)
        async with aclosing(self._counted(prompt_ids, params)) as stream:
            async for delta in stream:
                yield GenerationPiece(delta.text, len(delta.token_ids), delta.finish_reason)

    async def _counted(self, prompt_ids: list[int], params: GenerationParams):
        """The engine's deltas for one background request, its usage kept in `usage`
        however it ends (a request cut short was still prefilled, and a paid backend bills
        that; one refused before it was sent says 0 prompt tokens, and costs nothing)."""
        prompt, cached, generated = len(prompt_ids), 0, 0
        stream = self._engine.generate(prompt_ids, params, kind="background")
        try:
            async for delta in stream:
                generated += len(delta.token_ids)
                if delta.finished:
                    prompt, cached = delta.prompt_tokens, delta.cached_tokens or 0
                yield delta
        finally:
            await stream.aclose()
            if prompt or generated:
                self.usage.append(RequestUsage(prompt, cached, generated))

    def client_busy(self) -> bool:
        return client_waits(self._engine, self._door)


class WriterService(IdleService):
    """The writer plus the loop that runs it on due sessions when nobody is waiting."""

    name = "writer"

    def __init__(self, memory: MemoryServices, engine: EngineBackend, mode: str,
                 policy: WriterPolicy | None = None, door: ServerLoad | None = None) -> None:
        super().__init__(memory, engine, door)
        self.writer = Writer(memory.latest_record, memory.store,
                             EngineWriterBackend(engine, self.door),
                             memory.root / "cognition" / "runs", mode=mode)
        # A paid backend's budget: checked before each run, charged after it.
        self.budget = None if policy is None else WriterBudget(
            policy, memory.root / "cognition" / "spend.jsonl")
        if self.budget is not None:
            self.writer.admit = self.budget.refusal
        self._one_at_a_time = asyncio.Lock()  # the salt is the running session's user's

    async def run(self, user: str, session: str, trigger: str, **options) -> WriterRun:
        """One writer run, under the session's user's prefix-cache salt (the writer's
        prompt opens with their record, cached under it)."""
        async with self._one_at_a_time:
            backend = self.writer.backend
            backend.cache_salt = self.memory.cache_salt(user)
            backend.usage = []
            run: WriterRun | None = None
            try:
                run = await self.writer.run(user, session, trigger, **options)
                return run
            finally:
                if self.budget is not None and backend.usage:  # a failed run still cost
                    self.budget.charge(run.run_id if run else f"failed-{uuid.uuid4().hex[:8]}",
                                       backend.usage)

    async def tick(self) -> list[WriterRun]:
        """Visit every due session, one at a time, while no client request is in flight."""
        runs: list[WriterRun] = []
        if self.writer.mode == "off":
            return runs
        for user, session, trigger in self.memory.idle.triggers.due():
            if self.client_busy():
                break
            dropped = self.memory.idle.triggers.dropped(user, session)
            run = await self.run(user, session, trigger,
                                 record=dropped if isinstance(dropped, Record) else None)
            self.memory.idle.triggers.visited(user, session, preempted=run.outcome == "preempted")
            if self.memory.metrics is not None:
                self.memory.metrics.background_run("writer", run.outcome)
            runs.append(run)
            self.memory.on_change(user)
        return self.kept(runs)
