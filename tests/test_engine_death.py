"""An engine core that dies, as an out-of-memory kill would end it: `tandem serve` notices
at once, answers 503 on /readyz and on every request (a stream in flight ends with an error
event), and exits non-zero so that its supervisor restarts it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from bench.plain_vllm import free_port
from server.cli import ENGINE_DEAD_EXIT

READY_TIMEOUT_S = 300


def engine_core_of(server: subprocess.Popen) -> psutil.Process:
    for child in psutil.Process(server.pid).children(recursive=True):
        title = " ".join(child.cmdline()) or child.name()
        if "EngineCore" in title or child.name().startswith("VLLM::Engine"):
            return child
    raise AssertionError("no engine core process under the server")


def wait_ready(base: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stdout.read()
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError("the server did not become ready")


def test_a_killed_engine_core_means_503s_then_an_exit_a_supervisor_restarts(
        tmp_path: Path, built_models: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(built_models, target_is_directory=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--profile", "tiny", "--port", str(port)],
        env={**os.environ, "TANDEM_HOME": str(home)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        wait_ready(base, server)
        long_answer = " ".join(["word"] * 3000)
        with httpx.Client(base_url=base, timeout=60) as client, client.stream(
                "POST", "/v1/chat/completions", json={
                    "model": "tiny", "stream": True, "script": long_answer,
                    "messages": [{"role": "user", "content": "hello"}]}) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))
            engine_core_of(server).kill()  # SIGKILL, as the kernel's OOM killer sends
            rest = [line for line in lines if line.startswith("data:")]
        error = json.loads(next(line for line in rest if '"error"' in line)[5:])
        assert error["error"]["code"] == "engine_dead"
        assert rest[-1] == "data: [DONE]"

        ready = httpx.get(f"{base}/readyz", timeout=5)
        assert ready.status_code == 503 and ready.json()["status"] == "engine_dead"
        chat = httpx.post(f"{base}/v1/chat/completions", timeout=10, json={
            "model": "tiny", "messages": [{"role": "user", "content": "hello"}]})
        assert chat.status_code == 503
        assert chat.json()["error"]["code"] == "engine_dead"

        assert server.wait(timeout=60) == ENGINE_DEAD_EXIT
        output = server.stdout.read()
        assert "exiting with 3 so a supervisor restarts the server" in output
        # The progress lines the README promises, while it loaded:
        assert "[tandem] loading engine: profile tiny, model builtin:tiny-qwen3" in output
        assert "[tandem] warming up the engine" in output
        assert re.search(rf"\[tandem\] ready in \d+ s: http://127\.0\.0\.1:{port}/v1 "
                         r"\(profile tiny, memory on\)", output), output[-2000:]
        # vLLM logs the death once, with its traceback; the server adds none, request or not.
        tracebacks = [line for line in output.splitlines() if "Traceback" in line]
        assert len(tracebacks) <= 1 and all("async_llm.py" in t for t in tracebacks)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
