"""The access log (docs/serving/openai.md): a line a request as uvicorn writes it, with the time
and, on the model routes, the engine's tokens; a refused request leaves its line with its
status; no body, key, query string or path value is ever in it; `--disable-uvicorn-access-log`
turns it off. On the real app and engine, and on a real `tandem proxy` process."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from bench.load.plain_vllm import free_port
from tests.inprocess import InProcessApp

KEY = "tdm-access-log-key-5b9e1c"
WRONG_KEY = "tdm-wrong-secret-77d2aa"
BODY_TEXT = "my locker code is 4417"  # a message's text: never in the log
QUERY_KEY = "qs-secret-8c1f"
# uvicorn's request line, then the status, its phrase and the time taken
LINE = re.compile(r'^127\.0\.0\.1:\d+ - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.1" '
                  r"(?P<status>\d{3}) (?P<phrase>[A-Za-z ]+?) (?P<seconds>\d+\.\d{3})s"
                  r"(?: prompt_tokens=(?P<prompt>\d+) cached_tokens=(?P<cached>\d+) "
                  r"completion_tokens=(?P<completion>\d+))?(?: generations=\d+)?$")


@pytest.fixture
def access_lines() -> Iterator[list[str]]:
    """The access log's lines as the test's requests write them (its handler on the
    logger itself: `tandem serve` run in this process turns its propagation off)."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("tandem.access")
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def keyed(served, tmp_path) -> InProcessApp:
    from server.access.auth import Auth
    from server.access.keys import KeyStore

    return InProcessApp(served, tmp_path, auth=Auth(api_key=KEY, keys=KeyStore(tmp_path)))


def parsed(lines: list[str], path: str) -> list[re.Match]:
    found = [LINE.match(line) for line in lines]
    assert all(found), lines
    return [m for m in found if m["path"] == path]


def test_a_chat_leaves_a_line_with_its_status_time_and_the_engines_tokens(
        keyed: InProcessApp, access_lines: list[str]):
    bearer = {"Authorization": f"Bearer {KEY}"}
    _, usage, _ = keyed.chat([{"role": "user", "content": BODY_TEXT}], "Noted, thanks.",
                             headers=bearer)
    _, streamed, _ = keyed.chat([{"role": "user", "content": f"again: {BODY_TEXT}"}],
                                "Noted again.", headers=bearer, stream=True)
    chats = parsed(access_lines, "/v1/chat/completions")
    assert len(chats) == 2, access_lines
    for line, said in zip(chats, (usage, streamed), strict=True):
        assert (line["method"], line["status"], line["phrase"]) == ("POST", "200", "OK")
        assert 0 < float(line["seconds"]) < 120
        # one generation each: the engine's tokens are the usage the client was given
        assert int(line["prompt"]) == said["prompt_tokens"]
        assert int(line["completion"]) == said["completion_tokens"]
        assert int(line["cached"]) == said["prompt_tokens_details"]["cached_tokens"]
    assert BODY_TEXT not in "\n".join(access_lines) and KEY not in "\n".join(access_lines)


def test_refused_requests_leave_their_status_and_no_key_body_query_or_path_value(
        keyed: InProcessApp, access_lines: list[str]):
    bearer = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "tiny", "messages": [{"role": "user", "content": BODY_TEXT}]}
    assert keyed.request("POST", "/v1/chat/completions", json=body).status_code == 401
    assert keyed.request("POST", "/v1/chat/completions", json=body, headers={
        "Authorization": f"Bearer {WRONG_KEY}"}).status_code == 401
    assert keyed.request("POST", "/v1/chat/completions", headers=bearer,
                         json={**body, "temperature": "hot"}).status_code == 400
    assert keyed.request("POST", "/v1/chat/completions", headers=bearer,  # the browser guard
                         content=json.dumps(body), ).status_code == 415
    assert keyed.request("GET", f"/v1/models?api_key={QUERY_KEY}",
                         headers=bearer).status_code == 200
    assert keyed.request("GET", "/v1/responses/resp_private-id-31", headers=bearer
                         ).status_code == 404
    chats = parsed(access_lines, "/v1/chat/completions")
    assert [(m["status"], m["phrase"]) for m in chats] == [
        ("401", "Unauthorized"), ("401", "Unauthorized"), ("400", "Bad Request"),
        ("415", "Unsupported Media Type")]
    assert all(m["prompt"] is None for m in chats)  # nothing reached the engine
    assert [m["status"] for m in parsed(access_lines, "/v1/models")] == ["200"]
    assert [m["status"] for m in parsed(access_lines, "/v1/responses/{response_id}")] == ["404"]
    text = "\n".join(access_lines)
    for secret in (KEY, WRONG_KEY, BODY_TEXT, QUERY_KEY, "private-id-31", "hot"):
        assert secret not in text, (secret, text)


