"""Shared fixtures: one real engine (tiny profile) behind the real app for the whole session."""

from __future__ import annotations

import contextlib
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


@pytest.fixture
def serve_home(tmp_path: Path, built_models: Path) -> Path:
    """A TANDEM_HOME of this test's own for a `tandem serve` process it starts, sharing the
    built models read-only."""
    home = tmp_path / "home"
    home.mkdir()
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
    # Its idle loop would prefill a branch per note that a test writes, behind the tests'
    # backs (engine tests wait for a background request of their own): the branches are
    # tested on apps of their own (tests/test_prewarm_branches.py).
    app.state.tandem.memory.idle.prewarm.notes = 0
    server = ServedApp(app)
    server.start()
    yield server
    server.stop()


# The chat templates every ledger and hidden-context test runs on: Tandem's embedded one
# (the `tiny` profile) and the published ones of the families the GPU profiles serve.
TEMPLATE_PROFILES = {"embedded": "tiny", "qwen3": "tiny-qwen3-template",
                     "qwen25": "tiny-qwen25-template"}


def template_profile(template: str):
    """The test profile of `template`, named `tiny` as every test's request names it."""
    import dataclasses

    from engine.profiles import load_profile

    return dataclasses.replace(load_profile(TEMPLATE_PROFILES[template]), name="tiny")


def template_engine(served, template: str):
    """The session's one engine, rendering with `template`'s tokenizer and chat template
    (the template models share the tiny model's weights)."""
    from engine.engine import resolve_model_path

    engine = served.app.state.tandem.engine
    if template == "embedded":
        return engine
    profile = template_profile(template)
    path = resolve_model_path(profile, engine_home(), lambda _m: None)
    return engine.rendering_for(profile, path)


def engine_home() -> Path:
    from engine.home import tandem_home

    return tandem_home()


@pytest.fixture(scope="session")
def _template_apps(served, tmp_path_factory):
    """The second apps, one a published template, made when first asked for."""
    from server.app import create_app
    from tests.served import AppOnLoop

    apps: dict[str, AppOnLoop] = {}

    def get(template: str):
        if template == "embedded":
            return served
        if template not in apps:
            engine = template_engine(served, template)
            home = tmp_path_factory.mktemp(f"tandem-home-{template}")
            (home / "models").symlink_to(engine_home() / "models", target_is_directory=True)
            apps[template] = AppOnLoop(served, create_app(engine.profile, home, engine=engine))
            apps[template].start()
        return apps[template]

    yield get
    for app in apps.values():
        app.stop()


@pytest.fixture(scope="session", params=list(TEMPLATE_PROFILES))
def template(request) -> str:
    """Each chat template in turn: a test that takes it runs once a template."""
    return request.param


@pytest.fixture(scope="session")
def template_tokenizer(built_models, template):
    """`template`'s tokenizer and chat template, without an engine."""
    from engine.engine import load_tokenizer, resolve_model_path

    profile = template_profile(template)
    return load_tokenizer(resolve_model_path(profile, built_models.parent, lambda _m: None))


@pytest.fixture(scope="session")
def template_served(_template_apps, template):
    """The real app rendering with `template`, served over HTTP on the session's engine."""
    return _template_apps(template)


@pytest.fixture
def template_app(template_served, tmp_path):
    """An app of its own (a fresh home, user `tester`) rendering with `template`, on the
    session's engine: each test that takes it runs once a chat template."""
    from tests.inprocess import InProcessApp

    return InProcessApp(template_served, tmp_path)


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
    compact JSON (as a small model's endpoint should be) and Tandem's logits processors
    loaded (they act only on a request that names them in `vllm_xargs`: the proxy's
    scripted answers and tool-call ban). Its usage carries each request's cached tokens
    (`VLLM_FLAGS`, as tests/data/vllm_shapes.json was recorded)."""
    import kernels
    from bench.load.plain_vllm import plain_vllm
    from tests.record_vllm_shapes import VLLM_FLAGS

    with plain_vllm(built_models / "tiny-qwen3", "tiny-plain", *VLLM_FLAGS,
                    "--structured-outputs-config",
                    '{"backend": "xgrammar", "disable_any_whitespace": true}',
                    "--logits-processors", *kernels.ALL) as url:
        yield url


@pytest.fixture(scope="session")
def llama_cpp_server(built_models, pytestconfig):
    """llama.cpp's own server on the tiny model (converted to GGUF): the proxy's real
    backend that is not vLLM. Its base URL, without /v1. Built here the first time a test
    needs it (about 4.5 minutes on 2 cores, not in `make setup`), its progress shown."""
    from bench.proxy.llama_server import BUILD_COMMAND, build, built, llama_server

    if not built():
        capture = pytestconfig.pluginmanager.getplugin("capturemanager")
        with (capture.global_and_fixture_disabled() if capture  # its progress, as it goes
              else contextlib.nullcontext()):
            print("\n[tests] llama.cpp's server is not built: building it for the proxy "
                  f"tests ({BUILD_COMMAND})", flush=True)
            build(built_models)
    if not built():
        pytest.skip(f"llama.cpp's server is not built ({BUILD_COMMAND} needs cmake)")
    with llama_server() as base:
        yield base


@pytest.fixture(scope="session")
def sdk(served):
    """The OpenAI SDK pointed at the session's server, as a client would set it up."""
    import openai

    return openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="unused")
