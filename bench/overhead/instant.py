"""An engine that answers at once: the served profile's tokenizer and chat template, and no
model behind them. The overhead bench measures the server's own work on the way to the
engine (ledger, hiding decision, rendering); an engine that prefills 32 prompts at once
on this machine's cores would measure vLLM instead, and take its CPU from the server."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

from engine.engine import Engine, load_tokenizer
from engine.generation import Delta, GenerationParams, close_timings
from engine.profiles import Profile
from engine.request_kind import RequestKind
from engine.stats import RequestTimings

ANSWER = "Noted; the tests read DATABASE_URL from the compose file."


class InstantEngine(Engine):
    """The seam's engine with no vLLM: each generation is one delta, the whole answer."""

    def __init__(self, profile: Profile, model_path: str, tokenizer=None,
                 answer_s: tuple[float, float] = (0.0, 0.0)) -> None:
        super().__init__(profile, None, model_path,
                         tokenizer or load_tokenizer(profile.tokenizer or model_path))
        self.answer_ids = self.tokenizer.encode(ANSWER, add_special_tokens=False)
        self.called_at: dict[str, float] = {}  # request id -> when generate was called
        # How long an answer takes, uniform between the two: the decode a real engine
        # spends on it, which spaces each client's requests as it would (on the loop's
        # timer, costing the server nothing).
        self.answer_s = answer_s
        self._random = random.Random(58)

    @property
    def dead(self) -> bool:
        return False

    async def generate(self, prompt_token_ids: list[int], params: GenerationParams,
                       kind: RequestKind = "client",
                       request_id: str | None = None) -> AsyncIterator[Delta]:
        request_id = request_id or f"{kind}-{len(self.called_at)}"
        self.called_at[request_id] = time.perf_counter()
        timings = RequestTimings(kind=kind, prompt_tokens=len(prompt_token_ids),
                                 request_id=request_id)
        self.stats.started(kind)
        if self.answer_s[1] > 0:
            await asyncio.sleep(self._random.uniform(*self.answer_s))
        timings.tokens(len(self.answer_ids))
        delta = Delta(request_id=request_id, text=ANSWER, token_ids=list(self.answer_ids),
                      finished=True, finish_reason="stop",
                      stop_reason=self.tokens.end_of_turn,
                      prompt_tokens=len(prompt_token_ids))
        close_timings(delta, timings, self.stats)
        yield delta

    async def abort(self, request_id: str) -> None:
        return None

    def shutdown(self) -> None:
        return None
