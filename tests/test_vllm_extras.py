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
    records = app.memory.records("tester", "three")
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
    record = app.memory.latest_record("tester", "plain")
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
    # the empty grammar xgrammar's check lets by (vLLM refused it at add time: a 500),
    # beside the neighbours it was already refused with (a blank one, NUL, an empty schema)
    {"grammar": ""}, {"grammar": "  \n"}, {"regex": "a\x00"}, {"json": ""},
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


def test_the_server_switches_give_each_stream_usage_and_each_token_its_id(served, tmp_path):
    """vLLM's --enable-force-include-usage and --return-tokens-as-token-ids (profile keys
    of the same names): what a plain request gets without asking; a request may still
    say otherwise about token names."""
    app = InProcessApp(served, tmp_path, scripted=False, profile_changes={
        "force_include_usage": True, "return_tokens_as_token_ids": True})
    chunks = events(post(app, stream=True, logprobs=True))
    assert chunks and all(c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"]
                          + c["usage"]["completion_tokens"] for c in chunks)
    named = [lp["token"] for c in chunks if c["choices"] and c["choices"][0].get("logprobs")
             for lp in c["choices"][0]["logprobs"]["content"]]
    assert named and all(re.fullmatch(r"token_id:\d+", t) for t in named)
    body = post(app, logprobs=True, return_tokens_as_token_ids=False).json()
    shown = [lp["token"] for lp in body["choices"][0]["logprobs"]["content"]]
    assert shown and not any(t.startswith("token_id:") for t in shown)
    completion = app.request("POST", "/v1/completions", json={
        "model": "tiny", "prompt": "Say", "max_tokens": 3, "logprobs": 1}).json()
    assert all(t.startswith("token_id:") for t in completion["choices"][0]["logprobs"]["tokens"])


def test_without_the_switches_a_plain_stream_carries_no_usage(app):
    chunks = events(post(app, stream=True))
    assert chunks and all(c.get("usage") is None for c in chunks)


def test_named_ids_report_their_log_probabilities_beside_the_allowed_answer(app):
    """vLLM's logprob_token_ids (these ids' log-probabilities in place of the likeliest N)
    and allowed_token_ids (sampling only among these), on chat and completions."""
    body = post(app, max_tokens=1, temperature=0, logprobs=True, top_logprobs=5,
                logprob_token_ids=[5000], allowed_token_ids=[42],
                return_tokens_as_token_ids=True).json()
    step = body["choices"][0]["logprobs"]["content"][0]
    assert step["token"] == "token_id:42"
    assert {e["token"] for e in step["top_logprobs"]} == {"token_id:42", "token_id:5000"}
    completion = app.request("POST", "/v1/completions", json={
        "model": "tiny", "prompt": "Hello", "max_tokens": 1, "temperature": 0,
        "logprobs": 5, "logprob_token_ids": [5000], "allowed_token_ids": [42],
        "return_tokens_as_token_ids": True}).json()
    logprobs = completion["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["token_id:42"]
    assert set(logprobs["top_logprobs"][0]) == {"token_id:42", "token_id:5000"}


@pytest.mark.parametrize("fields, param", [
    ({"allowed_token_ids": [10**9]}, "allowed_token_ids"),
    ({"allowed_token_ids": []}, "allowed_token_ids"),
    ({"logprob_token_ids": [-1], "logprobs": True}, "logprob_token_ids"),
    ({"logprob_token_ids": [5]}, "logprob_token_ids"),  # without logprobs
])
def test_token_ids_the_model_does_not_have_are_a_400_naming_the_field(app, fields, param):
    response = post(app, **fields)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


SAYING = "Here is a common saying about apple. An apple a day, keeps"
OPEN = [{"role": "user", "content": "tell me a common saying"},
        {"role": "assistant", "content": SAYING}]


def test_a_continued_message_ends_the_prompt_and_echo_repeats_it(app, tokenizer):
    """vLLM's continue_final_message: the prompt stops inside the assistant's message (no
    end of turn, nothing hidden after it) and the answer goes on from there; with echo the
    client sees the message first. The turn is not recorded: memory stays out of it."""
    headers = {"X-Tandem-Session": "continued"}
    body = app.request("POST", "/v1/chat/completions", headers=headers, json={
        "model": "tiny", "messages": OPEN, "max_tokens": 4, "echo": True,
        "continue_final_message": True, "add_generation_prompt": False,
        "return_token_ids": True}).json()
    prompt = tokenizer.decode(body["prompt_token_ids"])
    assert prompt.rstrip().endswith(SAYING)
    assert body["choices"][0]["message"]["content"].startswith(SAYING)
    assert app.memory.records("tester", "continued") == []
    chunks = events(app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": OPEN, "max_tokens": 2, "echo": True, "stream": True,
        "continue_final_message": True, "add_generation_prompt": False}))
    assert chunks[1]["choices"][0]["delta"] == {"content": SAYING}


