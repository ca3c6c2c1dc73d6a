"""Proxy mode against real backends: plain vLLM's own OpenAI server on the tiny model (the
endpoint session's one engine, with Tandem's logits processors loaded so a test can script
an answer) and llama.cpp's own `llama-server` on the same model converted to GGUF (a
script there is a grammar of the script's ids). The memory path is the one `tandem
serve` runs; only the engine is an HTTP backend (`engine/proxy/http_backend.py`).

How much of a prompt a backend served from its cache: vLLM's own counters
(`vllm:prefix_cache_hits_total` on its /metrics; it reports no cached count in usage
unless started with --enable-prompt-tokens-details), llama.cpp's usage
(`prompt_tokens_details.cached_tokens`), which the proxy passes on."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time

import httpx
import pytest

from bench.load.plain_vllm import free_port
from tests.fault_relay import FAULTS, FaultRelay
from tests.served import ServedApp

pytestmark = pytest.mark.endpoint
USER = "tester"
BLOCK = ('Noted. <tandem_memory op="add" scope="user" kind="reference">\ntitle: the kettle '
         'is blue\n\nThe user keeps a blue kettle on the left of the stove.\n</tandem_memory>')


@dataclasses.dataclass(frozen=True)
class Backend:
    kind: str  # vllm, llama.cpp
    base: str  # its base URL, without /v1
    model: str
    wire: str = "completions"  # or chat: messages its own template renders


@pytest.fixture(params=["vllm", "llama.cpp", "llama.cpp-chat"])
def backend(request) -> Backend:
    if request.param == "vllm":
        return vllm_backend(request.getfixturevalue("plain_vllm_server"))
    wire = "chat" if request.param.endswith("-chat") else "completions"
    return Backend("llama.cpp", request.getfixturevalue("llama_cpp_server"), "tiny-llama",
                   wire)


def vllm_backend(url: str) -> Backend:
    return Backend("vllm", url.removesuffix("/v1"), "tiny-plain")


def proxy_app(backend: Backend, tmp_path, model: str | None = None, writer_policy=None,
              timeout_s: float = 600.0):
    from engine.engine import load_tokenizer
    from engine.home import tandem_home
    from engine.model_builder import models_dir
    from engine.profiles import load_profile
    from engine.proxy.http_backend import HttpEngine
    from server.app import create_app
    from server.turn.memory import MemorySettings

    profile = load_profile("tiny")
    profile = dataclasses.replace(profile, scripted=True, memory=dataclasses.replace(
        profile.memory, mode="on"))
    tokenizer = load_tokenizer(str(models_dir(tandem_home()) / "tiny-qwen3"))
    engine = HttpEngine(profile, tokenizer, backend.base, model or backend.model,
                        scripted_kernels=backend.kind == "vllm", kind=backend.kind,
                        timeout_s=timeout_s, wire=backend.wire)
    app = create_app(profile, tmp_path, engine=engine, writer_policy=writer_policy,
                     memory_settings=MemorySettings(user_name=USER))
    app.state.tandem.writer.writer.mode = "on"
    return app


@pytest.fixture
def proxy(backend, tmp_path):
    served = ServedApp(proxy_app(backend, tmp_path))
    served.start(ready_timeout=60)
    yield served
    served.stop()


def cache_counters(backend: str) -> tuple[float, float]:
    """The backend's prefix-cache hits and queries so far (tokens)."""
    text = httpx.get(f"{backend.removesuffix('/v1')}/metrics", timeout=10).text
    found = {}
    for name in ("hits", "queries"):
        match = re.search(rf"^vllm:prefix_cache_{name}_total(?:{{[^}}]*}})? (\S+)$", text,
                          re.MULTILINE)
        found[name] = float(match.group(1)) if match else 0.0
    return found["hits"], found["queries"]


