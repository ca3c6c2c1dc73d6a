"""vLLM's request extras on the real engine, where memory meets them: n choices, the
prompt's ids and log-probabilities, structured outputs. (vLLM's own tests of the same
fields run against `tandem serve` in tests/vllm_suite.)"""

from __future__ import annotations

import json
import re

import pytest

from tests.inprocess import InProcessApp

ASK = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path, scripted=False)


def post(app: InProcessApp, headers: dict | None = None, **fields):
    return app.request("POST", "/v1/chat/completions", headers=headers or {},
                       json={"model": "tiny", "messages": ASK, "max_tokens": 6, **fields})


def events(response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines()
            if line.startswith("data: {")]


def test_n_choices_are_answered_side_by_side_and_only_the_first_is_recorded(app):
    headers = {"X-Tandem-Session": "three"}
    response = post(app, headers, n=3, temperature=1.0, seed=7)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    usage = body["usage"]
    assert usage["completion_tokens"] == 18  # three answers of 6; one prompt, read once
    assert usage["total_tokens"] == usage["prompt_tokens"] + 18
    records = app.memory.ledger.records("tester", "three")
    assert len(records) == 1
    assert records[0].messages[-1].content == body["choices"][0]["message"]["content"]


def test_a_seed_gives_each_choice_its_own_and_the_same_again(app):
    first = [c["message"]["content"] for c in post(app, n=2, seed=11).json()["choices"]]
    again = [c["message"]["content"] for c in post(app, n=2, seed=11).json()["choices"]]
    assert first == again


def test_streamed_choices_each_end_once_and_usage_adds_their_answers(app):
    response = post(app, n=2, stream=True, stream_options={"include_usage": True})
    assert response.status_code == 200, response.text
    chunks = events(response)
    finishes = [c["choices"][0]["index"] for c in chunks
                if c["choices"] and c["choices"][0]["finish_reason"]]
    assert sorted(finishes) == [0, 1]
    assert chunks[-1]["usage"]["completion_tokens"] == 12


def test_the_last_streamed_text_comes_with_the_finish_reason(app):
    chunks = events(post(app, stream=True, temperature=0.0))
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"][0]["delta"].get("content")


def test_continuous_usage_counts_every_chunk(app):
    chunks = events(post(app, stream=True, stream_options={
        "include_usage": True, "continuous_usage_stats": True}))
    counts = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    assert counts == sorted(counts) and counts[-1] == 6


def test_stream_options_without_stream_is_a_400(app):
    response = post(app, stream_options={"include_usage": True})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream_options"


def test_a_request_that_asks_for_its_prompt_ids_gets_no_hidden_note(app):
    store = app.memory.store("tester")
    added = store.add(title="walrus secret", body="The walrus code is 4417.", kind="reference",
                      scope="user", source="cli", has_user_message=True)
    assert added.ok, added.reason
    tokenizer = app.app.state.tandem.engine.tokenizer
    ask = [{"role": "user", "content": "What is the walrus code?"}]
    shown = post(app, messages=ask, return_token_ids=True, prompt_logprobs=1).json()
    prompt = tokenizer.decode(shown["prompt_token_ids"])
    assert "4417" not in prompt and "What is the walrus code?" in prompt
    assert len(shown["prompt_logprobs"]) == len(shown["prompt_token_ids"])
    assert shown["prompt_logprobs"][0] is None
    assert tokenizer.decode(shown["choices"][0]["token_ids"]).startswith(
        shown["choices"][0]["message"]["content"] or "")
    # the same question without asking for its ids reads the note (memory is on)
    plain = post(app, messages=ask, headers={"X-Tandem-Session": "plain"})
    assert plain.status_code == 200
    record = app.memory.ledger.latest("tester", "plain")
    assert "4417" in tokenizer.decode(list(record.ids))


def test_structured_outputs_hold_the_answer_to_a_regex_or_a_choice(app):
    regex = r"[a-z]{3}-[0-9]{2}"
    body = post(app, max_tokens=12, structured_outputs={"regex": regex}).json()
    assert re.fullmatch(regex, body["choices"][0]["message"]["content"])
    body = post(app, structured_outputs={"choice": ["alpha", "beta"]}).json()
    assert body["choices"][0]["message"]["content"] in ("alpha", "beta")


@pytest.mark.parametrize("constraint", [
    {"regex": "[a-z"}, {"grammar": "root ::= "}, {"choice": []},
    {"regex": "a", "choice": ["b"]}, {"json": "{not json"},
])
def test_a_constraint_the_backend_cannot_hold_is_a_400(app, constraint):
    response = post(app, structured_outputs=constraint)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"].startswith("structured_outputs")


def test_min_tokens_holds_the_end_of_turn_back(app):
    body = post(app, min_tokens=6, max_tokens=6, temperature=0.0).json()
    assert body["usage"]["completion_tokens"] == 6
    assert post(app, min_tokens=7).status_code == 400


def test_reasoning_is_left_out_when_include_reasoning_is_false(served, tmp_path):
    app = InProcessApp(served, tmp_path)  # scripted: a think block, then the answer
    ask = {"messages": ASK, "script": "<think>Mull it over.</think>Done.",
           "chat_template_kwargs": {"enable_thinking": True}, "max_tokens": 40}
    shown = post(app, **ask).json()["choices"][0]["message"]
    assert shown["reasoning"] == "Mull it over."
    hidden = post(app, include_reasoning=False, **ask).json()["choices"][0]["message"]
    assert "reasoning" not in hidden and hidden["content"] == "Done."
