"""The smol profile: SmolLM2-135M-Instruct built from the GGUF file its package ships (a
real build, on the real file) and served by vLLM; it answers in words. A pytest session of
its own (`-m smol`, run by make test), so each session starts one engine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import openai
import pytest

pytestmark = pytest.mark.smol


@pytest.fixture(scope="module")
def smol_home(tmp_path_factory) -> Path:
    """A TANDEM_HOME where the smol model is built afresh from the package's GGUF file."""
    from engine.model_builder import ensure_model

    home = tmp_path_factory.mktemp("smol-home")
    lines: list[str] = []
    ensure_model(home, "smollm2-135m", progress=lines.append)
    assert any("dequantizing SmolLM2-135M-Instruct.Q4_1.gguf" in line for line in lines)
    return home


@pytest.fixture(scope="module")
def smol(smol_home: Path):
    from tests.served import serving

    with serving("smol", smol_home) as server:
        yield server


def test_the_build_is_plain_float32_with_the_models_own_tokenizer(smol_home):
    from engine.model_builder import is_intact, model_path

    folder = model_path(smol_home, "smollm2-135m")
    assert is_intact(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert "<|im_start|>" in (folder / "chat_template.jinja").read_text()


def test_smol_answers_the_plain_sdk_call_in_words(smol):
    client = openai.OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused")
    answer = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Say hello and tell me one fact "
                                                            "about the sun."}],
        max_tokens=40, temperature=0)
    text = answer.choices[0].message.content or ""
    assert len(re.findall(r"[A-Za-z]{2,}", text)) >= 5, text
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_smol_streams_and_offers_no_engine_tools(smol):
    client = openai.OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused")
    chunks = list(client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=12, temperature=0, stream=True,
        extra_headers={"X-Tandem-Session": "smol-stream"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert re.search(r"[A-Za-z]{3,}", text), text
    memory = smol.app.state.tandem.memory
    record = memory.latest_record(memory.settings.user_name, "smol-stream")
    tokenizer = smol.app.state.tandem.engine.tokenizer
    assert "memory_search" not in tokenizer.decode(list(record.ids))


def test_remember_that_on_smol_is_stored_and_found_in_a_new_session(smol):
    """A 135M model writes no memory block of its own (issue 60: stored 0.00 before): the
    server keeps the user's words, and a new session's prompt holds them."""
    client = openai.OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused")
    first = client.chat.completions.create(
        model="smol", messages=[{"role": "user",
                                 "content": "Remember that my locker code is 4417"}],
        max_tokens=20, temperature=0, extra_headers={"X-Tandem-Session": "locker-one"})
    assert first.choices[0].message.content.endswith("› remembered: My locker code is 4417")
    second = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "What is my locker code?"}],
        max_tokens=20, temperature=0, extra_headers={"X-Tandem-Session": "locker-two"})
    state = smol.app.state.tandem
    record = state.memory.latest_record(state.memory.settings.user_name, "locker-two")
    prompt = state.engine.tokenizer.decode(list(record.ids))
    assert "My locker code is 4417." in prompt
    assert second.choices[0].finish_reason in ("stop", "length")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def test_tools_are_refused_with_the_reason_where_smols_template_cannot_show_them(smol):
    """SmolLM2's template renders each message's content and nothing else: `tools` left to
    the model (tool_choice auto) are a 400 naming the field on the chat route and the
    Responses API, not a prompt without them and an agent waiting for a call for ever.
    tool_choice 'none' and a forced call, which the server writes from the schema, pass."""
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    with httpx.Client(base_url=smol.base_url, timeout=120) as client:
        for body in ({"messages": messages, "tools": [WEATHER]},
                     {"messages": messages, "tools": [WEATHER], "tool_choice": "auto"}):
            refused = client.post("/v1/chat/completions", json={"model": "smol", **body})
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["param"] == "tools", error
            assert "chat template has no tool section" in error["message"], error
        refused = client.post("/v1/responses", json={
            "model": "smol", "input": "What is the weather in Oslo?",
            "tools": [{"type": "function", **WEATHER["function"]}]})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "tools", refused.text
        assert "no tool section" in refused.json()["error"]["message"]
        plain = client.post("/v1/chat/completions", json={
            "model": "smol", "messages": messages, "tools": [WEATHER], "tool_choice": "none",
            "max_tokens": 4, "temperature": 0})
        assert plain.status_code == 200, plain.text
        forced = client.post("/v1/chat/completions", json={
            "model": "smol", "messages": messages, "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "max_tokens": 60, "temperature": 0})
        assert forced.status_code == 200, forced.text
        calls = forced.json()["choices"][0]["message"].get("tool_calls")
        assert calls and calls[0]["function"]["name"] == "get_weather", forced.text
