"""Shared fixtures: one real engine (tiny profile) behind the real app for the whole session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


@pytest.fixture(scope="session")
def built_models() -> Path:
    """The embedded models folder, built once (make setup normally has built it)."""
    from engine.home import tandem_home
    from engine.model_builder import ensure_model, models_dir

    home = tandem_home()
    ensure_model(home, "tiny-qwen3", progress=lambda _m: None)
    return models_dir(home)


@pytest.fixture(scope="session")
def test_home(tmp_path_factory, built_models: Path) -> Path:
    """A TANDEM_HOME of the session's own, sharing the built models read-only."""
    home = tmp_path_factory.mktemp("tandem-home")
    (home / "models").symlink_to(built_models, target_is_directory=True)
    return home


@pytest.fixture(scope="session")
def tiny_profile():
    from engine.profiles import load_profile

    return load_profile("tiny")


@pytest.fixture(scope="session")
def served(test_home: Path, tiny_profile):
    """The real server with the real engine, started once for every engine test."""
    from server.app import create_app
    from tests.served import ServedApp

    app = create_app(tiny_profile, test_home)
    server = ServedApp(app)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def engine(served):
    return served.app.state.tandem.engine


@pytest.fixture(scope="session")
def tokenizer(built_models: Path):
    from engine.engine import load_tokenizer

    return load_tokenizer(str(built_models / "tiny-qwen3"))


@pytest.fixture(scope="session")
def plain_vllm_server(built_models):
    """The endpoint session's one engine: plain vLLM's own server on the tiny model, with
    compact JSON (as a small model's endpoint should be)."""
    from bench.plain_vllm import plain_vllm

    with plain_vllm(built_models / "tiny-qwen3", "tiny-plain", "--structured-outputs-config",
                    '{"backend": "xgrammar", "disable_any_whitespace": true}') as url:
        yield url


@pytest.fixture(scope="session")
def sdk(served):
    """The OpenAI SDK pointed at the session's server, as a client would set it up."""
    import openai

    return openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="unused")
