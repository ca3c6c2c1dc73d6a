"""The OpenAI chat route against the real engine (tiny profile, scripted answers)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

SCRIPT = "Hello! The build needs node 20, and the tests run with make test."
USER = [{"role": "user", "content": "What does the build need?"}]
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def client(served) -> httpx.Client:
    with httpx.Client(base_url=served.base_url, timeout=120) as c:
        yield c


def chat(client: httpx.Client, **body) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, **body})


def stream_events(client: httpx.Client, **body) -> list[dict]:
    """A chat stream's chunks; the stream, never cached, ends with `data: [DONE]`."""
    events = []
    with client.stream("POST", "/v1/chat/completions",
                       json={"model": "tiny", "messages": USER, "stream": True, **body}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        data = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]" and data.count("data: [DONE]") == 1
    for line in data[:-1]:
        events.append(json.loads(line[len("data: "):]))
    return events


def test_non_streamed_scripted_answer_equals_the_script(client):
    body = chat(client, script=SCRIPT).json()
    choice = body["choices"][0]
    assert choice["message"]["content"] == SCRIPT
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] > 5


def test_streamed_scripted_answer_equals_the_script(client):
    events = stream_events(client, script=SCRIPT, stream_options={"include_usage": True})
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == SCRIPT
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "stop"
    assert events[-1]["usage"]["prompt_tokens"] > 0


def test_sdk_non_streamed_and_streamed_answers_equal_the_script(sdk):
    whole = sdk.chat.completions.create(model="tiny", messages=USER, extra_body={"script": SCRIPT})
    assert whole.choices[0].message.content == SCRIPT
    pieces = sdk.chat.completions.create(model="tiny", messages=USER, stream=True,
                                         extra_body={"script": SCRIPT})
    assert "".join(c.choices[0].delta.content or "" for c in pieces if c.choices) == SCRIPT


def test_scripted_tool_call_comes_back_as_tool_calls(sdk):
    script = ('Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}'
              '\n</tool_call>')
    answer = sdk.chat.completions.create(model="tiny", messages=USER, tools=TOOLS,
                                         extra_body={"script": script})
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content.strip() == "Let me look."
    (call,) = choice.message.tool_calls
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == {"path": "a.py"}


def test_streamed_tool_call_comes_back_as_tool_calls(sdk):
    script = '<tool_call>\n{"name": "read_file", "arguments": {"path": "b.py"}}\n</tool_call>'
    chunks = list(sdk.chat.completions.create(model="tiny", messages=USER, tools=TOOLS,
                                              stream=True, extra_body={"script": script}))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [c.function.name for c in calls] == ["read_file"]
    assert json.loads(calls[0].function.arguments) == {"path": "b.py"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_scripted_think_comes_back_as_reasoning_under_both_names(client):
    script = "<think>\nThe user asks about the build.\n</think>\n\nNode 20."
    message = chat(client, script=script,
                   chat_template_kwargs={"enable_thinking": True}).json()["choices"][0]["message"]
    assert message["reasoning"].strip() == "The user asks about the build."
    assert message["reasoning_content"] == message["reasoning"]
    assert message["content"] == "Node 20."
    events = stream_events(client, script=script)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    for name in ("reasoning", "reasoning_content"):
        assert "".join(d.get(name, "") for d in deltas).strip() == (
            "The user asks about the build.")
    assert "".join(d.get("content", "") for d in deltas) == "Node 20."


def test_second_turn_is_served_from_the_prefix_cache(client, tiny_profile):
    first = chat(client, script=SCRIPT * 3).json()
    turn1 = first["usage"]
    history = USER + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                      {"role": "user", "content": "And the tests?"}]
    second = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": history, "script": "make test"}).json()
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    floor = turn1["prompt_tokens"] + turn1["completion_tokens"] - tiny_profile.block_size
    assert cached >= floor, (cached, turn1)


def test_tool_message_round_trip_is_rendered_and_answered(client):
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"a.py\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ]
    body = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": history, "tools": TOOLS, "script": "It prints hi."}).json()
    assert body["choices"][0]["message"]["content"] == "It prints hi."