def chat(base: str, messages: list[dict], script: str | None = None,
         session: str = "kitchen", **extra):
    body = {"model": "tiny", "messages": messages, "max_tokens": 24, **extra}
    if script is not None:
        body["script"] = script
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120,
                      headers={"X-Tandem-Session": session})


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
    record = proxy.app.state.tandem.memory.ledger.records(USER, "kitchen")[0]
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
    ledger = proxy.app.state.tandem.memory.ledger
    previous = list(ledger.latest(USER, "tools").ids)
    history = [*question, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "from setuptools"}]
    answered = chat(proxy.base_url, history, script="It uses setuptools.", tools=TOOLS,
                    session="tools")
    assert answered.json()["choices"][0]["message"]["content"] == "It uses setuptools."
    # the call's turn is replayed with the ids the backend produced, not re-rendered
    assert list(ledger.latest(USER, "tools").ids[:len(previous)]) == previous


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
        assert len(app.state.tandem.memory.ledger) == 0
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
        assert len(app.state.tandem.memory.ledger) == 0
    finally:
        served.stop()


WRITER_BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: tea before '
                'noon\n\nThe user drinks tea before noon, never coffee.\n</tandem_memory>')


def run_writer(base: str, session: str, **scripts) -> dict:
    response = httpx.post(f"{base}/v1/conductor/writer/run", timeout=120,
                          json={"session": session, **scripts})
    assert response.status_code == 200, response.text
    return response.json()


def backend_requests(backend: str) -> float:
    """Requests the backend has finished, by its own counter."""
    text = httpx.get(f"{backend.removesuffix('/v1')}/metrics", timeout=10).text
    return sum(float(m) for m in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$",
                                            text, re.MULTILINE))


def test_the_writer_runs_on_the_backend_and_its_notes_are_stored(proxy):
    assert chat(proxy.base_url, [{"role": "user", "content": "I only drink tea before noon"}],
                script="Tea it is.", session="drinks").status_code == 200
    run = run_writer(proxy.base_url, "drinks", gate_script="yes", script=WRITER_BLOCK)
    assert run["outcome"] == "wrote", run
    [note] = proxy.app.state.tandem.memory.store(USER).list()
    assert note.title == "tea before noon" and note.source == "writer"


def test_a_client_request_closes_the_writers_stream_before_it_reaches_the_backend(proxy):
    assert chat(proxy.base_url, [{"role": "user", "content": "notes on the garden"}],
                script="Noted.", session="garden").status_code == 200
    service = proxy.app.state.tandem.writer
    stats = proxy.app.state.tandem.engine.stats
    runs: list[dict] = []
    writer = threading.Thread(target=lambda: runs.append(run_writer(
        proxy.base_url, "garden", gate_script="yes",
        script=WRITER_BLOCK + " and more" * 400)))
    writer.start()
    deadline = time.monotonic() + 60
    while service.writer.live_tokens < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    at_arrival = service.writer.live_tokens
    answer = chat(proxy.base_url, [{"role": "user", "content": "quick question"}],
                  script="Quick answer.", session="other")
    writer.join(60)
    assert answer.json()["choices"][0]["message"]["content"] == "Quick answer."
    assert runs and runs[0]["outcome"] == "preempted", runs
    assert at_arrival >= 5 and runs[0]["tokens_generated"] < 400
    assert stats.background_yields["closed_for_client"] == 1
    assert stats.background_yields["client_beside_background"] == 0
    assert proxy.app.state.tandem.memory.store(USER).list() == []  # nothing half-written


def paid_proxy(backend: str, tmp_path, **limits):
    from server.background.writer_budget import WriterPolicy

    policy = WriterPolicy(price_in=1.0, price_out=4.0, backend="test", **limits)
    served = ServedApp(proxy_app(vllm_backend(backend), tmp_path, writer_policy=policy))
    served.start(ready_timeout=60)
    return served


