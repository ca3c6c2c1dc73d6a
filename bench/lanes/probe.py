"""EngineProbe: the engine as the apps see it, noting when each request's first token came."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from engine.engine import Delta, Engine


class EngineProbe:
    """Delegates to the engine; records first-token time and final delta per request id."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.first_token_at: dict[str, float] = {}
        self.final: dict[str, Delta] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def generate(self, *args: Any, **kwargs: Any) -> AsyncIterator[Delta]:
        """The engine's generate, unchanged, watched."""
        async with aclosing(self._engine.generate(*args, **kwargs)) as deltas:
            async for delta in deltas:
                if delta.token_ids and delta.request_id not in self.first_token_at:
                    self.first_token_at[delta.request_id] = time.perf_counter()
                if delta.finished:
                    self.final[delta.request_id] = delta
                yield delta
