"""The two ways a cognition job's turn runs: on the served engine (a background request,
its prompt on the conversation's exact ids where the ledger holds them), or on an
OpenAI-compatible endpoint (the same JSON schema through `response_format`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import httpx

from conductor.memory.types import JobAnswer, JobPrompt, LatestRecord
from engine.backend import EngineBackend
from engine.generation import GenerationParams

CONTINUOUS_SESSION = "continuous"
JOB_TEMPERATURE = 0.3
ENDPOINT_TIMEOUT_S = 600.0


class EngineJobBackend:
    provider = "engine"

    def __init__(self, engine: EngineBackend, latest_record: LatestRecord,
                 on_tokens: Callable[[int], None] = lambda n: None,
                 cache_salt: str | None = None) -> None:
        """`on_tokens(n)`: told of each step's new tokens (the bench watches a job decode);
        `cache_salt`: the user's, so the job's prompt finds the conversation cached;
        `latest_record`: a session's newest record in the ledger."""
        self._engine = engine
        self._latest_record = latest_record
        self._on_tokens = on_tokens
        self._cache_salt = cache_salt
        self.model = engine.profile.name

    def prompt_ids(self, prompt: JobPrompt, room_for: int) -> list[int]:
        """The conversation's last record (its exact ids, cached) when the ledger holds
        one and it leaves `room_for` tokens of answer; else the conversation rendered,
        its oldest turns left out until it does; then the instruction as a user turn."""
        tokenizer = self._engine.tokenizer
        limit = self._engine.profile.max_model_len - room_for
        turn = (f"<|im_start|>user\n{prompt.instruction}<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\n")
        record = self._latest_record(prompt.user, CONTINUOUS_SESSION)
        if record is not None:
            closing = [] if record.ended_cleanly else [self._engine.tokens.end_of_turn]
            ids = [*record.ids, *closing, *tokenizer.encode("\n" + turn,
                                                            add_special_tokens=False)]
            if len(ids) <= limit:
                return ids
        head, turns = prompt.messages[:2], list(prompt.messages[2:])
        while True:
            text = tokenizer.apply_chat_template([*head, *turns], tokenize=False,
                                                 add_generation_prompt=False,
                                                 enable_thinking=False)
            ids = tokenizer.encode(text + turn, add_special_tokens=False)
            if len(ids) <= limit or not turns:
                return ids
            turns = _without_oldest_turn(turns)

    async def answer(self, prompt: JobPrompt, schema: dict[str, Any], max_tokens: int,
                     script: str | None = None) -> JobAnswer:
        ids = self.prompt_ids(prompt, max_tokens)
        room = self._engine.profile.max_model_len - len(ids)
        if room < 16:
            return JobAnswer("", "error", prompt_tokens=len(ids), error="no_room_in_context")
        script_ids = (tuple(self._engine.tokenizer.encode(script, add_special_tokens=False))
                      if script is not None else None)
        params = GenerationParams(max_tokens=min(max_tokens, room), temperature=JOB_TEMPERATURE,
                                  json_schema=schema, script_ids=script_ids,
                                  cache_salt=self._cache_salt)
        out = JobAnswer("", None, prompt_tokens=len(ids))
        async for delta in self._engine.generate(ids, params, kind="background"):
            out.text += delta.text
            out.output_tokens += len(delta.token_ids)
            self._on_tokens(len(delta.token_ids))
            if delta.finished:
                out.finish_reason = delta.finish_reason
                out.cached_tokens = delta.cached_tokens
        return out


def _without_oldest_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages from the second user message on (a turn starts at a user message)."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"]
    return messages[starts[1]:] if len(starts) > 1 else []


class EndpointJobBackend:
    """An OpenAI-compatible server; its API key, when it needs one, in an environment
    variable (never in a file)."""

    provider = "endpoint"

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env

    async def answer(self, prompt: JobPrompt, schema: dict[str, Any], max_tokens: int,
                     script: str | None = None) -> JobAnswer:
        body = {"model": self.model, "max_tokens": max_tokens, "temperature": JOB_TEMPERATURE,
                "messages": [*prompt.messages, {"role": "user", "content": prompt.instruction}],
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": "job_answer", "schema": schema}}}
        headers = {}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            async with httpx.AsyncClient(timeout=ENDPOINT_TIMEOUT_S) as client:
                response = await client.post(f"{self.base_url}/chat/completions", json=body,
                                             headers=headers)
        except httpx.HTTPError as exc:
            return JobAnswer("", "error", error=f"endpoint_unreachable:{type(exc).__name__}")
        if response.status_code != 200:
            return JobAnswer("", "error", error=f"endpoint_http_{response.status_code}")
        try:
            data = response.json()
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            return JobAnswer(choice["message"].get("content") or "", choice.get("finish_reason"),
                             prompt_tokens=usage.get("prompt_tokens", 0),
                             cached_tokens=details.get("cached_tokens") or 0,
                             output_tokens=usage.get("completion_tokens", 0))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return JobAnswer("", "error", error="endpoint_answer_unreadable")
