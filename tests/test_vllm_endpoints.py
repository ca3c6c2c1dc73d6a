"""vLLM's utility routes and headers on the real app and engine: /tokenize, /detokenize,
/tokenizer_info, /version, /health, /load, /invocations, the ORCA load header, and
`tandem serve --uds` and `--root-path`."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import time
import types
from pathlib import Path

import httpx
import pytest
import uvicorn

from server.access.auth import Auth
from server.access.keys import KeyStore
from server.app import create_app
from server.cli.main import build_parser, main, server_config
from tests.inprocess import InProcessApp, eventually

USER = [{"role": "user", "content": "What does the build need?"}]
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
KEY = "vllm-routes-key"


@pytest.fixture(scope="module")
def client(served) -> httpx.Client:
    with httpx.Client(base_url=served.base_url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(served):
    return served.app.state.tandem.engine.tokenizer


def tokenize(client: httpx.Client, **body) -> httpx.Response:
    return client.post("/tokenize", json=body)


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


# /tokenize

def test_a_prompt_is_tokenized_as_vllm_answers(client, tokenizer, served):
    prompt = "vllm1 This is a test prompt."
    for add_special in (False, True):
        body = tokenize(client, prompt=prompt, model="tiny",
                        add_special_tokens=add_special).json()
        ids = tokenizer.encode(prompt, add_special_tokens=add_special)
        assert body == {"count": len(ids), "max_model_len": served.app.state.tandem
                        .profile.max_model_len, "tokens": ids, "token_strs": None}
    strs = tokenize(client, prompt=prompt, return_token_strs=True).json()["token_strs"]
    assert strs == tokenizer.convert_ids_to_tokens(tokenizer.encode(prompt))


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_messages_count_what_the_chat_route_prompts_with(client, tools):
    """A chat request's prompt_tokens (memory off: nothing hidden) is what /tokenize of
    its messages and tools counts, generation prompt included."""
    extra = {"tools": tools} if tools else {}
    counted = tokenize(client, messages=USER, **extra).json()
    chat = client.post("/v1/chat/completions", headers={"X-Tandem-Memory": "off"}, json={
        "model": "tiny", "messages": USER, "script": "Node 20.", **extra}).json()
    assert counted["count"] == chat["usage"]["prompt_tokens"]
    assert counted["count"] == len(counted["tokens"])


def test_the_conversation_ends_as_the_request_asks(client, tokenizer):
    conversation = [*USER, {"role": "assistant", "content": "Sure,"}]

    def rendered(messages, **flags) -> list[int]:
        text = tokenizer.apply_chat_template(messages, tokenize=False, enable_thinking=False,
                                             **flags)
        return tokenizer.encode(text, add_special_tokens=False)

    assert tokenize(client, messages=USER, add_generation_prompt=False).json()["tokens"] \
        == rendered(USER, add_generation_prompt=False)
    assert tokenize(client, messages=USER).json()["tokens"] \
        == rendered(USER, add_generation_prompt=True)
    continued = tokenize(client, messages=conversation, add_generation_prompt=False,
                         continue_final_message=True).json()
    assert continued["tokens"] == rendered(conversation, continue_final_message=True)
    assert tokenizer.decode(continued["tokens"]).endswith("Sure,")
    thinking = tokenize(client, messages=USER, chat_template_kwargs={"enable_thinking": True})
    assert thinking.json()["count"] < tokenize(client, messages=USER).json()["count"]


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"messages": USER, "continue_final_message": True}, 400, None),  # and the generation prompt
    ({"prompt": "hi", "model": "gpt-4"}, 404, "model"),
    ({"messages": USER, "chat_template": "{{ 'pwned' }}"}, 400, "chat_template"),
    ({"messages": [{"role": "robot", "content": "beep"}]}, 400, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages"),
    ({"messages": USER, "mm_processor_kwargs": {"x": 1}}, 400, "mm_processor_kwargs"),
    ({"prompt": 12}, 400, "prompt"),
    ({"model": "tiny"}, 400, "prompt"),
    ({"prompt": "hi", "temperature": 0}, 400, "temperature"),
])
def test_bad_tokenize_requests_are_refused_with_a_reason(client, body, status, param):
    error = error_of(tokenize(client, **body), status)
    assert error["message"] and error["param"] == param


def test_a_body_that_is_not_json_is_a_400(client):
    response = client.post("/tokenize", content=b"{nope",
                           headers={"Content-Type": "application/json"})
    assert error_of(response, 400)["code"] == "invalid_json"


# /detokenize

def test_detokenize_gives_the_text_back(client, tokenizer):
    prompt = "This is a test prompt. vllm1"
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert client.post("/detokenize", json={"model": "tiny", "tokens": ids}).json() \
        == {"prompt": prompt}
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert client.post("/detokenize", json={"tokens": [im_start]}).json() \
        == {"prompt": "<|im_start|>"}  # special tokens are written out, as vLLM's


@pytest.mark.parametrize("tokens", [[10**9], [-1], ["a"], [2**70], None])
def test_ids_outside_the_vocabulary_are_a_400(client, tokens):
    error = error_of(client.post("/detokenize", json={"tokens": tokens}), 400)
    assert error["param"].startswith("tokens")


# /tokenizer_info

def test_tokenizer_info_is_the_tokenizers_config_without_server_paths(client, tokenizer):
    info = client.get("/tokenizer_info").json()
    assert info["tokenizer_class"] == type(tokenizer).__name__
    assert info["chat_template"] == tokenizer.chat_template
    assert info["eos_token"] == "<|im_end|>"
    assert isinstance(info["model_max_length"], int)
    assert all(isinstance(v, str) for v in info["added_tokens_decoder"].values())
    for field in ("vocab_file", "merges_file", "tokenizer_file"):
        assert field not in info
    assert not str(info.get("name_or_path", "")).startswith("/")
    assert str(Path.home()) not in json.dumps(info)


# /version, /health, /load

def test_version_names_vllm_and_tandem(client):
    import vllm

    body = client.get("/version").json()
    assert body["version"] == vllm.__version__
    assert body["tandem"]


def test_health_is_200_while_the_engine_serves_and_503_otherwise(client, served, tmp_path):
    response = client.get("/health")
    assert response.status_code == 200 and response.content == b""
    loading = create_app(served.app.state.tandem.profile, tmp_path / "loading")  # no lifespan
    answer = served.run(_get(loading, "/health"))
    assert error_of(answer, 503)["code"] == "engine_not_ready"
    dead_app = InProcessApp(served, tmp_path / "dead")
    dead = copy.copy(served.app.state.tandem.engine)  # the real one stays alive
    dead._llm = None
    dead_app.app.state.tandem.engine = dead
    assert error_of(dead_app.request("GET", "/health"), 503)["code"] == "engine_dead"


async def _get(app, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        return await c.get(path)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_load_counts_generation_requests_in_flight(client, served, path):
    assert client.get("/load").json() == {"server_load": 0}
    seen: list[int] = []
    with client.stream("POST", path, json={
            "model": "tiny", "messages": USER, "stream": True, "max_tokens": 400,
            "script": " ".join(["word"] * 200)}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: {") and not seen:
                seen.append(client.get("/load").json()["server_load"])
                tokenize(client, prompt="not a generation")  # not counted
                seen.append(client.get("/load").json()["server_load"])
    assert seen == [1, 1]
    eventually(lambda: client.get("/load").json()["server_load"] == 0)
    error_of(client.post("/v1/completions", json={"model": "tiny"}), 400)
    assert client.get("/load").json() == {"server_load": 0}  # a refusal is done at once


def test_a_request_whose_body_stalls_is_not_counted_until_its_body_is_whole(client, served):
    """The count is what idle-time work reads as "a client is here": a client that sends
    its headers and trickles its body must not stop it (uvicorn has no body timeout)."""
    import socket
    from urllib.parse import urlsplit

    body = json.dumps({"model": "tiny", "messages": USER, "max_tokens": 1,
                       "script": "Hi."}).encode()
    where = urlsplit(served.base_url)
    with socket.create_connection((where.hostname, where.port), timeout=60) as raw:
        raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                    b"Content-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        time.sleep(0.3)  # the server has the headers and a part of the body
        assert client.get("/load").json() == {"server_load": 0}
        raw.sendall(body[10:])
        assert raw.recv(65536).startswith(b"HTTP/1.1 200")
    eventually(lambda: client.get("/load").json()["server_load"] == 0)


# /invocations

def test_invocations_answers_as_the_route_the_body_is_for(client):
    chat_body = {"model": "tiny", "messages": USER, "script": "Node 20.",
                 "temperature": 0.0}
    direct = client.post("/v1/chat/completions", json=chat_body).json()
    invoked = client.post("/invocations", json=chat_body).json()
    assert invoked.keys() == direct.keys() and invoked["object"] == "chat.completion"
    assert invoked["choices"] == direct["choices"]
    completion_body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 3,
                       "temperature": 0.0}
    direct = client.post("/v1/completions", json=completion_body).json()
    invoked = client.post("/invocations", json=completion_body).json()
    assert invoked["object"] == "text_completion"
    assert invoked["choices"] == direct["choices"]
    streamed = client.post("/invocations", json={**chat_body, "stream": True})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text.rstrip().endswith("data: [DONE]")


def test_invocations_refuses_what_neither_route_takes(client):
    assert error_of(client.post("/invocations", json={"model": "tiny"}), 400)["message"]
    error = error_of(client.post("/invocations", json={
        "model": "tiny", "messages": USER, "temperature": 9}), 400)  # the chat route's 400
    assert error["param"] == "temperature"


# the ORCA header

def orca(client: httpx.Client, path: str, metrics_format: str | None, **body) -> str | None:
    headers = {"endpoint-load-metrics-format": metrics_format} if metrics_format else {}
    response = client.post(path, headers=headers, json={"model": "tiny", **body})
    assert response.status_code == 200, response.text
    return response.headers.get("endpoint-load-metrics")


def test_the_orca_header_reports_load_in_the_format_asked(client):
    chat = {"messages": USER, "script": "Yes."}
    text = orca(client, "/v1/chat/completions", "TEXT", **chat)
    assert text is not None and text.startswith("TEXT ")
    for item in filter(None, text[5:].split(", ")):
        name, _, value = item.partition("=")
        assert name.startswith("named_metrics.") and float(value) >= 0
    report = orca(client, "/v1/completions", "json", prompt="Hello", max_tokens=2)
    assert report is not None and report.startswith("JSON ")
    assert isinstance(json.loads(report[5:])["named_metrics"], dict)
    assert orca(client, "/invocations", "TEXT", **chat).startswith("TEXT ")
    assert orca(client, "/v1/chat/completions", None, **chat) is None
    assert orca(client, "/v1/chat/completions", "XML", **chat) is None
    assert orca(client, "/v1/chat/completions", "TEXT", stream=True, **chat) is None


# who may call them

def test_every_new_route_but_health_needs_the_key(served, tmp_path):
    app = InProcessApp(served, tmp_path, auth=Auth(api_key=KEY, keys=KeyStore(tmp_path)))
    bearer = {"Authorization": f"Bearer {KEY}"}
    calls = [("POST", "/tokenize", {"prompt": "hi"}), ("POST", "/detokenize", {"tokens": [1]}),
             ("GET", "/tokenizer_info", None), ("GET", "/version", None),
             ("GET", "/load", None), ("GET", "/no-such-route", None),
             ("POST", "/invocations", {"model": "tiny", "messages": USER, "script": "Hi."})]
    for method, path, body in calls:
        assert app.request(method, path, json=body).status_code == 401, path
        assert app.request(method, path, json=body, headers=bearer).status_code \
            == (404 if path == "/no-such-route" else 200), path
    assert app.request("GET", "/health").status_code == 200


def test_the_load_count_and_the_orca_report_sit_inside_the_key_check(served, tmp_path):
    """A refused request is neither counted as load nor reported on."""
    from server.access.key_check import KeyCheckAndCount
    from server.http.load_tracking import TrackServerLoad
    from server.http.orca import OrcaLoadReport

    order = [m.cls for m in InProcessApp(served, tmp_path).app.user_middleware]  # outermost first
    assert order.index(KeyCheckAndCount) < order.index(TrackServerLoad)
    assert order.index(KeyCheckAndCount) < order.index(OrcaLoadReport)


def test_a_root_path_serves_both_paths_behind_the_same_key(served, tmp_path):
    app = InProcessApp(served, tmp_path, auth=Auth(api_key=KEY, keys=KeyStore(tmp_path)))
    app.app.root_path = "/llm"  # what tandem serve --root-path /llm sets
    for path in ("/v1/models", "/llm/v1/models", "/llm/tokenizer_info"):
        assert app.request("GET", path).status_code == 401, path
        assert app.request("GET", path, headers={"Authorization": f"Bearer {KEY}"}) \
            .status_code == 200, path
    assert app.request("GET", "/llm/health").status_code == 200


# tandem serve --uds, --root-path

def test_serve_takes_vllms_socket_and_root_path_flags(monkeypatch, tmp_path, capsys):
    """What `tandem serve --uds --root-path` hands the app and uvicorn (neither starts)."""
    seen: dict = {}
    fake_app = types.ModuleType("server.app")

    def create_app(_profile, _home, **kwargs):
        seen["app"] = kwargs
        return "the app"

    class Config:
        def __init__(self, app, **kwargs) -> None:
            seen["uvicorn"] = kwargs

    class Server:
        def __init__(self, config) -> None:
            self.should_exit = False

        def run(self) -> None:
            pass

    fake_app.create_app = create_app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "server.app", fake_app)
    monkeypatch.setattr(uvicorn, "Config", Config)
    monkeypatch.setattr(uvicorn, "Server", Server)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    monkeypatch.delenv("TANDEM_API_KEY", raising=False)
    socket_path = str(tmp_path / "t.sock")
    assert main(["serve", "--profile", "tiny", "--uds", socket_path, "--root-path", "/llm"]) == 0
    assert seen["app"]["root_path"] == "/llm" and seen["uvicorn"]["uds"] == socket_path
    assert seen["app"]["browser"].listen_host == "localhost"  # a socket is this machine's
    assert main(["serve", "--profile", "tiny", "--root-path", "llm/"]) == 2
    assert "--root-path" in capsys.readouterr().err
    assert build_parser().parse_args(["serve"]).uds is None


def test_the_app_answers_on_a_unix_socket(served, tmp_path):
    engine = served.app.state.tandem.engine
    home = tmp_path / "home"
    socket_path = tmp_path / "tandem.sock"
    config = server_config(create_app(engine.profile, home, engine=engine), "127.0.0.1", 0,
                           uds=str(socket_path))
    config.loop, config.lifespan = "none", "on"
    server = uvicorn.Server(config)
    serving = asyncio.run_coroutine_threadsafe(server.serve(), served.loop)
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path)),
                          base_url="http://localhost", timeout=30) as unix:
            deadline = time.monotonic() + 30
            while not socket_path.exists() and time.monotonic() < deadline:
                assert not serving.done()
                time.sleep(0.05)
            assert unix.get("/version").json()["version"]
            assert unix.post("/tokenize", json={"prompt": "hi"}).json()["count"] > 0
    finally:
        server.should_exit = True
        serving.result(timeout=60)
