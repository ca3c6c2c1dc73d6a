"""The Messages and Responses wires on the real engine (tiny profile, scripted): a stream
is an event stream never cached, a hosted tool is left out with one warning, a bad tool
is named by its place in the client's list, and a backend that fails mid-answer (proxy
mode's BackendFailed) ends each stream in its wire's way: the chat stream with its error
and `[DONE]`, the Messages stream with Anthropic's `error` event, the Responses stream
with `response.failed` (the failed response stored, as OpenAI's is). A failure before
the first delta is the route's 502 in its wire's shape; nothing is kept in the ledger
(proxy mode's rule: the same turn goes through whole once the backend is back,
tests/proxy/test_faults.py).

For the failures the engine is the session's real one; only its client generations are
cut after a few deltas, as engine/proxy/http_backend.py raises BackendFailed for a
backend's cut stream (the HTTP relay of tests/proxy needs the endpoint lane's second
engine)."""

from __future__ import annotations

import json
import time
from contextlib import aclosing

import pytest

from engine.backend import BackendFailed
from tests.inprocess import InProcessApp

SCRIPT = ("The kettle is blue and it sits on the left of the stove, by the window that "
          "looks out on the garden.")
REASON = "the backend's stream was cut: injected"
MESSAGE = f"the backend failed: {REASON}"
ASK = [{"role": "user", "content": "Where is the kettle?"}]


class CutBackend:
    """The real engine, whose client generations fail with BackendFailed after `after`
    deltas (0: before the first); everything else is the engine's own."""

    def __init__(self, engine, after: int) -> None:
        self._engine, self.after = engine, after

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    async def generate(self, prompt_token_ids, params, kind="client", request_id=None):
        if kind == "client" and self.after == 0:
            raise BackendFailed(REASON)
        sent = 0
        async with aclosing(self._engine.generate(prompt_token_ids, params, kind=kind,
                                                  request_id=request_id)) as deltas:
            async for delta in deltas:
                if kind == "client" and sent >= self.after:
                    raise BackendFailed(REASON)  # closing the real stream aborts it
                yield delta
                sent += 1


def cut_app(served, home, after: int) -> InProcessApp:
    import dataclasses

    from conductor.memory.settings import MemorySettings
    from server.app import create_app

    engine = served.app.state.tandem.engine
    profile = dataclasses.replace(engine.profile, scripted=True)
    app = create_app(profile, home, engine=CutBackend(engine, after),
                     memory_settings=MemorySettings(user_name="tester"))
    return InProcessApp.over(served, app)


def named_events(text: str) -> list[tuple[str, dict]]:
    """A stream's (event name, data) pairs (Messages', Responses')."""
    pairs = []
    for chunk in text.strip().split("\n\n"):
        name, data = chunk.split("\n", 1)
        pairs.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return pairs


def post(app: InProcessApp, wire: str, stream: bool, session: str):
    headers = {"X-Tandem-Session": session}
    body = {"model": "tiny", "script": SCRIPT, "stream": stream}
    if wire == "chat":
        return app.request("POST", "/v1/chat/completions", headers=headers,
                           json={**body, "messages": ASK})
    if wire == "messages":
        return app.request("POST", "/v1/messages", headers=headers,
                           json={**body, "messages": ASK, "max_tokens": 64})
    return app.request("POST", "/v1/responses", headers=headers,
                       json={**body, "input": ASK[0]["content"]})


