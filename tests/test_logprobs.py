"""Log-probabilities in vLLM's chat format on the real engine; tokens the client never saw
(a held-back memory block, an engine tool's call) carry none."""

from __future__ import annotations

import json
import math

import pytest

from tests.inprocess import InProcessApp
from tests.shapes import shape, stream_events

ASK = [{"role": "user", "content": "Say something."}]
BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: deploy day\n\n'
         'We deploy on Tuesdays.\n</tandem_memory>')


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def post(app: InProcessApp, **fields):
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": ASK, "max_tokens": 5, "temperature": 0, **fields})
    assert response.status_code == 200, response.text
    return response


def test_each_token_has_its_logprob_and_the_likeliest_alternatives(app):
    choice = post(app, logprobs=True, top_logprobs=3).json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == 5
    assert "".join(e["token"] for e in content) == choice["message"]["content"]
    for entry in content:
        assert entry["logprob"] <= 0 and len(entry["top_logprobs"]) == 3
        assert entry["bytes"] == list(entry["token"].encode())
        # greedy: the sampled token is the likeliest
        assert math.isclose(entry["top_logprobs"][0]["logprob"], entry["logprob"], abs_tol=1e-4)
    assert shape(content[0]) == {"bytes": ["number"], "logprob": "number", "token": "string",
                                 "top_logprobs": [{"bytes": ["number"], "logprob": "number",
                                                   "token": "string"}]}


def test_without_logprobs_the_field_is_null_and_streamed_chunks_carry_them(app):
    assert post(app).json()["choices"][0]["logprobs"] is None
    response = post(app, logprobs=True, top_logprobs=1, stream=True)
    events = stream_events(response.text)
    entries = [e for ev in events for c in ev["choices"] if c.get("logprobs")
               for e in c["logprobs"]["content"]]
    text = "".join(c["delta"].get("content") or "" for ev in events for c in ev["choices"])
    assert len(entries) == 5 and "".join(e["token"] for e in entries) == text


def test_a_held_back_block_carries_no_logprobs(app):
    script = "Noted. " + BLOCK
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": ASK, "script": script, "logprobs": True})
    choice = response.json()["choices"][0]
    tokens = "".join(e["token"] for e in choice["logprobs"]["content"])
    assert "tandem_memory" not in tokens and tokens.startswith("Noted.")
    assert "› remembered: deploy day" in choice["message"]["content"]


def test_an_engine_tools_call_carries_no_logprobs(app):
    call = ('<tool_call>\n' + json.dumps({"name": "memory_search",
                                          "arguments": {"query": "deploy"}}) + '\n</tool_call>')
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": ASK, "script": ["Let me look. " + call, "Tuesdays."],
        "logprobs": True})
    choice = response.json()["choices"][0]
    tokens = "".join(e["token"] for e in choice["logprobs"]["content"])
    assert "tool_call" not in tokens and "memory_search" not in tokens
    assert tokens.startswith("Let me look.") and "Tuesdays." in tokens


def test_top_logprobs_without_logprobs_is_a_400(app):
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": ASK, "top_logprobs": 2})
    assert response.status_code == 400 and response.json()["error"]["param"] == "top_logprobs"
