"""Hostile input against every route (issue 17): arbitrary JSON bodies and path values for
each route the server's OpenAPI document lists, names that try to leave the memory folder,
oversize bodies and headers. No 5xx, no hang, a JSON error body on every refusal, nothing
written outside the server's home. RELIABILITY.md quotes the counts."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.access.key_check import MAX_BODY_BYTES, MAX_HEADER_BYTES
from tests.inprocess import InProcessApp

REQUEST_TIMEOUT_S = 60
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=4),
    max_leaves=12)
ESCAPES = ("..", "../..", "../../etc/passwd", "/etc/passwd", "..%2F..%2Fx", "a/../../b",
           "~root", "x" * 300, "nul\x00byte", "ünï", " ", ".hidden", "CON", "a\\..\\b")


@pytest.fixture(scope="module")
def hostile(served, tmp_path_factory) -> tuple[InProcessApp, Path]:
    base = tmp_path_factory.mktemp("hostile")
    home = base / "home"
    home.mkdir()
    return InProcessApp(served, home), base


def routes(app) -> list[tuple[str, str]]:
    """(method, path) of every operation in the app's OpenAPI document."""
    return sorted((method.upper(), path) for path, ops in app.openapi()["paths"].items()
                  for method in ops)


def filled(path: str, value: str) -> str:
    return re.sub(r"\{[^}]+\}", quote(value, safe=""), path)


def send(app: InProcessApp, method: str, path: str, **kwargs) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await asyncio.wait_for(client.request(method, path, **kwargs),
                                          REQUEST_TIMEOUT_S)
    return app._served.run(go())


def assert_handled(response: httpx.Response, what: str) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:300])
    if response.status_code >= 400:
        assert response.json()["error"]["message"], what


def assert_nothing_outside(base: Path) -> None:
    assert [p.name for p in base.iterdir()] == ["home"], list(base.iterdir())


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(route=st.integers(min_value=0), body=JSON, value=st.text(max_size=30))
def test_any_json_body_and_path_value_on_any_route_is_answered_without_a_5xx(
        hostile, route, body, value):
    app, base = hostile
    method, path = routes(app.app)[route % len(routes(app.app))]
    kwargs = {} if method in ("GET", "DELETE") else {"json": body}
    assert_handled(send(app, method, filled(path, value or "x"), **kwargs),
                   f"{method} {path} {value!r} {json.dumps(body)[:100]}")
    assert_nothing_outside(base)


@pytest.mark.parametrize("name", ESCAPES)
def test_names_that_try_to_leave_the_memory_folder_are_refused_or_kept_inside(hostile, name):
    app, base = hostile
    for method, path in routes(app.app):
        if "{" not in path:
            continue
        kwargs = {} if method in ("GET", "DELETE") else {"json": {}}
        assert_handled(send(app, method, filled(path, name), **kwargs), f"{method} {path}")
    for header in ("X-Tandem-Session", "X-Tandem-Project", "X-Tandem-User"):
        if "\x00" in name:  # no HTTP client sends a NUL in a header
            continue
        response = send(app, "POST", "/v1/chat/completions", headers={header: name.encode()},
                        json={
            "model": "tiny", "script": "ok", "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}]})
        assert_handled(response, header)
    assert_nothing_outside(base)


def test_a_body_past_the_limit_is_413_before_it_is_read(hostile):
    app, _ = hostile
    big = b'{"model": "tiny", "messages": [{"role": "user", "content": "' + (
        b"x" * MAX_BODY_BYTES) + b'"}]}'
    response = send(app, "POST", "/v1/chat/completions", content=big,
                    headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "bytes" in response.json()["error"]["message"]


def test_a_chunked_body_past_the_limit_is_413(hostile):
    app, _ = hostile

    async def chunks():
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536

    response = send(app, "POST", "/v1/chat/completions", content=chunks(),
                    headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_headers_past_the_limit_are_431(hostile):
    app, _ = hostile
    response = send(app, "GET", "/v1/models",
                    headers={f"x-filler-{i}": "y" * 1000
                             for i in range(MAX_HEADER_BYTES // 1000 + 2)})
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "headers_too_large"


def test_a_lone_surrogate_is_a_400_and_a_surrogate_pair_is_text(hostile):
    app, _ = hostile
    lone = (b'{"model": "tiny", "script": "ok", '
            b'"messages": [{"role": "user", "content": "hi \\ud800"}]}')
    response = send(app, "POST", "/v1/chat/completions", content=lone,
                    headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_text"
    # Python's json.dumps sends an emoji as a surrogate pair: one character, served.
    pair = json.dumps({"model": "tiny", "script": "ok", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "hi \U0001F600"}]})
    assert "\\ud83d\\ude00" in pair
    response = send(app, "POST", "/v1/chat/completions", content=pair,
                    headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text


def test_tool_call_arguments_nested_past_the_parsers_depth_are_served_as_text(hostile):
    app, _ = hostile
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "f", "arguments": "[" * 20_000}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "done"}]
    response = send(app, "POST", "/v1/chat/completions", json={
        "model": "tiny", "script": "ok", "max_tokens": 4, "messages": messages})
    assert_handled(response, "nested tool arguments")
