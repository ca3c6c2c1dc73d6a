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
    assert app.memory.latest_record("tester", "s-anything") is None
    assert app.memory.store("tester").list() == []


@pytest.mark.parametrize("body, status, param", [
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": [999999999]}, 400, "prompt"),
    ({"prompt": "x", "suffix": "y"}, 400, "suffix"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"prompt": "x", "n": 17}, 400, "n"),
    ({"prompt": ["a"] * 17, "n": 2}, 400, "n"),
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
    # as vLLM's: the likeliest two and the chosen token itself
    for token, top in zip(choice.logprobs.tokens, choice.logprobs.top_logprobs, strict=True):
        assert token in top and 2 <= len(top) <= 3
    offsets = choice.logprobs.text_offset
    assert offsets[0] == 0 and offsets == sorted(offsets)


def test_echo_with_logprobs_covers_the_prompt_then_the_answer(sdk, tokenizer):
    prompt_ids = tokenizer.encode("The cat sat", add_special_tokens=False)
    answer = sdk.completions.create(model="tiny", prompt="The cat sat", max_tokens=3,
                                    temperature=0, echo=True, logprobs=1)
    logprobs = answer.choices[0].logprobs
    assert "".join(logprobs.tokens) == answer.choices[0].text
    assert len(logprobs.tokens) == len(prompt_ids) + 3
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(isinstance(v, float) for v in logprobs.token_logprobs[1:])


def test_n_choices_and_a_batch_are_numbered_prompt_by_prompt(sdk):
    answer = sdk.completions.create(model="tiny", prompt=["one", "two"], n=2, max_tokens=2,
                                    seed=3)
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    assert answer.usage.completion_tokens == 8
    streamed = sdk.completions.create(model="tiny", prompt=["one", "two"], n=2, max_tokens=2,
                                      seed=3, stream=True)
    finished = sorted(c.choices[0].index for c in streamed
                      if c.choices and c.choices[0].finish_reason)
    assert finished == [0, 1, 2, 3]


def test_truncation_keeps_the_side_asked_for(sdk):
    ids = list(range(100, 108))
    for side, kept in (("left", ids[-4:]), ("right", ids[:4])):
        answer = sdk.completions.create(model="tiny", prompt=ids, max_tokens=1, extra_body={
            "truncate_prompt_tokens": 4, "truncation_side": side, "return_token_ids": True})
        assert answer.choices[0].prompt_token_ids == kept


def test_beam_search_answers_with_the_n_best_beams_of_each_prompt(sdk, tokenizer):
    """vLLM's use_beam_search: choice j of prompt i is its j-th best beam, so two copies
    of a prompt get the same beams; the engine, asked for the beams' own log-probabilities,
    ranks them as they came."""
    answer = sdk.completions.create(model="tiny", prompt=["Hello, my name is"] * 2, n=2,
                                    max_tokens=5, temperature=0,
                                    extra_body={"use_beam_search": True,
                                                "return_token_ids": True})
    beams = [c.token_ids for c in answer.choices]
    assert len(beams) == 4 and beams[0] != beams[1] and beams[:2] == beams[2:]
    assert [c.text for c in answer.choices[:2]] == [tokenizer.decode(b) for b in beams[:2]]
    prompt = tokenizer.encode("Hello, my name is", add_special_tokens=False)

    def score(beam: list[int]) -> float:
        echoed = sdk.completions.create(model="tiny", prompt=prompt + beam, max_tokens=1,
                                        temperature=0, echo=True, logprobs=0)
        return sum(echoed.choices[0].logprobs.token_logprobs[len(prompt):len(prompt) + len(beam)])

    if len(beams[0]) == len(beams[1]):  # the same length: the likelier sequence first
        assert score(beams[0]) >= score(beams[1]) - 1e-3


@pytest.mark.parametrize("fields", [{"stream": True}, {"logprobs": 1}])
def test_beam_search_refuses_what_it_cannot_give(app, fields):
    response = app.request("POST", "/v1/completions", json={
        "model": "tiny", "prompt": "Hi", "max_tokens": 2, "use_beam_search": True, **fields})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == next(iter(fields))
