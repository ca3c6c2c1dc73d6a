"""Answers through the proxy on each backend: the plain SDK call, blocks held back and
stored, the prefix cache on turn two, streaming, a tool loop, a refusal, a backend that
does not answer; and the proxy bench's harness."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from bench.load.plain_vllm import free_port
from tests.proxy.conftest import (
    BLOCK,
    USER,
    Backend,
    cache_counters,
    chat,
    proxy_app,
    vllm_backend,
)
from tests.served import ServedApp

pytestmark = pytest.mark.endpoint


def test_the_plain_sdk_call_through_the_proxy_is_answered_by_the_backend(proxy):
    import openai

    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="unused")
    answer = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0


def test_a_block_the_backend_writes_is_held_back_and_stored(proxy):
    response = chat(proxy.base_url, [{"role": "user", "content": "my kettle is blue"}],
                    script=BLOCK, max_tokens=120)
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["message"]["content"]
    assert "<tandem_memory" not in content and "› remembered: the kettle is blue" in content
    notes = proxy.app.state.tandem.memory.store(USER).list()
    assert [n.title for n in notes] == ["the kettle is blue"]
    assert response.headers["x-tandem-memory-token"]


def test_turn_two_is_served_from_the_backends_prefix_cache(proxy, backend):
    words = " ".join(f"word{i}" for i in range(120))
    first = [{"role": "user", "content": f"remember these: {words}"}]
    answer = chat(proxy.base_url, first, script="All noted, every one of them.")
    assert answer.status_code == 200, answer.text
    text = answer.json()["choices"][0]["message"]["content"]
    before = cache_counters(backend.base) if backend.kind == "vllm" else (0.0, 0.0)
    second = chat(proxy.base_url, [*first, {"role": "assistant", "content": text},
                                   {"role": "user", "content": "and now?"}], script="Now.")
    assert second.status_code == 200, second.text
    record = proxy.app.state.tandem.memory.records(USER, "kitchen")[0]
    usage = second.json()["usage"]
    if backend.kind == "vllm":
        hits, queries = (after - was for after, was in zip(cache_counters(backend.base),
                                                             before, strict=True))
        assert queries == usage["prompt_tokens"]  # one request reached the backend
        # every full 32-token block of turn one's prompt and answer came from the cache
        assert hits >= (len(record.ids) - 1) // 32 * 32 > 0.8 * len(record.ids)
    else:  # llama.cpp caches by the token: all of turn one but its last token
        assert usage["prompt_tokens_details"]["cached_tokens"] >= len(record.ids) - 1


def test_a_streamed_answer_through_the_proxy_holds_the_block_back(proxy):
    with httpx.stream("POST", f"{proxy.base_url}/v1/chat/completions", timeout=120, json={
            "model": "tiny", "stream": True, "script": BLOCK, "max_tokens": 120,
            "messages": [{"role": "user", "content": "my kettle is blue"}]}) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines()
                  if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert "<tandem_memory" not in text and "› remembered: the kettle is blue" in text
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "setup.py"}}\n</tool_call>'


def test_a_tool_loop_through_the_proxy_replays_the_call_as_the_backend_cached_it(proxy):
    question = [{"role": "user", "content": "What is in setup.py?"}]
    called = chat(proxy.base_url, question, script=CALL, tools=TOOLS, session="tools",
                  max_tokens=64)
    assert called.status_code == 200, called.text
    choice = called.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "read_file"
    assert json.loads(call["function"]["arguments"]) == {"path": "setup.py"}
    ledger = proxy.app.state.tandem.memory
    previous = list(ledger.latest_record(USER, "tools").ids)
    history = [*question, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "from setuptools"}]
    answered = chat(proxy.base_url, history, script="It uses setuptools.", tools=TOOLS,
                    session="tools")
    assert answered.json()["choices"][0]["message"]["content"] == "It uses setuptools."
    # the call's turn is replayed with the ids the backend produced, not re-rendered
    assert list(ledger.latest_record(USER, "tools").ids[:len(previous)]) == previous


def test_a_backend_that_does_not_answer_is_a_503_and_nothing_is_recorded(tmp_path):
    dead = Backend("vllm", f"http://127.0.0.1:{free_port()}", "tiny")  # nothing listens
    app = proxy_app(dead, tmp_path)
    served = ServedApp(app)
    served._thread.start()  # not ready: its health checks fail
    try:
        base = served.base_url
        ready = None
        for _ in range(100):
            try:
                ready = httpx.get(f"{base}/readyz", timeout=5)
                if ready.json().get("status") == "backend_down":
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        assert ready is not None and ready.status_code == 503
        assert ready.json()["status"] == "backend_down"
        refused = chat(base, [{"role": "user", "content": "hello"}], script="hi")
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "backend_unreachable"
        assert len(app.state.tandem.memory._ledger) == 0
    finally:
        served.stop()


def test_a_request_the_backend_refuses_is_a_4xx_with_its_reason_and_nothing_is_recorded(
        plain_vllm_server, tmp_path):
    app = proxy_app(vllm_backend(plain_vllm_server), tmp_path / "other",
                    model="no-such-model")
    served = ServedApp(app)
    served.start(ready_timeout=60)
    try:
        refused = chat(served.base_url, [{"role": "user", "content": "hello"}], script="hi")
        assert refused.status_code == 400  # the backend's 404 for the model: a refusal
        assert "the backend refused the request" in refused.json()["error"]["message"]
        streamed = httpx.post(f"{served.base_url}/v1/chat/completions", timeout=60, json={
            "model": "tiny", "stream": True, "script": "hi",
            "messages": [{"role": "user", "content": "hello"}]})
        assert streamed.status_code == 400
        assert len(app.state.tandem.memory._ledger) == 0
    finally:
        served.stop()


def test_the_proxy_bench_measures_the_cache_per_turn_and_the_proxys_own_time(
        llama_cpp_server):
    """The bench's harness on the session's llama.cpp server (tiny, which reports its
    cached tokens): its figures, not their size (bench/results/proxy/ has the run)."""
    from bench.proxy.run import measure

    row = measure("llama.cpp", llama_cpp_server, "tiny-llama",
                  ["Hello there, first turn.", "Second turn, please.", "And a third."], 3,
                  profile_name="tiny", tokenizer_dir="tiny-qwen3")
    direct, proxied = row["direct"], row["proxied"]
    assert [r["turn"] for r in proxied] == [1, 2, 3] and len(direct) == 3
    # the hidden context makes the proxied prompt longer, and the cache serves it
    assert all(p["prompt_tokens"] > d["prompt_tokens"]
               for p, d in zip(proxied, direct, strict=True))
    # (the first turn's hidden context is the card and the tools, no index by default:
    # the same for every session, so an earlier request may have cached it already)
    assert proxied[0]["cached_tokens"] <= proxied[0]["prompt_tokens"]
    assert proxied[2]["cached_fraction"] > 0.5 and len(row["later_turn_ratios"]) == 2
    assert row["overhead"]["requests"] == 3 and row["overhead"]["p50_ms"] > 0
    assert row["overhead"]["at_client"]["p50_ms"] >= row["overhead"]["p50_ms"]


def test_tandem_proxy_on_the_command_line_finds_the_backends_kind_and_answers(
        llama_cpp_server, tmp_path):
    """`tandem proxy` as a user starts it: the backend's kind read from its model list
    (llama.cpp's), the tokenizer given, the plain SDK call answered."""
    import os
    import sys

    import openai

    from bench.load.plain_vllm import server_process
    from engine.home import tandem_home
    from engine.model_builder import models_dir

    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(models_dir(tandem_home()), target_is_directory=True)
    port = free_port()
    command = [sys.executable, "-m", "server.cli", "proxy", "--profile", "tiny", "--port",
               str(port), "--backend", llama_cpp_server, "--tokenizer",
               str(models_dir(tandem_home()) / "tiny-qwen3")]
    env = {**os.environ, "TANDEM_HOME": str(home), "TANDEM_USER": USER}
    with server_process(command, env, port, "/readyz", 120) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
        answer = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=8)
        assert answer.choices[0].finish_reason in ("stop", "length")
        assert answer.usage.prompt_tokens > 0
        models = httpx.get(f"{base}/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in models] == ["tiny"]
