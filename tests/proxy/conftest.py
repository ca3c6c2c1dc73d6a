"""Proxy mode's real backends for its tests: plain vLLM's own OpenAI server on the tiny
model (the endpoint session's one engine, with Tandem's logits processors loaded so a test
can script an answer) and llama.cpp's own `llama-server` on the same model converted to
GGUF (a script there is a grammar of the script's ids), through its completions route and
its chat route. The memory path is the one `tandem serve` runs; only the engine is an HTTP
backend (`engine/proxy/`).

How much of a prompt a backend served from its cache: each request's usage
(`prompt_tokens_details.cached_tokens`: llama.cpp's always, vLLM's as the endpoint session
starts it, with --enable-prompt-tokens-details), which the proxy passes on; and vLLM's own
counters (`vllm:prefix_cache_hits_total` on its /metrics), which count every request,
background ones included."""

from __future__ import annotations

import dataclasses
import re

import httpx
import pytest

from tests.served import ServedApp

USER = "tester"
BLOCK = ('Noted. <tandem_memory op="add" scope="user" kind="reference">\ntitle: the kettle '
         'is blue\n\nThe user keeps a blue kettle on the left of the stove.\n</tandem_memory>')


@dataclasses.dataclass(frozen=True)
class Backend:
    kind: str  # vllm, llama.cpp
    base: str  # its base URL, without /v1
    model: str
    wire: str = "completions"  # or chat: messages its own template renders


@pytest.fixture(params=["vllm", "llama.cpp", "llama.cpp-chat"])
def backend(request) -> Backend:
    if request.param == "vllm":
        return vllm_backend(request.getfixturevalue("plain_vllm_server"))
    wire = "chat" if request.param.endswith("-chat") else "completions"
    return Backend("llama.cpp", request.getfixturevalue("llama_cpp_server"), "tiny-llama",
                   wire)


def vllm_backend(url: str) -> Backend:
    return Backend("vllm", url.removesuffix("/v1"), "tiny-plain")


def proxy_app(backend: Backend, tmp_path, model: str | None = None, writer_policy=None,
              timeout_s: float = 600.0, trusted_proxies: frozenset[str] = frozenset(),
              shared_cache: bool = False, profile_name: str = "tiny"):
    from conductor.memory.settings import MemorySettings
    from engine.engine import load_tokenizer
    from engine.home import tandem_home
    from engine.model_builder import models_dir
    from engine.profiles import load_profile
    from engine.proxy.http_backend import HttpEngine
    from server.app import create_app

    # Another tiny profile (tiny-qwen3-template): the same weights and vocabulary as the
    # backend's tiny model, so its ids mean the same there; only its template differs.
    profile = load_profile(profile_name)
    profile = dataclasses.replace(profile, scripted=True, memory=dataclasses.replace(
        profile.memory, mode="on"))
    tokenizer = load_tokenizer(str(models_dir(tandem_home()) / profile.builtin_model))
    engine = HttpEngine(profile, tokenizer, backend.base, model or backend.model,
                        scripted_kernels=backend.kind == "vllm", kind=backend.kind,
                        timeout_s=timeout_s, wire=backend.wire, shared_cache=shared_cache)
    settings = MemorySettings(user_name=USER)
    if trusted_proxies:
        settings = dataclasses.replace(settings, trusted_proxies=trusted_proxies)
    app = create_app(profile, tmp_path, engine=engine, writer_policy=writer_policy,
                     memory_settings=settings)
    app.state.tandem.writer.writer.mode = "on"
    return app


@pytest.fixture
def proxy(backend, tmp_path):
    served = ServedApp(proxy_app(backend, tmp_path))
    served.start(ready_timeout=60)
    yield served
    served.stop()


def cache_counters(backend: str) -> tuple[float, float]:
    """The backend's prefix-cache hits and queries so far (tokens)."""
    text = httpx.get(f"{backend.removesuffix('/v1')}/metrics", timeout=10).text
    found = {}
    for name in ("hits", "queries"):
        match = re.search(rf"^vllm:prefix_cache_{name}_total(?:{{[^}}]*}})? (\S+)$", text,
                          re.MULTILINE)
        found[name] = float(match.group(1)) if match else 0.0
    return found["hits"], found["queries"]


def chat(base: str, messages: list[dict], script: str | None = None,
         session: str | None = "kitchen", **extra):
    body = {"model": "tiny", "messages": messages, "max_tokens": 24, **extra}
    if script is not None:
        body["script"] = script
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120,
                      headers={"X-Tandem-Session": session} if session else {})
