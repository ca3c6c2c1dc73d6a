"""Plain vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`), a real
backend for tests and the yardstick of the load bench: started on a free port, waited for,
stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from engine.profiles import Profile

TEST_ARGS = ("--max-model-len", "4096", "--block-size", "32", "--enforce-eager",
             "--dtype", "float32")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_args_of(profile: Profile) -> tuple[list[str], dict[str, str]]:
    """vLLM server flags and environment that give its engine the profile's settings, as
    `engine.Engine.start` sets them (prefix caching is on by default in both)."""
    args = ["--max-model-len", str(profile.max_model_len), "--block-size",
            str(profile.block_size), "--dtype", profile.dtype,
            "--max-num-seqs", str(profile.max_num_seqs),
            "--enable-prompt-tokens-details"]  # cached tokens in usage, as ours report them
    if profile.enforce_eager:
        args.append("--enforce-eager")
    env: dict[str, str] = {}
    if profile.device == "cpu":
        args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens",
                 str(profile.max_model_len)]
        if profile.cpu_kv_space_gib:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(profile.cpu_kv_space_gib)
        if profile.cpu_reserved_cores is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(profile.cpu_reserved_cores)
    return args, env


@contextmanager
def plain_vllm(model: Path, name: str, *extra: str, ready_timeout: float = 600,
               engine_args: tuple[str, ...] = TEST_ARGS,
               env: dict[str, str] | None = None) -> Iterator[str]:
    """The server's `/v1` base URL while the block runs."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING",
           **(env or {})}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(model), "--served-model-name", name, "--host", "127.0.0.1", "--port",
               str(port), *engine_args, *extra]
    with server_process(command, env, port, "/health", ready_timeout) as base:
        yield f"{base}/v1"


@contextmanager
def server_process(command: list[str], env: dict[str, str], port: int, ready_path: str,
                   ready_timeout: float) -> Iterator[str]:
    """A server started with `command`, its base URL once `ready_path` answers 200;
    stopped (terminated, then killed) when the block ends."""
    # Its log goes to a file: a pipe nobody reads would stall a server that logs a lot.
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log,
                               text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the server exited: {log.read()[-2000:]}")
            try:
                if httpx.get(f"{base}{ready_path}", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not answer {ready_path}")
            time.sleep(1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
