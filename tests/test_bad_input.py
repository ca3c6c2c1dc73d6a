"""Bad requests get an OpenAI-style error body with the right status, never a traceback."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def client(served) -> httpx.Client:
    with httpx.Client(base_url=served.base_url, timeout=60) as c:
        yield c


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"]
    if code:
        assert error["code"] == code
    return error


def test_malformed_json_is_400(client):
    response = client.post("/v1/chat/completions", content=b"{not json",
                           headers={"content-type": "application/json"})
    assert_error(response, 400, "invalid_json")


def test_a_body_that_is_not_an_object_is_400(client):
    assert_error(client.post("/v1/chat/completions", json=[1, 2]), 400, "invalid_json")


@pytest.mark.parametrize("body, param", [
    ({"model": "tiny", "messages": "hi"}, "messages"),
    ({"model": "tiny", "messages": []}, "messages"),
    ({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ({"model": 7, "messages": USER}, "model"),
    ({"model": "tiny", "messages": USER, "stream": "yes"}, "stream"),
])
def test_wrong_types_are_400_naming_the_field(client, body, param):
    error = assert_error(client.post("/v1/chat/completions", json=body), 400, "invalid_value")
    assert error["param"] == param


def test_unknown_model_is_404(client):
    response = client.post("/v1/chat/completions", json={"model": "gpt-9", "messages": USER})
    assert_error(response, 404, "model_not_found")


@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", 2.5), ("top_p", 0), ("top_p", 1.5),
    ("max_tokens", 0), ("n", 17), ("seed", 2**63), ("presence_penalty", 3), ("top_k", 0),
    ("stop", ["a", "b", "c", "d", "e"]),
    # past int64, or empty: vLLM's engine refused these itself, as a 500
    ("top_k", 10**30), ("min_tokens", 2**63), ("thinking_token_budget", 2**64),
    ("stop", ""), ("stop", ["a", ""]),
])
def test_out_of_range_sampling_values_are_400(client, field, value):
    response = client.post("/v1/chat/completions",
                           json={"model": "tiny", "messages": USER, field: value})
    assert assert_error(response, 400, "invalid_value")["param"] == field


def test_a_value_vllm_refuses_as_it_builds_or_sends_the_request_is_a_refusal_not_a_500():
    """The engine's net under the schemas: vLLM's SamplingParams refusing a value was
    raised outside it (a 500 with a traceback), and so was the int64 overflow of sending
    the request to the core; both are RequestRejected (a 400) now."""
    import asyncio

    from vllm import SamplingParams

    from engine.backend import RequestRejected
    from engine.engine import _alive, _sampling

    with pytest.raises(RequestRejected, match="empty string"):
        _sampling(SamplingParams, max_tokens=4, stop=[""])

    async def overflowing():
        raise OverflowError("can't serialize ints < -2**63 or > 2**64 - 1")
        yield  # an async generator, as vLLM's stream

    async def first():
        return [out async for out in _alive(overflowing())]

    with pytest.raises(RequestRejected, match="serialize"):
        asyncio.run(first())


def test_a_schema_the_grammar_cannot_compile_is_400_without_the_compilers_source_place(
        client):
    response = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": USER, "max_tokens": 4, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nope"}}}})
    message = assert_error(response, 400, "invalid_value")["message"]
    assert ".cc:" not in message and "/project/" not in message, message


def test_a_prompt_over_max_model_len_is_400(client, tiny_profile):
    long = "word " * (tiny_profile.max_model_len + 10)
    response = client.post("/v1/chat/completions",
                           json={"model": "tiny", "messages": [{"role": "user", "content": long}]})
    assert_error(response, 400, "context_length_exceeded")


def test_max_tokens_past_the_context_is_cut_to_the_room_as_vllm_cuts_it(client, tiny_profile):
    """vLLM's get_max_tokens: the answer gets what the prompt leaves (Claude Code, Qwen
    Code and opencode ask for 32,000 tokens whatever the model's context)."""
    response = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": USER, "max_tokens": tiny_profile.max_model_len,
        "script": "ok"})
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= tiny_profile.max_model_len


def test_non_text_content_parts_are_400(client):
    content = [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    response = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": content}]})
    assert_error(response, 400, "invalid_value")


def test_script_is_refused_by_a_profile_that_is_not_scripted(served, engine, test_home):
    from server.app import create_app

    plain = dataclasses.replace(engine.profile, scripted=False)
    app = create_app(plain, test_home, engine=engine)

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.post("/v1/chat/completions",
                                json={"model": "tiny", "messages": USER, "script": "x"})

    error = assert_error(served.run(ask()), 400, "invalid_value")
    assert error["param"] == "script"


def test_chat_before_the_engine_is_ready_is_503(tiny_profile, test_home):
    import asyncio

    from server.app import create_app

    app = create_app(tiny_profile, test_home)  # lifespan not run: no engine loads

    async def ask() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            ready = await c.get("/readyz")
            answer = await c.post("/v1/chat/completions", json={"model": "tiny", "messages": USER})
            return ready, answer

    ready, answer = asyncio.run(ask())
    assert ready.status_code == 503
    assert_error(answer, 503, "engine_not_ready")


def post_routes(app) -> list[str]:
    """Every POST route of the app (a route of every method, as /mcp, too), its path
    parameters filled with a plain value."""
    import re

    def takes_post(route) -> bool:
        methods = getattr(route, "methods", ())
        return methods is None or "POST" in methods

    return sorted({re.sub(r"\{[^}]+\}", "x", route.path) for route in app.routes
                   if takes_post(route)})


def test_a_body_nested_past_the_parsers_depth_is_400_on_every_post_route(client, served):
    deep = b"[" * 100_000 + b"]" * 100_000
    routes = post_routes(served.app)
    assert "/v1/chat/completions" in routes and "/v1/completions" in routes
    for path in routes:
        response = client.post(path, content=deep, headers={"content-type": "application/json"})
        assert 400 <= response.status_code < 500, (path, response.status_code, response.text)
        assert response.json()["error"]["message"], path


def test_a_deeply_nested_field_inside_a_request_is_400_or_served(client):
    nested: list = []
    for _ in range(900):  # under the parser's depth, past any sane request's
        nested = [nested]
    body = {"model": "tiny", "messages": USER, "metadata": {"deep": nested}}
    error = assert_error(client.post("/v1/chat/completions", json=body), 400, "invalid_value")
    assert error["param"] == "metadata.deep"


def test_a_tool_message_without_its_tool_call_id_is_400(client):
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "42"}]
    error = assert_error(client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": messages}), 400, "invalid_value")
    assert error["param"] == "messages.2.tool_call_id"


def test_a_request_without_a_model_is_served_by_the_served_model(client):
    """As vLLM's: `model` may be left out; the answer names the model that served it."""
    response = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "tiny"


def test_a_completion_whose_max_tokens_passes_the_context_gets_the_room_left(
        client, tiny_profile):
    """The completions API cuts max_tokens to the room too (vLLM's get_max_tokens); only a
    prompt that leaves no room at all is refused, naming the prompt."""
    prompt = [100] * (tiny_profile.max_model_len - 5)
    response = client.post("/v1/completions", json={
        "model": "tiny", "prompt": prompt, "max_tokens": 100})
    assert response.status_code == 200, response.text
    assert 1 <= response.json()["usage"]["completion_tokens"] <= 5
    full = client.post("/v1/completions", json={
        "model": "tiny", "prompt": [100] * tiny_profile.max_model_len, "max_tokens": 1})
    assert assert_error(full, 400, "context_length_exceeded")["param"] == "prompt"
