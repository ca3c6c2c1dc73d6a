"""A backend that keeps one prefix cache for all users (llama.cpp's server: no cache salt
on its wire) serves one user unless its operator shares it knowingly: another user's
request is a 400 that says why, their background work is not sent, and `tandem proxy`
refuses at start a server several users may reach (named keys, a trusted proxy), saying
at start which it is. On the real llama.cpp server (engine/proxy/http_backend.py,
server/cli/proxy.py)."""

from __future__ import annotations

import httpx
import pytest

from engine.generation import GenerationParams
from tests.proxy.conftest import Backend, proxy_app
from tests.served import ServedApp

pytestmark = pytest.mark.endpoint
PROMPT = "my kettle is blue " + "word " * 80


def llama(base: str) -> Backend:
    return Backend("llama.cpp", base, "tiny-llama")


def ask(served: ServedApp, user: str) -> httpx.Response:
    return httpx.post(f"{served.base_url}/v1/chat/completions", timeout=120,
                      headers={"X-Tandem-User": user, "X-Tandem-Session": "s"},
                      json={"model": "tiny", "max_tokens": 8, "script": "Hi.",
                            "messages": [{"role": "user", "content": PROMPT}]})


def cached(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_second_user_is_refused_with_the_reason_and_their_background_work_not_sent(
        llama_cpp_server, tmp_path):
    app = proxy_app(llama(llama_cpp_server), tmp_path, trusted_proxies=frozenset({"127.0.0.1"}))
    served = ServedApp(app)
    served.start(ready_timeout=60)
    state = app.state.tandem
    try:
        first = ask(served, "ann")
        assert first.status_code == 200, first.text
        refused = ask(served, "bob")
        assert refused.status_code == 400, refused.text
        assert "one prefix cache for all users" in refused.text
        assert "--shared-backend-cache" in refused.text
        assert cached(ask(served, "ann")) > 64  # hers, served as before
        engine = state.engine

        async def bobs_background() -> list:
            params = GenerationParams(max_tokens=1, cache_salt=state.memory.cache_salt("bob"))
            return [d async for d in engine.generate([1, 2, 3], params, kind="background")]

        (ended,) = served.run(bobs_background())
        assert ended.finish_reason == "abort" and ended.prompt_tokens == 0
        assert engine.stats.background_yields["refused_another_user"] == 1
    finally:
        served.stop()


def test_shared_when_the_operator_says_so_and_then_one_users_prompt_shows_to_another(
        llama_cpp_server, tmp_path):
    """Why the default is one user: bob's first request finds ann's prompt cached, and the
    usage says how much of it."""
    app = proxy_app(llama(llama_cpp_server), tmp_path, trusted_proxies=frozenset({"127.0.0.1"}),
                    shared_cache=True)
    served = ServedApp(app)
    served.start(ready_timeout=60)
    try:
        cached(ask(served, "ann"))
        assert cached(ask(served, "bob")) > 64
    finally:
        served.stop()


@pytest.fixture
def proxy_cli(llama_cpp_server, monkeypatch, tmp_path, capsys):
    """`tandem proxy` on the command line against the real llama.cpp server, up to where it
    would serve: what it printed, and the engine it would serve with."""
    from engine.home import tandem_home
    from engine.model_builder import models_dir
    from engine.profiles import load_profile
    from server.cli import proxy
    from server.cli.main import main

    tokenizer = str(models_dir(tandem_home()) / "tiny-qwen3")
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    for name in ("TANDEM_API_KEY", "TANDEM_USER", "TANDEM_TRUSTED_PROXIES"):
        monkeypatch.delenv(name, raising=False)
    engines = []
    monkeypatch.setattr(proxy, "run_serve", lambda args, engine_for, **_: engines.append(
        engine_for(load_profile("tiny"))) or 0)

    def run(*flags: str) -> tuple[int, str, object]:
        engines.clear()
        code = main(["proxy", "--profile", "tiny", "--backend", llama_cpp_server,
                     "--tokenizer", tokenizer, *flags])
        out = capsys.readouterr()
        return code, out.out + out.err, engines[0] if engines else None

    return run


def test_tandem_proxy_refuses_several_users_on_llama_cpp_unless_told_and_says_which(
        proxy_cli, tmp_path):
    from server.access.keys import KeyStore

    code, said, _ = proxy_cli("--trusted-proxy", "10.1.1.1")
    assert code == 2 and "a trusted proxy relays any user" in said
    assert "--shared-backend-cache" in said
    keys = KeyStore(tmp_path / "home")
    keys.add("ann")
    code, said, engine = proxy_cli()  # one user: served, and said so
    assert code == 0 and engine.one_user
    assert "this server serves one user on it" in said
    keys.add("bob")
    code, said, engine = proxy_cli()
    assert code == 2 and "2 users have keys: ann, bob" in said and engine is None
    code, said, engine = proxy_cli("--shared-backend-cache")
    assert code == 0 and not engine.one_user
    assert "shared among them (--shared-backend-cache)" in said
