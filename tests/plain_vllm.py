"""Plain vLLM's own OpenAI server as a real backend for tests (`python -m
vllm.entrypoints.openai.api_server`): started on a free port, waited for, stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.served import free_port


@contextmanager
def plain_vllm(model: Path, name: str, *extra: str, ready_timeout: float = 600) -> Iterator[str]:
    """The server's `/v1` base URL while the block runs."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    process = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
         "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
         "--max-model-len", "4096", "--block-size", "32", "--enforce-eager",
         "--dtype", "float32", *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vLLM's server exited: {process.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("vLLM's server did not start")
            time.sleep(1)
        yield f"{base}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
