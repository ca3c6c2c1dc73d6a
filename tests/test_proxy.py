"""Proxy mode against a real backend: plain vLLM's own OpenAI server on the tiny model
(the endpoint session's one engine, with Tandem's logits processors loaded so a test can
script an answer, and the tool-call ban as a logit bias). The memory path is the one
`tandem serve` runs; only the engine is an HTTP backend (`engine/proxy/http_backend.py`).

The backend's own prefix-cache counters (`vllm:prefix_cache_hits_total` and `..._queries_
total` on its /metrics) say how much of each prompt it served from cache."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time

import httpx
import pytest

from bench.load.plain_vllm import free_port
from tests.served import ServedApp

pytestmark = pytest.mark.endpoint
USER = "tester"
BLOCK = ('Noted. <tandem_memory op="add" scope="user" kind="reference">\ntitle: the kettle '
         'is blue\n\nThe user keeps a blue kettle on the left of the stove.\n</tandem_memory>')


def proxy_app(base_url: str, tmp_path, model: str = "tiny-plain", writer_policy=None):
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
    engine = HttpEngine(profile, tokenizer, base_url, model, scripted_kernels=True)
    app = create_app(profile, tmp_path, engine=engine, writer_policy=writer_policy,
                     memory_settings=MemorySettings(user_name=USER))
    app.state.tandem.writer.writer.mode = "on"
    return app


@pytest.fixture
def proxy(plain_vllm_server, tmp_path):
    served = ServedApp(proxy_app(plain_vllm_server.removesuffix("/v1"), tmp_path))
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


def test_turn_two_is_served_from_the_backends_prefix_cache(proxy, plain_vllm_server):
    words = " ".join(f"word{i}" for i in range(120))
    first = [{"role": "user", "content": f"remember these: {words}"}]
    answer = chat(proxy.base_url, first, script="All noted, every one of them.")
    assert answer.status_code == 200, answer.text
    text = answer.json()["choices"][0]["message"]["content"]
    hits, queries = cache_counters(plain_vllm_server)
    second = chat(proxy.base_url, [*first, {"role": "assistant", "content": text},
                                   {"role": "user", "content": "and now?"}], script="Now.")
    assert second.status_code == 200, second.text
    after_hits, after_queries = cache_counters(plain_vllm_server)
    prompt = second.json()["usage"]["prompt_tokens"]
    assert after_queries - queries == prompt  # one request reached the backend
    # every full 32-token block of turn one's prompt and answer came from the cache
    record = proxy.app.state.tandem.memory.ledger.records(USER, "kitchen")[0]
    assert after_hits - hits >= (len(record.ids) - 1) // 32 * 32 > 0.8 * len(record.ids)


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


def test_a_backend_that_does_not_answer_is_a_502_and_nothing_is_recorded(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
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
    app = proxy_app(plain_vllm_server.removesuffix("/v1"), tmp_path / "other",
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
    served = ServedApp(proxy_app(backend.removesuffix("/v1"), tmp_path, writer_policy=policy))
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