class FakeBackend(BaseHTTPRequestHandler):
    """A backend's model list and health, enough for `tandem proxy` to start."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"data": [{"id": "fake", "owned_by": "vllm"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


def proxy_output(tmp_path: Path, built_models: Path, *flags: str) -> str:
    """A real `tandem proxy` (its access log as a user's terminal gets it), asked a few
    things, stopped: its stdout."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if not (home / "models").exists():
        (home / "models").symlink_to(built_models, target_is_directory=True)
    backend = ThreadingHTTPServer(("127.0.0.1", 0), FakeBackend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proxy = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "proxy", "--profile", "tiny", "--port", str(port),
         "--backend", f"http://127.0.0.1:{backend.server_port}", "--api-key", KEY, *flags],
        env={**os.environ, "TANDEM_HOME": str(home)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proxy.poll() is None and time.monotonic() < deadline, proxy.stdout.read()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        assert httpx.get(f"{base}/v1/models?api_key={QUERY_KEY}").status_code == 401
        assert httpx.post(f"{base}/v1/chat/completions", headers={
            "Authorization": f"Bearer {KEY}"}, json={
            "model": "tiny", "messages": [{"role": "user", "content": BODY_TEXT}],
            "temperature": "hot"}).status_code == 400
    finally:
        proxy.send_signal(signal.SIGINT)
        try:
            out, _ = proxy.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proxy.kill()
            out, _ = proxy.communicate()
        backend.shutdown()
        backend.server_close()
    return out


def test_tandem_proxy_logs_each_request_as_uvicorn_does_and_the_flag_turns_it_off(
        tmp_path: Path, built_models: Path):
    out = proxy_output(tmp_path, built_models)
    lines = [line for line in out.splitlines() if line.startswith("INFO:     ")]
    assert [LINE.match(line[len("INFO:     "):]) is not None for line in lines] == \
        [True] * len(lines) and lines, out
    requests = [re.sub(r":\d+ ", ":PORT ", re.sub(r" \d+\.\d{3}s$", "", line))
                for line in lines]
    assert requests[-2:] == [
        'INFO:     127.0.0.1:PORT - "GET /v1/models HTTP/1.1" 401 Unauthorized',
        'INFO:     127.0.0.1:PORT - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request'], out
    assert 'GET /healthz HTTP/1.1" 200 OK' in requests[0]
    for secret in (KEY, QUERY_KEY, BODY_TEXT):
        assert secret not in out

    quiet = proxy_output(tmp_path, built_models, "--disable-uvicorn-access-log")
    assert "[tandem] ready in" in quiet
    assert " - \"" not in quiet and "HTTP/1.1" not in quiet, quiet


def test_the_access_logs_flag_takes_vllms_name_and_a_short_one():
    from server.cli.main import build_parser

    parser = build_parser()
    for command in (["serve"], ["proxy", "--backend", "http://127.0.0.1:1"]):
        assert parser.parse_args(command).disable_access_log is False
        for flag in ("--disable-uvicorn-access-log", "--disable-access-log"):
            assert parser.parse_args([*command, flag]).disable_access_log is True
