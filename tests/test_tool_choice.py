"""`tool_choice` "required" and a named function are enforced, as vLLM does, on the real
engine (scripted): the answer is JSON under a schema over the call, and becomes the call."""

from __future__ import annotations

import json

import pytest

from tests.inprocess import InProcessApp

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "list_dir", "description": "List a folder",
        "parameters": {"type": "object", "properties": {"dir": {"type": "string"}},
                       "required": ["dir"]}}},
]
NAMED = {"type": "function", "function": {"name": "read_file"}}
QUESTION = [{"role": "user", "content": "What is in setup.py?"}]


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def test_required_returns_the_calls_with_finish_reason_tool_calls(sdk):
    script = '[{"name":"list_dir","parameters":{"dir":"src"}}]'
    answer = sdk.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS,
                                         tool_choice="required", extra_body={"script": script})
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.function.name == "list_dir" and json.loads(call.function.arguments) == {
        "dir": "src"}


def test_a_named_function_returns_its_call_with_finish_reason_stop(sdk):
    answer = sdk.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS,
                                         tool_choice=NAMED,
                                         extra_body={"script": '{"path":"setup.py"}'})
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    (call,) = choice.message.tool_calls
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == {"path": "setup.py"}


def test_a_named_function_is_streamed_as_one_tool_call(sdk):
    chunks = list(sdk.chat.completions.create(
        model="tiny", messages=QUESTION, tools=TOOLS, tool_choice=NAMED, stream=True,
        extra_body={"script": '{"path":"setup.py"}'}))
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert [c.function.name for c in calls] == ["read_file"]
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"


PICK = [{"type": "function", "function": {
    "name": "pick", "description": "Pick a colour",
    "parameters": {"type": "object", "properties": {"colour": {"enum": ["red", "green"]}},
                   "required": ["colour"], "additionalProperties": False}}}]


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "pick"}}])
def test_the_grammar_makes_even_a_random_model_call_the_tool(app, choice):
    """No script: the tiny model's random weights write anything they like, and the
    grammar still holds them to the call's schema."""
    for seed in (1, 2, 3):
        response = app.request("POST", "/v1/chat/completions", json={
            "model": "tiny", "messages": QUESTION, "tools": PICK, "tool_choice": choice,
            "parallel_tool_calls": False, "seed": seed, "max_tokens": 64})
        (call,) = response.json()["choices"][0]["message"]["tool_calls"]
        assert call["function"]["name"] == "pick"
        assert json.loads(call["function"]["arguments"]) in ({"colour": "red"},
                                                             {"colour": "green"})


def test_the_call_sent_back_with_its_result_finds_its_prompt_cached(app):
    """The record holds the call as the template renders it (the model sees its call in
    its own format next turn, not the grammar's compact JSON): the next turn is served
    from the cache up to the call, which it prefills once."""
    session = {"X-Tandem-Session": "forced"}
    _, _, response = app.chat(QUESTION, '{"path":"setup.py"}', headers=session, tools=TOOLS,
                              tool_choice=NAMED)
    message = response.json()["choices"][0]["message"]
    previous = app.memory.latest_record("tester", "forced").ids
    tokenizer = app.app.state.tandem.engine.tokenizer
    assert tokenizer.decode(list(previous)).endswith(
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "setup.py"}}\n</tool_call>'
        "<|im_end|>")
    history = [*QUESTION, {"role": "assistant", "content": None,
                           "tool_calls": message["tool_calls"]},
               {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                "content": "from setuptools import setup"}]
    _, usage, _ = app.chat(history, "It uses setuptools.", headers=session, tools=TOOLS)
    forced_prompt = response.json()["usage"]["prompt_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= forced_prompt - 32
    record = app.memory.latest_record("tester", "forced")
    assert list(record.ids[: len(previous)]) == list(previous)  # replayed as recorded


@pytest.mark.parametrize("body, message", [
    ({"tool_choice": "required"}, "has no tools"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS},
     "'nope', which is not among the tools"),
    ({"tool_choice": {"type": "function"}, "tools": TOOLS}, "tool_choice must be"),
])
def test_a_forcing_choice_that_cannot_be_met_is_a_400(app, body, message):
    response = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": QUESTION, "script": "x", **body})
    assert response.status_code == 400 and message in response.json()["error"]["message"]
