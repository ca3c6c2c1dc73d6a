"""llama.cpp's `llama-server`, the proxy's real backend that is not vLLM: built by
`scripts/build_llama_server.sh` into `.venv/llama.cpp` when first needed (not by `make
setup`: it is most of setup's time, and only the llama.cpp proxy tests and bench use it),
started on a free port, waited for, stopped."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.load.plain_vllm import free_port, server_process

REPO = Path(__file__).resolve().parents[2]
BUILT = REPO / ".venv" / "llama.cpp"
SERVER = BUILT / "bin" / "llama-server"
TINY_GGUF = BUILT / "tiny-qwen3.gguf"
BUILD_SCRIPT = REPO / "scripts" / "build_llama_server.sh"
# What a user is told to run when it is missing (from the repository's root)
BUILD_COMMAND = "bash scripts/build_llama_server.sh"


def built() -> bool:
    return SERVER.is_file() and TINY_GGUF.is_file()


def build(models: Path, script: Path = BUILD_SCRIPT) -> None:
    """Run the build script now (about 4.5 minutes on 2 cores; it skips what is built), its
    progress lines on this process's own stdout. `models`: the embedded models folder the
    tiny model is converted from. Without cmake the script says so and builds nothing;
    a failed build raises, with the script's last lines already shown."""
    done = subprocess.run(["bash", str(script)], check=False,
                          env={**os.environ, "TANDEM_HOME": str(models.parent)})
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_COMMAND} failed with {done.returncode} (its output is "
                           "above)")


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
