"""Every request field of the OpenAI chat API is honoured or refused with a 400 that names
it, on the real engine: none is silently ignored."""

from __future__ import annotations

import pytest

from tests.inprocess import InProcessApp

ASK = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def post(app: InProcessApp, **fields):
    return app.request("POST", "/v1/chat/completions",
                       json={"model": "tiny", "messages": ASK, "max_tokens": 4, **fields})


@pytest.mark.parametrize("field, value, code", [
    ("top_logprobs", 2, "unsupported_parameter"),  # without logprobs: true
    ("functions", [{"name": "f"}], "unsupported_parameter"),
    ("function_call", "auto", "unsupported_parameter"),
    ("audio", {"voice": "alloy"}, "unsupported_parameter"),
    ("modalities", ["text", "audio"], "unsupported_parameter"),
    ("store", True, "unsupported_parameter"),
    ("service_tier", "flex", "unsupported_parameter"),
    ("prediction", {"type": "content", "content": "x"}, "unsupported_parameter"),
    ("web_search_options", {}, "unsupported_parameter"),
])
def test_a_field_this_server_cannot_honour_is_a_400_naming_it(app, field, value, code):
    response = post(app, **{field: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and error["code"] == code
    assert error["message"].startswith(f"{field}: ")


def test_fields_with_no_effect_here_are_accepted(app):
    response = post(app, user="u-1", metadata={"run": "7"}, store=False, logprobs=False,
                    service_tier="auto", modalities=["text"], prompt_cache_key="k",
                    safety_identifier="s", min_p=0.05, repetition_penalty=1.1)
    assert response.status_code == 200, response.text


def test_a_field_this_server_does_not_know_is_ignored_and_logged_by_name(app, caplog):
    """vLLM's rule: an agent's own fields (Codex's client_metadata) must not stop it."""
    with caplog.at_level("WARNING", logger="tandem.server"):
        response = post(app, client_metadata={"session": "s-1"}, frobnicate=1)
    assert response.status_code == 200, response.text
    said = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert said and "'client_metadata'" in said[0] and "'frobnicate'" in said[0]
    assert "s-1" not in said[0]  # names only, never values


def test_logit_bias_is_honoured(app, tokenizer):
    token = tokenizer.encode(" banana", add_special_tokens=False)[0]
    response = post(app, logit_bias={str(token): 100}, temperature=0)
    text = response.json()["choices"][0]["message"]["content"]
    assert text == tokenizer.decode([token] * 4), text
    too_big = post(app, logit_bias={"99999999": 1})
    assert too_big.status_code == 400 and too_big.json()["error"]["param"] == "logit_bias"


@pytest.mark.parametrize("effort, think_block", [("none", True), ("high", False)])
def test_reasoning_effort_turns_thinking_off_or_on(app, effort, think_block):
    session = f"effort-{effort}"
    response = app.request("POST", "/v1/chat/completions", headers={"X-Tandem-Session": session},
                           json={"model": "tiny", "messages": ASK, "script": "Hi.",
                                 "reasoning_effort": effort})
    assert response.status_code == 200
    record = app.memory.latest_record("tester", session)
    text = app.app.state.tandem.engine.tokenizer.decode(list(record.ids))
    prompt_end = text.rindex("<|im_start|>assistant\n")
    empty_think = text[prompt_end:].startswith("<|im_start|>assistant\n<think>\n\n</think>")
    assert empty_think == think_block
