"""A bug in a route still answers in the route's dialect (server/http/errors.py): an
Anthropic SDK reads `{"type": "error", ...}` on the Messages routes, an OpenAI one
`{"error": {...}}` elsewhere; Starlette's own answer was a plain-text 500. Pure logic of
our handlers, on a two-route app."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from server.http.errors import install_error_handlers


def failing_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/messages")
    async def messages() -> dict:
        raise RuntimeError("a bug")

    @app.post("/v1/chat/completions")
    async def chat() -> dict:
        raise RuntimeError("a bug")

    return app


def test_a_bug_on_a_messages_route_is_anthropics_api_error():
    client = TestClient(failing_app(), raise_server_exceptions=False)
    response = client.post("/v1/messages", json={})
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert "a bug" not in body["error"]["message"]  # the exception's text stays in the log


def test_a_bug_elsewhere_is_openais_server_error():
    client = TestClient(failing_app(), raise_server_exceptions=False)
    response = client.post("/v1/chat/completions", json={})
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
