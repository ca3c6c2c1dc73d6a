"""The engine seam: what the turn, the background services and the routes ask of an engine.

`engine.engine.Engine` (vLLM's AsyncLLM in this process) is today's one implementation; an
engine over HTTP (proxy mode) is another. Code past this seam imports `EngineBackend` and
these errors, never `engine.engine`, so it runs on either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, runtime_checkable

from engine.generation import Delta, GenerationParams
from engine.profiles import Profile
from engine.request_kind import RequestKind
from engine.special_tokens import SpecialTokens
from engine.stats import EngineStats


class RequestRejected(ValueError):
    """vLLM refused the request when it was added: the caller's input, not the server."""


class EngineDead(RuntimeError):
    """The engine core process is gone (killed, out of memory): nothing it was doing will
    finish and nothing new can start until the server is restarted."""

    def __init__(self) -> None:
        super().__init__("the engine core process stopped")


class BackendFailed(RuntimeError):
    """An engine over HTTP lost a request to its backend (unreachable, a 5xx, a cut
    stream, a timeout): the client gets a 502 (504 for a timeout) with `reason`."""

    def __init__(self, reason: str, status: int = 502) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@runtime_checkable
class EngineBackend(Protocol):
    """An engine that takes prompt token ids and streams deltas back."""

    profile: Profile  # the served profile: model, context length, tool-call format
    tokenizer: Any  # the served model's Hugging Face tokenizer, its chat template included
    tokens: SpecialTokens  # the served model's special ids (end of turn, tool call, think)
    fingerprint: str  # the model, tokenizer and template: ledger records are kept per one
    stats: EngineStats
    count_tokens: Callable[[str], int]  # tokens in a text as a prompt holds it
    # Where a prefix is reusable from the cache, on a hybrid model in align mode: its
    # recurrent state is kept at block boundaries only, so the shared context is padded to
    # end on one (server/turn/prompt.py). None: any whole KV block is (a dense model).
    reuse_block: int | None

    def generate(self, prompt_token_ids: list[int], params: GenerationParams,
                 kind: RequestKind = "client",
                 request_id: str | None = None) -> AsyncIterator[Delta]:
        """Stream one generation (each Delta says how many prompt tokens were cached);
        closing the iterator early aborts it. EngineDead when the engine is gone,
        RequestRejected when it refuses the request."""
        ...

    async def abort(self, request_id: str) -> None: ...

    @property
    def dead(self) -> bool: ...

    def running(self, kind: RequestKind | None = None) -> list[str]:
        """The ids of the requests in flight, of one kind or all."""
        ...
