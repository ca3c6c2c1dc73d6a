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


# Where Tandem differs: OpenAI's own stream ends with an empty delta beside the finish
# reason, as Tandem's does (vLLM puts the last token there), on purpose; and vLLM's chat
# usage (recorded with --enable-prompt-tokens-details, as tests.record_vllm_shapes starts
# it) counts beside the cached tokens those its prefill wrote to the prefix cache
# (`created_cache_tokens`, vLLM's own field, not OpenAI's), which Tandem does not report.
CREATED_CACHE_TOKENS = ".usage.prompt_tokens_details.created_cache_tokens: only in vLLM's"
# A completion's usage carries no cached count, as vLLM's server started without the flag
# answers: vLLM's own tests compare a completion's usage whole with that
# (test_orca_metrics.py's `CompletionUsage(..., prompt_tokens_details=None)`).
COMPLETION_DETAILS = {".usage.prompt_tokens_details: only in vLLM's"}
ALLOWED = {
    "completion_chunk_usage": COMPLETION_DETAILS,
    "completion_echo_chunk_usage": COMPLETION_DETAILS,
    "completion_logprobs_chunk_usage": COMPLETION_DETAILS,
    "chat": {CREATED_CACHE_TOKENS},
    "chat_chunk_last": {".choices[0].delta.content: only in vLLM's"},
    "chat_chunk_usage": {CREATED_CACHE_TOKENS},
    "chat_logprobs": {CREATED_CACHE_TOKENS},
    "chat_logprobs_chunk_last": {".choices[0].delta.content: only in vLLM's",
                                 ".choices[0].logprobs: only in vLLM's"},
    "chat_logprobs_chunk_usage": {CREATED_CACHE_TOKENS},
}


@pytest.mark.parametrize("name", sorted(vllm_shapes()))
def test_the_response_has_vllms_shape(ours, name):
    found = set(differences(ours[name], vllm_shapes()[name]))
    assert found - ALLOWED.get(name, set()) == set()
