"""What runs a job's turn: the served engine, or an OpenAI-compatible endpoint.

A backend gets the conversation's prefix as chat messages (an engine backend may use the
ledger's exact ids for them instead, so the prefix cache serves the prompt) and the job's
instruction last, and answers in JSON under the job's schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class JobPrompt:
    user: str
    messages: list[dict[str, Any]]  # the conversation up to now: policy + core, WM, turns
    instruction: str  # the job's task, as a last user message


@dataclass
class JobAnswer:
    text: str
    finish_reason: str | None  # stop, length, abort (preempted by a client), error
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None  # a short code, never model text


class JobBackend(Protocol):
    provider: str  # "engine" or "endpoint"
    model: str

    async def answer(self, prompt: JobPrompt, schema: dict[str, Any], max_tokens: int,
                     script: str | None = None) -> JobAnswer:
        """The job's JSON answer (`script`: a scripted profile's forced answer)."""
