"""llama.cpp's `llama-server`, the proxy's real backend that is not vLLM: built by
`scripts/build_llama_server.sh` into `.venv/llama.cpp`, started on a free port, waited
for, stopped."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.load.plain_vllm import free_port, server_process

BUILT = Path(__file__).resolve().parents[2] / ".venv" / "llama.cpp"
SERVER = BUILT / "bin" / "llama-server"
TINY_GGUF = BUILT / "tiny-qwen3.gguf"


def built() -> bool:
    return SERVER.is_file() and TINY_GGUF.is_file()


@contextmanager
def llama_server(model: Path = TINY_GGUF, alias: str = "tiny-llama", context: int = 8192,
                 ready_timeout: float = 120) -> Iterator[str]:
    """The server's base URL (without /v1) while the block runs: one model, its prefix
    cache on (`cache_prompt`, llama.cpp's default), two threads."""
    port = free_port()
    command = [str(SERVER), "-m", str(model), "--alias", alias, "--host", "127.0.0.1",
               "--port", str(port), "-c", str(context), "-t", "2", "--parallel", "2",
               "--jinja"]  # its chat route renders with the model's own template
    with server_process(command, dict(os.environ), port, "/health", ready_timeout) as base:
        yield base
