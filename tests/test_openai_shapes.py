"""Tandem's responses have the shape of plain vLLM's own server's (recorded in
tests/data/vllm_shapes.json by `python -m tests.record_vllm_shapes`; the endpoint session
checks the record against a live vLLM)."""

from __future__ import annotations

import httpx
import pytest

from tests.record_vllm_shapes import REQUESTS
from tests.shapes import differences, shape, stream_events, vllm_shapes


@pytest.fixture(scope="module")
def ours(served) -> dict[str, object]:
    out: dict[str, object] = {}
    base = f"{served.base_url}/v1"
    for name, (path, body) in REQUESTS.items():
        body = {"model": "tiny", "temperature": 0, **body}
        # memory off: a plain vLLM server has none (memory adds no field either way)
        headers = {"X-Tandem-Memory": "off"}
        out[name] = shape(httpx.post(f"{base}{path}", json=body, headers=headers,
                                     timeout=120).json())
        streamed = httpx.post(f"{base}{path}", headers=headers, timeout=120, json={
            **body, "stream": True, "stream_options": {"include_usage": True}})
        events = stream_events(streamed.text)
        with_choices = [e for e in events if e.get("choices")]
        out[f"{name}_chunk_first"] = shape(with_choices[0])
        out[f"{name}_chunk_last"] = shape(with_choices[-1])
        out[f"{name}_chunk_usage"] = shape(events[-1])
    return out


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