def spend_rows(served: ServedApp) -> list[dict]:
    path = served.app.state.tandem.memory.root / "cognition" / "spend.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_paid_backends_writer_is_charged_a_ledger_row_a_request(plain_vllm_server, tmp_path):
    served = paid_proxy(plain_vllm_server, tmp_path, runs_per_day=1)
    try:
        assert chat(served.base_url, [{"role": "user", "content": "I only drink tea"}],
                    script="Tea.", session="paid").status_code == 200
        hits, _ = cache_counters(plain_vllm_server)
        run = run_writer(served.base_url, "paid", gate_script="yes", script=WRITER_BLOCK)
        assert run["outcome"] == "wrote", run
        rows = spend_rows(served)
        assert [r["client"] for r in rows] == ["harness:writer"] * 2  # the gate, the turn
        record = len(served.app.state.tandem.memory.ledger.latest(USER, "paid").ids)
        assert all(r["prompt_tokens"] > record and r["run"] == run["run_id"] for r in rows)
        assert rows[1]["completion_tokens"] == run["tokens_generated"]
        # both prompts open with the session's record, which the backend holds cached
        assert cache_counters(plain_vllm_server)[0] - hits >= 2 * (record // 32 * 32 - 32)
        # the day's one run is spent: the next is refused before any request is sent
        before = backend_requests(plain_vllm_server)
        again = run_writer(served.base_url, "paid", gate_script="yes", script=WRITER_BLOCK)
        assert again["outcome"] == "over_budget"
        assert "runs for today are spent" in again["refusals"][0]
        assert backend_requests(plain_vllm_server) == before and len(spend_rows(served)) == 2
    finally:
        served.stop()


def test_a_run_estimated_over_the_daily_cap_sends_nothing(plain_vllm_server, tmp_path):
    served = paid_proxy(plain_vllm_server, tmp_path, daily_usd=0.0001)
    try:
        assert chat(served.base_url, [{"role": "user", "content": "I only drink tea"}],
                    script="Tea.", session="cap").status_code == 200
        before = backend_requests(plain_vllm_server)
        run = run_writer(served.base_url, "cap", gate_script="yes", script=WRITER_BLOCK)
        assert run["outcome"] == "over_budget" and "daily 0.0001 USD" in run["refusals"][0]
        assert backend_requests(plain_vllm_server) == before and spend_rows(served) == []
    finally:
        served.stop()


@pytest.fixture
def relay(plain_vllm_server):
    relay = FaultRelay(plain_vllm_server.removesuffix("/v1"))
    served = ServedApp(relay.app)
    served.start(ready_timeout=30)
    relay.base = served.base_url
    yield relay
    served.stop()


REASONS = {"status_500": (502, "backend_error", "the backend answered 500: out of memory"),
           "cut": (502, "backend_error", "the backend's stream was cut"),
           "stall": (504, "backend_timeout", "the backend did not answer in time"),
           "error_event": (502, "backend_error", "the engine failed (injected)")}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("fault", FAULTS)
def test_a_backend_that_fails_mid_answer_is_a_502_or_504_and_nothing_is_kept(
        relay, tmp_path, fault, stream):
    relay.fault, relay.stall_s = fault, 6.0
    served = ServedApp(proxy_app(Backend("vllm", relay.base, "tiny-plain"), tmp_path,
                                 timeout_s=2.0))
    served.start(ready_timeout=60)
    try:
        status, code, reason = REASONS[fault]
        response = chat(served.base_url, [{"role": "user", "content": "my kettle is blue"}],
                        script=BLOCK, max_tokens=120, stream=stream, session="faults")
        if stream and fault in ("cut", "error_event"):
            # the answer had begun: the stream ends with the error, as vLLM's does
            assert response.status_code == 200
            events = [line[6:] for line in response.text.splitlines()
                      if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            error = json.loads(events[-2])["error"]
        else:
            assert response.status_code == status, response.text
            error = response.json()["error"]
        assert error["code"] == code and reason in error["message"], error
        memory = served.app.state.tandem.memory
        assert memory.ledger.records(USER, "faults") == []
        assert memory.store(USER).list() == []
        assert httpx.get(f"{served.base_url}/readyz", timeout=10).status_code == 200
        relay.fault = None  # the backend is back: the same turn goes through whole
        again = chat(served.base_url, [{"role": "user", "content": "my kettle is blue"}],
                     script=BLOCK, max_tokens=120, session="faults")
        assert again.status_code == 200, again.text
        assert [n.title for n in memory.store(USER).list()] == ["the kettle is blue"]
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
    assert proxied[0]["cached_tokens"] < proxied[0]["prompt_tokens"] // 2
    assert proxied[2]["cached_fraction"] > 0.5 and len(row["later_turn_ratios"]) == 2
    assert row["overhead"]["requests"] == 3 and row["overhead"]["p50_ms"] > 0
    assert row["overhead"]["at_client"]["p50_ms"] >= row["overhead"]["p50_ms"]
