"""The writer's gate reads a backend's answer as a chat API gives it ("Yes.", "No, ...",
or anything else) as well as a constrained engine's exact "yes"/"no"
(server/idle/writer.py): pure logic, the engine's deltas stood in for."""

from __future__ import annotations

import asyncio

import pytest

from engine.generation import Delta
from server.idle.writer import EngineWriterBackend


class OneAnswer:
    """An engine that answers every request with `text` (no log-probabilities)."""

    def __init__(self, tokenizer, text: str) -> None:
        from engine.special_tokens import special_tokens

        self.tokenizer = tokenizer
        self.tokens = special_tokens(tokenizer, "qwen")
        self.text = text

    async def generate(self, prompt_ids, params, kind="client", request_id=None):
        yield Delta("r", self.text, [1], finished=True, finish_reason="stop",
                    prompt_tokens=len(prompt_ids))

    def running(self, kind=None):
        return []


@pytest.mark.parametrize("text, answer, probability", [
    ("yes", "yes", 1.0), ("no", "no", 1.0),
    ("Yes.", "yes", 1.0), ("No, nothing to keep.", "no", 1.0),
    ("Sure, the user said where they live.", "yes", 0.5),  # no sure "no": the turn runs
    ("", "yes", 0.5),
])
def test_the_gate_reads_a_chat_apis_answer(tokenizer, text, answer, probability):
    backend = EngineWriterBackend(OneAnswer(tokenizer, text))
    assert asyncio.run(backend.gate([1, 2, 3], None)) == (answer, probability)


class RefusesBesideAClient(OneAnswer):
    """An HTTP backend's answer to background work while a client runs: nothing sent."""

    async def generate(self, prompt_ids, params, kind="client", request_id=None):
        yield Delta("r", "", [], finished=True, finish_reason="abort", prompt_tokens=0)


def test_a_request_refused_before_it_was_sent_costs_nothing(tokenizer):
    backend = EngineWriterBackend(RefusesBesideAClient(tokenizer, ""))
    assert asyncio.run(backend.gate([1, 2, 3], None)) == ("", 0.0)
    assert backend.usage == []  # no spend-ledger row for it


def test_a_request_that_ran_is_charged_what_the_backend_counted(tokenizer):
    backend = EngineWriterBackend(OneAnswer(tokenizer, "yes"))
    asyncio.run(backend.gate([1, 2, 3], None))
    [usage] = backend.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 1)
