"""Tandem's responses have the shape of plain vLLM's own server's (recorded in
tests/data/vllm_shapes.json by `python -m tests.record_vllm_shapes`; the endpoint session
checks the record against a live vLLM)."""

from __future__ import annotations

import pytest

from tests.record_vllm_shapes import responses
from tests.shapes import differences, vllm_shapes


@pytest.fixture(scope="module")
def ours(served) -> dict[str, object]:
    # memory off: a plain vLLM server has none (memory adds no field either way)
    return responses(f"{served.base_url}/v1", "tiny", {"X-Tandem-Memory": "off"})


# Where Tandem differs on purpose: OpenAI's own stream ends with an empty delta beside the
# finish reason, as Tandem's does (vLLM puts the last token there); the usage carries the
# cached tokens (vLLM does with --enable-prompt-tokens-details).
ALLOWED = {
    "chat_chunk_last": {".choices[0].delta.content: only in vLLM's"},
    "chat_chunk_usage": {".usage.prompt_tokens_details: only in ours"},
    "chat_logprobs_chunk_last": {".choices[0].delta.content: only in vLLM's",
                                 ".choices[0].logprobs: only in vLLM's"},
    "chat_logprobs_chunk_usage": {".usage.prompt_tokens_details: only in ours"},
}


@pytest.mark.parametrize("name", sorted(vllm_shapes()))
def test_the_response_has_vllms_shape(ours, name):
    found = set(differences(ours[name], vllm_shapes()[name]))
    assert found - ALLOWED.get(name, set()) == set()