def test_without_the_generation_prompt_the_prompt_ends_with_the_last_message(app, tokenizer):
    body = post(app, add_generation_prompt=False, return_token_ids=True).json()
    prompt = tokenizer.decode(body["prompt_token_ids"])
    assert prompt.rstrip().endswith("<|im_end|>") and "<|im_start|>assistant" not in prompt


@pytest.mark.parametrize("fields", [
    {"messages": OPEN, "continue_final_message": True},  # with add_generation_prompt: true
    {"continue_final_message": True, "add_generation_prompt": False},  # the user's last
])
def test_a_message_that_cannot_be_continued_is_a_400(app, fields):
    response = app.request("POST", "/v1/chat/completions",
                           json={"model": "tiny", "messages": ASK, "max_tokens": 2, **fields})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "continue_final_message"


def test_a_batch_answers_each_conversation_as_its_own_turn(app):
    """vLLM's POST /v1/chat/completions/batch: choice i answers conversation i; with
    memory on each conversation is its own session, recorded as a plain request's."""
    conversations = [[{"role": "user", "content": "Reply: alpha"}],
                     [{"role": "user", "content": "Reply: beta"}]]
    body = app.request("POST", "/v1/chat/completions/batch", json={
        "model": "tiny", "messages": conversations, "max_tokens": 3, "temperature": 0,
        "logprobs": True, "return_tokens_as_token_ids": True}).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    answered = 0
    for conversation, choice in zip(conversations, body["choices"], strict=True):
        alone = post(app, messages=conversation, max_tokens=3, temperature=0).json()
        assert choice["message"]["content"] == alone["choices"][0]["message"]["content"]
        assert all(lp["token"].startswith("token_id:") for lp in choice["logprobs"]["content"])
        answered += alone["usage"]["completion_tokens"]
    assert body["usage"]["completion_tokens"] == answered


@pytest.mark.parametrize("fields, param", [
    ({"stream": True}, "stream"), ({"n": 2}, "n"), ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "not a list of conversations"}]}, "messages"),
])
def test_a_batch_refuses_what_it_does_not_take(app, fields, param):
    response = app.request("POST", "/v1/chat/completions/batch", json={
        "model": "tiny", "messages": [ASK], **fields})
    assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_handed_over_prompt_ids_are_the_prompt_as_they_are(app):
    """vLLM's kv_transfer_params.prompt_token_ids (a prefill server's hand-over): the
    engine reads those ids, not the request's messages, with memory out of it."""
    first = post(app, return_token_ids=True, temperature=0).json()
    ids = first["prompt_token_ids"]
    other = [{"role": "user", "content": "Something else entirely."}]
    body = post(app, messages=other, temperature=0, return_token_ids=True,
                kv_transfer_params={"prompt_token_ids": ids}).json()
    assert body["prompt_token_ids"] == ids and body["usage"]["prompt_tokens"] == len(ids)
    own = post(app, messages=other, return_token_ids=True).json()["prompt_token_ids"]
    assert own != ids
    chunks = events(post(app, messages=other, stream=True, return_token_ids=True,
                         kv_transfer_params={"prompt_token_ids": ids}))
    assert chunks[0]["prompt_token_ids"] == ids  # as vLLM: once, in the first chunk
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    for bad in ({"prompt_token_ids": [10**9]}, {"prompt_token_ids": []},
                {"do_remote_prefill": True}):
        refused = post(app, kv_transfer_params=bad)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "kv_transfer_params"


def test_a_thinking_budget_closes_the_think_block_after_that_many_tokens(served, tmp_path,
                                                                       tokenizer):
    """vLLM's thinking_token_budget: once that many tokens follow <think>, the engine
    writes </think> in place of the next. The answer is scripted (the test model never
    opens a think block); the budget's </think> overrides the script's own token there."""
    app = InProcessApp(served, tmp_path)
    think, think_end = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    script = "<think>\nfour five six seven</think>\n\nDone."

    def answer(**fields) -> tuple[list[int], dict]:
        body = post(app, script=script, max_tokens=30, return_token_ids=True, **fields).json()
        return body["choices"][0]["token_ids"], body["choices"][0]["message"]

    ids, message = answer(thinking_token_budget=3)
    assert ids[0] == think and ids[4] == think_end  # "\n", "four", " five", then the end
    assert message["reasoning"] == "four five"
    free, message = answer()
    assert think_end not in free[:6] and message["reasoning"] == "four five six seven"
    assert post(app, thinking_token_budget=-2).status_code == 400


@pytest.mark.parametrize("fields, param", [
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"prompt_logprobs": -1}, "prompt_logprobs"),
])
def test_more_log_probabilities_than_the_server_gives_are_a_400(app, fields, param):
    """vLLM's --max-logprobs (20 by default; the profile's max_logprobs): -1, the whole
    vocabulary, only on a server started with -1."""
    response = post(app, **fields)
    assert response.status_code == 400 and response.json()["error"]["param"] == param