def test_models_health_and_readiness(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    models = client.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny"]


def _metric(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.rsplit(" ", 1)[1])


def test_metrics_count_requests_tokens_and_ttft(client):
    names = ('tandem_requests_finished_total{kind="client"}',
             'tandem_ttft_seconds_count{kind="client"}',
             'tandem_http_responses_total{route="/v1/chat/completions",status="200"}')
    chat(client, script="warm")  # every series exists before the one counted
    before = client.get("/metrics").text
    chat(client, script="counted")
    after = client.get("/metrics").text
    for name in names:
        assert _metric(after, name) == _metric(before, name) + 1, name


def test_a_seeded_request_with_a_long_prompt_is_answered(client):
    """vLLM's CPU sampler crashed on seeded requests whose prefill was chunked."""
    long = [{"role": "user", "content": "token " * 3000}]
    response = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": long, "seed": 7, "temperature": 1.0, "max_tokens": 4})
    assert response.status_code == 200
    assert chat(client, script="still alive").json()["choices"][0]["message"]["content"] == (
        "still alive")


def test_metrics_parse_and_hold_vllms_own_families(client):
    from prometheus_client.parser import text_string_to_metric_families

    chat(client, script="for the counters")
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits",
                 "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
        assert name in families, sorted(n for n in families if n.startswith("vllm:"))
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    count = next(s.value for s in ttft.samples if s.name.endswith("_count"))
    assert count >= 1
    assert "tandem_requests_finished" in families  # the parser names counters without _total


def test_metrics_count_notes_hidden_tokens_background_runs_and_latency(served, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.inprocess import InProcessApp

    app = InProcessApp(served, tmp_path)
    block = ('Done. <tandem_memory op="add" scope="user" kind="reference">\ntitle: deploy day'
             '\n\nWe deploy on Tuesdays.\n</tandem_memory>')
    refused = 'Sure. <tandem_memory op="add" scope="nowhere">\ntitle: t\n\nb\n</tandem_memory>'
    app.chat([{"role": "user", "content": "We deploy on Tuesdays."}], block,
             headers={"X-Tandem-Session": "metrics-1"})
    app.chat([{"role": "user", "content": "Remember this."}], refused,
             headers={"X-Tandem-Session": "metrics-2"})
    job = app.request("POST", "/v1/conductor/jobs/verification_review/run",
                      json={"script": '{"flags":[]}'})
    assert job.status_code == 200, job.text
    text = app.request("GET", "/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("tandem_notes_written_total", (("op", "add"),))] == 1
    assert sum(v for (name, _), v in samples.items() if name == "tandem_notes_refused_total") >= 1
    assert samples[("tandem_hidden_context_tokens_total", (("kind", "shared"),))] > 0
    outcome = job.json()["outcome"]
    assert samples[("tandem_background_runs_total",
                    (("outcome", outcome), ("run", "verification_review")))] == 1
    assert samples[("tandem_ttft_seconds_count", (("kind", "client"),))] >= 2
    assert ("tandem_time_per_output_token_seconds_bucket",
            (("kind", "client"), ("le", "+Inf"))) in samples
    assert samples[("tandem_request_prompt_tokens_count", (("kind", "client"),))] >= 2


def test_a_streamed_request_is_in_the_engine_before_its_response_begins(served, engine):
    """So streamed and plain requests reach the engine in arrival order (server/http/sse.py):
    at the moment the response starts, on the server's own loop, the engine has it."""
    body = json.dumps({"model": "tiny", "messages": USER, "stream": True,
                       "script": "Short."}).encode()
    seen_at_start: list[int] = []

    async def call() -> None:
        sent = False

        async def receive() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)  # the client stays connected

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                seen_at_start.append(engine.stats.requests_started["client"])

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "path": "/v1/chat/completions", "raw_path": b"",
                 "query_string": b"", "root_path": "", "scheme": "http",
                 "headers": [(b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}
        await served.app(scope, receive, send)

    before = engine.stats.requests_started["client"]
    served.run(call())
    assert seen_at_start == [before + 1]
