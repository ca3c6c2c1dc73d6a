"""POST /v1/completions on the real engine: text and token-id prompts, batches, echo, stop,
streaming, and no memory (a completion has no conversation)."""

from __future__ import annotations

import pytest

from tests.inprocess import InProcessApp


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def test_a_text_prompt_is_completed_with_sixteen_tokens_by_default(sdk):
    answer = sdk.completions.create(model="tiny", prompt="Once upon a time", seed=1)
    assert answer.object == "text_completion" and answer.usage.completion_tokens == 16
    assert answer.choices[0].finish_reason == "length" and answer.choices[0].text


def test_token_ids_a_batch_and_echo(sdk, tokenizer):
    ids = tokenizer.encode("The cat sat", add_special_tokens=False)
    answer = sdk.completions.create(model="tiny", prompt=[ids, ids], max_tokens=3, echo=True,
                                    temperature=0)
    texts = [c.text for c in answer.choices]
    assert [c.index for c in answer.choices] == [0, 1] and texts[0] == texts[1]
    assert texts[0].startswith("The cat sat")
    assert answer.usage.prompt_tokens == 2 * len(ids)


def test_a_streamed_completion_equals_the_whole_one(sdk):
    whole = sdk.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0)
    chunks = list(sdk.completions.create(model="tiny", prompt="Hello", max_tokens=6,
                                         temperature=0, stream=True,
                                         stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == 6


def test_a_stop_string_ends_the_completion(sdk):
    first = sdk.completions.create(model="tiny", prompt="Hello", max_tokens=8, temperature=0)
    text = first.choices[0].text
    cut = text[len(text) // 2:][:2] or text[:1]
    stopped = sdk.completions.create(model="tiny", prompt="Hello", max_tokens=8, temperature=0,
                                     stop=[cut])
    assert cut not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"


def test_a_completion_leaves_no_memory_behind(app):
    response = app.request("POST", "/v1/completions",
                           json={"model": "tiny", "prompt": "Remember this", "max_tokens": 2})
    assert response.status_code == 200
    assert app.memory.ledger.latest("tester", "s-anything") is None
    assert app.memory.store("tester").list() == []


@pytest.mark.parametrize("body, status, param", [
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": [999999999]}, 400, "prompt"),
    ({"prompt": "x", "suffix": "y"}, 400, "suffix"),
    ({"prompt": ["a", "b"], "stream": True}, 400, "prompt"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "model"),
])
def test_bad_completion_requests_get_a_clear_error(app, body, status, param):
    response = app.request("POST", "/v1/completions", json={"model": "tiny", **body})
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param


def test_logprobs_cover_each_token_of_the_text(sdk, app):
    answer = sdk.completions.create(model="tiny", prompt="Hello", max_tokens=5, temperature=0,
                                    logprobs=2)
    choice = answer.choices[0]
    assert "".join(choice.logprobs.tokens) == choice.text
    assert len(choice.logprobs.token_logprobs) == 5
    assert all(len(top) == 2 for top in choice.logprobs.top_logprobs)
    offsets = choice.logprobs.text_offset
    assert offsets[0] == 0 and offsets == sorted(offsets)
    refused = app.request("POST", "/v1/completions", json={
        "model": "tiny", "prompt": "x", "echo": True, "logprobs": 1})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "logprobs"