def test_a_streamed_response_with_a_hosted_tool_warns_once_and_is_never_cached(
        served, tmp_path, caplog):
    """Streamed, as Codex asks: an event stream with `Cache-Control: no-cache`, ended by
    `response.completed`, the hosted tools it offers left out with one warning."""
    app = InProcessApp(served, tmp_path)
    tools = [{"type": "web_search"}, {"type": "file_search"}, {"type": "web_search"},
             {"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    with caplog.at_level("WARNING", logger="tandem.server"):
        streamed = app.request("POST", "/v1/responses", json={
            "model": "tiny", "input": "List the files.", "tools": tools, "stream": True,
            "script": "Sure."})
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.headers["cache-control"] == "no-cache"
    assert named_events(streamed.text)[-1][0] == "response.completed"
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert warned == ["responses: tools this server cannot run left out: file_search, "
                      "web_search"]


# A tool is named by its place in the client's list, inside a namespace too (Codex sends
# hosted tools and namespaces first), never by its place in the chat route's list.
BAD_TOOLS = [
    ([{"type": "web_search"}, {"type": "function", "name": "a"},
      {"type": "function", "name": "b"},
      {"type": "namespace", "name": "repo", "tools": [{"type": "function"}]}],
     "tools[3].tools[0].name"),
    ([{"type": "namespace", "name": "repo", "tools": [{"type": "function", "name": "a"},
                                                       "b"]}], "tools[0].tools[1]"),
    ([{"type": "web_search"}, {"type": "function", "name": "a", "description": 5}],
     "tools[1].description"),
]


@pytest.mark.parametrize("tools, param", BAD_TOOLS, ids=[param for _, param in BAD_TOOLS])
def test_a_bad_tool_is_a_400_naming_its_place_in_the_clients_list(served, tmp_path, tools,
                                                                    param):
    app = InProcessApp(served, tmp_path)
    response = app.request("POST", "/v1/responses", json={
        "model": "tiny", "input": "hi", "tools": tools, "script": "x"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(f"{param}: ")

def test_a_backend_cut_mid_stream_ends_each_stream_with_its_wires_error(served, tmp_path):
    app = cut_app(served, tmp_path, after=3)

    messages = post(app, "messages", True, "messages")
    assert messages.status_code == 200, messages.text
    events = named_events(messages.text)
    assert events[0][0] == "message_start"
    assert "message_stop" not in [name for name, _ in events]
    assert events[-1] == ("error", {"type": "error", "error": {
        "type": "api_error", "message": MESSAGE}})

    responses = post(app, "responses", True, "responses")
    assert responses.status_code == 200, responses.text
    events = named_events(responses.text)
    assert [name for name, _ in events][:2] == ["response.created", "response.in_progress"]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    name, failed = events[-1]
    assert name == "response.failed" and failed["type"] == "response.failed"
    response = failed["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": MESSAGE}
    # stored as it failed (behind the stream: a worker thread writes it)
    deadline = time.monotonic() + 10
    while (stored := app.request("GET", f"/v1/responses/{response['id']}")).status_code \
            != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stored.status_code == 200, stored.text
    assert stored.json()["status"] == "failed" and stored.json()["error"] == response["error"]

    # the chat route's, as tests/proxy/test_faults.py sees through a real relay
    chat = post(app, "chat", True, "chat")
    assert chat.status_code == 200, chat.text
    data = [line[6:] for line in chat.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["code"] == "backend_error" and error["message"] == MESSAGE

    for session in ("chat", "messages", "responses"):  # proxy mode keeps nothing of it
        assert app.memory.records("tester", session) == [], session


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_backend_that_fails_before_the_first_delta_is_a_502_in_each_wires_shape(
        served, tmp_path, stream):
    """Before the first event the failure is the route's own answer, as on the chat route
    (server.http.sse.started): a 502 with the reason, not a stream of one error, and no
    failed response stored (red before: the Responses run stored one the client never
    learnt the id of)."""
    app = cut_app(served, tmp_path, after=0)
    for wire in ("chat", "messages", "responses"):
        answer = post(app, wire, stream, wire)
        assert answer.status_code == 502, (wire, answer.text)
        assert answer.headers["content-type"].startswith("application/json"), wire
        if wire == "messages":
            assert answer.json() == {"type": "error", "error": {"type": "api_error",
                                                                "message": MESSAGE}}
        else:
            error = answer.json()["error"]
            assert error["code"] == "backend_error" and error["message"] == MESSAGE, wire
    # The 502 is the answer: no failed response is stored whose id the client never saw
    # (a cut run stores it behind the answer, in a worker thread: given time to land)
    store = app.memory.responses
    deadline = time.monotonic() + 2
    while store.stored_bytes("tester") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.stored_bytes("tester") == 0, sorted(
        p.name for p in store._user_folder("tester").iterdir())
