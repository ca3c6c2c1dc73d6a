"""A client that closes its connection before its body is whole is gone, not a server
fault: it was a 500 and a traceback in the log, one a closed socket, so any key holder
could fill the log (server/http/disconnect.py QuietDisconnects). On the served app, its
middleware stack whole, fed the messages uvicorn gives such a request."""

from __future__ import annotations

import pytest


def scope_of(path: str) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "root_path": "", "query_string": b"", "client": ("127.0.0.1", 5000),
            "server": ("localhost", 80), "state": {},
            "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"),
                        (b"accept", b"application/json, text/event-stream"),
                        (b"content-length", b"1000")]}


@pytest.mark.parametrize("path", ["/mcp", "/v1/chat/completions", "/v1/messages"])
def test_a_client_gone_mid_body_ends_its_request_quietly(served, path):
    messages = iter([{"type": "http.request", "body": b'{"jsonrpc": "2.0", ',
                      "more_body": True}])
    sent: list[dict] = []

    async def receive() -> dict:
        return next(messages, {"type": "http.disconnect"})

    async def send(message: dict) -> None:
        sent.append(message)

    served.run(served.app(scope_of(path), receive, send))  # raised ClientDisconnect
    assert not [m for m in sent if m["type"] == "http.response.start"
                and m["status"] >= 500], sent
    assert served.app.state.tandem.load.in_flight == 0  # never counted: no body came
