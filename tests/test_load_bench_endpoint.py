"""The load bench's `vllm_memory_tokens` lane on plain vLLM's own server: its own pytest
session with the other endpoint tests (`-m endpoint`)."""

from __future__ import annotations

import asyncio

import pytest

from bench.load.clients import LoadPlan, run_round
from bench.load.run import memory_tokens_shape

pytestmark = pytest.mark.endpoint


def hidden_tokens_of_memory_on(model_dir) -> int:
    """The engine's tool catalog and the memory card as Qwen's template renders them."""
    from transformers import AutoTokenizer

    from conductor.hidden.card import memory_card
    from server.turn.answering.engine_tools import DEFINITIONS

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def tokens(messages, tools=None) -> int:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        return len(tokenizer.encode(text, add_special_tokens=False))

    hi = [{"role": "user", "content": "hi"}]
    card = {"role": "system", "content": memory_card()}
    return tokens([card, *hi], list(DEFINITIONS)) - tokens(hi)


def test_the_memory_tokens_lane_sends_vllm_the_engine_tools_and_the_card(plain_vllm_server,
                                                                          built_models):
    """What memory on hides in a prompt, sent as plain request parts: vLLM renders the
    tools with tool_choice none (Tandem would drop them) and the card as the system
    prompt, as many tokens as memory on adds (its tool catalog and card)."""
    base = plain_vllm_server.removesuffix("/v1")
    plan = LoadPlan(clients=2, max_tokens=2)
    plain = asyncio.run(run_round(base, "tiny-plain", plan, seed=9))
    hidden = asyncio.run(run_round(base, "tiny-plain", plan, seed=9,
                                   shape=memory_tokens_shape()))
    assert (plain["errors"], hidden["errors"]) == (0, 0)
    added = hidden["prompt_tokens_mean"] - plain["prompt_tokens_mean"]
    assert added == hidden_tokens_of_memory_on(built_models / "tiny-qwen3")
    assert 350 <= added <= 450  # the tool catalog (about 260) and the card (about 135)
