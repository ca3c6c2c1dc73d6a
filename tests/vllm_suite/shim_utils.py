"""Tandem's stand-in for vLLM's `tests/utils.py`: `RemoteOpenAIServer` is `tandem serve`.

vLLM's server tests open `RemoteOpenAIServer(MODEL_NAME, args)` in a module fixture and
talk to it over HTTP with the OpenAI client. Here every such server is one `tandem serve
--profile tiny` process for the whole session (one engine a test session), started with
the memory mode of $TANDEM_VLLM_SUITE_MEMORY (off or on) and `--served-model-name` for
each model name the selected modules use, so their requests name a model it serves.
The vLLM flags a module passes are checked against what Tandem does by default
(`FLAGS`): a flag that would change behaviour Tandem does not have fails the module's
tests loudly rather than letting them pass against a different server. A module whose
flags cannot hold on the shared server (`OWN_SERVER_FLAGS`: a Unix socket, an API key)
gets a `tandem serve` of its own with Tandem's flags of the same name, for the module.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai
import pytest

REPO = Path(os.environ["TANDEM_REPO"])
VLLM_PATH = REPO  # some modules build paths from it; none selected reads a file there
ROCM_EXTRA_ARGS: list[str] = []
multi_gpu_only = pytest.mark.skip(reason="multi-GPU")
requires_fp8 = pytest.mark.skip(reason="fp8")

# vLLM serve flags the selected modules pass, and why each holds on the shared server.
# The vLLM flags a module passes are checked: one not here fails the module's tests.
CONTEXT = 8192  # the suite's profile: tiny, with the test model's whole context
DEFAULT_MAX_TOKENS = 64
FLAGS_THAT_HOLD = {
    **dict.fromkeys(("--dtype", "--enforce-eager", "--max-num-seqs", "--seed",
                     "--gpu-memory-utilization", "--load-format", "--trust-remote-code",
                     "--max-num-batched-tokens", "--enable-chunked-prefill",
                     "--no-enable-prefix-caching", "--enable-prefix-caching",
                     "--block-size", "--no-async-scheduling"),
                    "how the engine runs, not what a response holds"),
    **dict.fromkeys(("--enable-auto-tool-choice", "--tool-call-parser"),
                    "Qwen's tool calls are always parsed"),
    "--reasoning-parser": "Qwen3's <think> block is always parsed",
    "--reasoning-config": "a model with <think> tokens gets vLLM's reasoning config, "
                          "<think> to </think>, for thinking_token_budget",
    **dict.fromkeys(("--enable-prompt-tokens-details",
                     "--enable-server-load-tracking", "--enable-tokenizer-info-endpoint"),
                    "always on in Tandem"),
    "--port": "the shim picks a free port; the tests read it from the server object",
    "--structured-outputs-config.backend": "vLLM's default backend (xgrammar) is Tandem's",
    "--chat-template": "the served model's own template renders every prompt",
    **dict.fromkeys(("--enable-lora", "--lora-modules", "--max-lora-rank", "--max-cpu-loras"),
                    "only tests of the adapter use it, and they are excluded (lora)"),
}
# vLLM serve flags that take a value and are passed on to a `tandem serve` of the module's
# own, as Tandem's flag of the same name: the shared server cannot listen on a module's
# socket, a root path comes with an API key (VLLM_API_KEY) in the module that uses it, and
# a higher --max-logprobs starts its engine otherwise.
OWN_SERVER_FLAGS = ("--uds", "--root-path", "--max-logprobs")
# vLLM serve switches (no value) that change every response: the module gets a server of
# its own with Tandem's switch of the same name.
OWN_SERVER_SWITCHES = ("--enable-force-include-usage", "--return-tokens-as-token-ids")
OWN_SERVER_ENV = {"VLLM_API_KEY": "--api-key"}


def unsupported_flags(args: list[str]) -> list[str]:
    """The flags of `args` the shared server does not honour."""
    bad = []
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, _, value = arg.partition("=")
        if name in ("--max-model-len", "--max_model_len"):
            value = value or args[i + 1]
            if int(value) > CONTEXT:
                bad.append(f"{arg} {value} (the test model's context is {CONTEXT})")
        elif name not in (*FLAGS_THAT_HOLD, *OWN_SERVER_FLAGS, *OWN_SERVER_SWITCHES):
            bad.append(arg)
    return bad


def own_server_args(args: list[str], env: dict[str, str] | None) -> list[str]:
    """The `tandem serve` flags of a module that needs a server of its own; [] for one
    the shared server serves."""
    own: list[str] = []
    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name in OWN_SERVER_FLAGS:
            own += [name, value or args[i + 1]]
        elif name in OWN_SERVER_SWITCHES:
            own.append(name)
    for variable, flag in OWN_SERVER_ENV.items():
        if (env or {}).get(variable):
            own += [flag, env[variable]]
    return own


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def models_dir() -> Path:
    return Path(os.environ.get("TANDEM_MODELS") or Path.home() / ".tandem" / "models")


def served_model_dir() -> Path:
    return models_dir() / "tiny-qwen3"


class _Tandem:
    """A `tandem serve` process: the session's shared one, or a module's own (`extra`:
    its --uds, --root-path, --api-key)."""

    def __init__(self, names: list[str], extra: list[str] | None = None) -> None:
        extra = extra or []
        self.port = _free_port()
        self.uds = extra[extra.index("--uds") + 1] if "--uds" in extra else None
        self.home = Path(tempfile.mkdtemp(prefix="tandem-vllm-suite-"))
        (self.home / "models").symlink_to(models_dir(), target_is_directory=True)
        memory = os.environ.get("TANDEM_VLLM_SUITE_MEMORY", "off")
        profile = (REPO / "profiles" / "tiny.yaml").read_text()
        profile = profile.replace("max_model_len: 4096", f"max_model_len: {CONTEXT}")
        # The test model has random weights: it seldom ends its turn, and a request that
        # sets no max_tokens would run to the end of the context (minutes on this CPU).
        # vLLM's tests run with a real model on a GPU; the suite gives such answers
        # vLLM's --override-generation-config max_new_tokens instead.
        profile += f"default_max_tokens: {DEFAULT_MAX_TOKENS}\n"
        (self.home / "vllm-suite.yaml").write_text(profile)
        command = [str(REPO / ".venv" / "bin" / "tandem"), "serve",
                   "--profile", str(self.home / "vllm-suite.yaml"),
                   "--memory", memory, "--port", str(self.port)]
        for name in names:
            command += ["--served-model-name", name]
        command += extra
        env = {**os.environ, "TANDEM_HOME": str(self.home)}
        print(f"[shim] starting {' '.join(command)}", flush=True)
        self.proc = subprocess.Popen(command, env=env, stdout=sys.stdout, stderr=sys.stderr,
                                     start_new_session=True)
        deadline = time.monotonic() + 600
        transport = httpx.HTTPTransport(uds=self.uds) if self.uds else None
        with httpx.Client(transport=transport, timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"tandem serve exited with {self.proc.returncode}")
                try:
                    if client.get(f"http://localhost:{self.port}/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("tandem serve was not ready in 600 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


_SERVER: _Tandem | None = None
MODEL_NAMES: list[str] = []  # filled by the shim's conftest from the selected modules


def _shared() -> _Tandem:
    global _SERVER
    if _SERVER is None:
        _SERVER = _Tandem(MODEL_NAMES)
        atexit.register(_SERVER.stop)
    return _SERVER


class RemoteOpenAIServer:
    """What vLLM's tests use of their server handle, on the shared `tandem serve`."""

    DUMMY_API_KEY = "token-abc123"

    def __init__(self, model: str, vllm_serve_args: list[str] | None = None, *,
                 env_dict: dict[str, str] | None = None, seed: int = 0,
                 auto_port: bool = True, max_wait_seconds: float | None = None,
                 **_: object) -> None:
        flags = unsupported_flags(list(vllm_serve_args or []))
        if flags:
            pytest.fail(f"vLLM flags Tandem has no equivalent for: {flags}", pytrace=False)
        if model not in MODEL_NAMES:
            pytest.fail(f"{model} is not among the served names {MODEL_NAMES}", pytrace=False)
        own = own_server_args(list(vllm_serve_args or []), env_dict)
        self._own = _Tandem(MODEL_NAMES, own) if own else None
        server = self._own or _shared()
        self.host, self.port, self.uds = "localhost", server.port, server.uds
        self.proc = server.proc

    def __enter__(self) -> RemoteOpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own is not None:  # the shared process serves the whole session
            self._own.stop()

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts: str) -> str:
        path = "/".join(part.strip("/") for part in parts if part)
        return f"{self.url_root}/{path}"

    def get_client(self, **kwargs) -> openai.OpenAI:
        kwargs.setdefault("timeout", 600)
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY,
                             max_retries=0, **kwargs)

    def get_async_client(self, **kwargs) -> openai.AsyncOpenAI:
        kwargs.setdefault("timeout", 600)
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY,
                                  max_retries=0, **kwargs)
