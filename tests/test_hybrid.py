"""The tiny-hybrid profile: a hybrid-attention Qwen (Gated DeltaNet layers with a recurrent
state, one full-attention layer in four) served by vLLM's CPU path with its prefix cache in
align mode. A pytest session of its own (`-m hybrid`, run by make test): its engine is a
second vLLM beside the tiny one's, and each session starts one engine."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.hybrid

# vLLM raises the block size of this model to 640 tokens on the CPU (a block's attention
# pages must hold one recurrent state); the cache is reused a whole block at a time.
BLOCK = 640


@pytest.fixture(scope="module")
def hybrid_home(tmp_path_factory) -> Path:
    """A TANDEM_HOME sharing the built models (the tiny-hybrid one built if missing)."""
    from engine.home import tandem_home
    from engine.model_builder import ensure_model, models_dir

    ensure_model(tandem_home(), "tiny-hybrid", progress=lambda _m: None)
    home = tmp_path_factory.mktemp("hybrid-home")
    (home / "models").symlink_to(models_dir(tandem_home()), target_is_directory=True)
    return home


@pytest.fixture(scope="module")
def hybrid(hybrid_home: Path):
    from tests.served import serving

    with serving("tiny-hybrid", hybrid_home) as server:
        yield server


def test_the_tiny_hybrid_model_has_the_published_layout(hybrid_home):
    from engine.model_builder import is_intact, model_path

    folder = model_path(hybrid_home, "tiny-hybrid")
    assert is_intact(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    assert config["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert config["vocab_size"] == 151936  # Qwen's tokenizer, as the tiny Qwen3's


def chat(server, text: str, memory: str = "off", **extra) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", headers={
        "X-Tandem-Memory": memory}, json={
        "model": "tiny-hybrid", "messages": [{"role": "user", "content": text}],
        "max_tokens": 4, "temperature": 0, **extra}, timeout=120)


def cached(response: httpx.Response) -> tuple[int, int]:
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def long_text(tag: str, words: int = 700) -> str:
    return " ".join(f"{tag}{i}" for i in range(words))


def test_a_repeated_prompt_is_read_from_the_cache_a_whole_block_at_a_time(hybrid):
    """vLLM keeps the recurrent state at the prompt's last block boundary (its align mode
    ends a prefill chunk there), so the repeat reads every whole block but the last token's
    from the cache; a prompt that differs from its first token shares nothing."""
    from server.cli.profiles_check import shape_of

    engine = hybrid.app.state.tandem.engine
    vllm_block = engine._llm.vllm_config.cache_config.block_size
    assert vllm_block == BLOCK == engine.profile.block_size
    assert shape_of(engine.profile, Path()).block_size("cpu") == BLOCK  # profiles check's
    prompt_tokens, first = cached(chat(hybrid, long_text("alpha")))
    assert prompt_tokens > 2 * BLOCK and first == 0
    tokens, again = cached(chat(hybrid, long_text("alpha")))
    assert tokens == prompt_tokens and again == (prompt_tokens - 1) // BLOCK * BLOCK
    _, other = cached(chat(hybrid, long_text("beta")))
    assert other == 0


def test_a_prompt_shorter_than_a_block_gets_no_hit(hybrid):
    """The figure a short prompt gets on these models: nothing, even when sent twice."""
    short = long_text("gamma", 100)
    prompt_tokens, _ = cached(chat(hybrid, short))
    assert prompt_tokens < BLOCK
    assert cached(chat(hybrid, short)) == (prompt_tokens, 0)


def test_a_later_turn_with_memory_on_reads_the_earlier_turns_from_the_cache(hybrid):
    """Memory on: the second turn's prompt starts with the first turn's exact ids (the
    ledger's replay), so every whole block of them is cached."""
    session = {"X-Tandem-Session": "hybrid-later-turn"}  # the profile's memory: on
    messages = [{"role": "user", "content": long_text("delta", 900)}]
    body = {"model": "tiny-hybrid", "max_tokens": 4, "temperature": 0}
    first = httpx.post(f"{hybrid.base_url}/v1/chat/completions", headers=session,
                       json={**body, "messages": messages}, timeout=120)
    first_tokens, _ = cached(first)
    answer = first.json()["choices"][0]["message"]["content"]
    messages += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": "and then?"}]
    second = httpx.post(f"{hybrid.base_url}/v1/chat/completions", headers=session,
                        json={**body, "messages": messages}, timeout=120)
    tokens, hit = cached(second)
    assert first_tokens > 2 * BLOCK
    assert hit >= first_tokens // BLOCK * BLOCK - BLOCK and hit % BLOCK == 0, (tokens, hit)


def test_a_seed_is_a_400_naming_it_and_the_engine_lives_on(hybrid):
    """vLLM's CPU sampler cannot rewind a seeded generator over a chunked prefill (the
    engine core dies: 'CPU Generator does not use offset'), and this profile's prefix cache
    needs chunked prefill: the server refuses the seed instead of losing the engine."""
    refused = chat(hybrid, long_text("epsilon"), seed=7, temperature=0.8)
    assert refused.status_code == 400, refused.text
    assert "'seed'" in refused.json()["error"]["message"]
    assert "Traceback" not in refused.text
    assert cached(chat(hybrid, long_text("epsilon"), seed=7))[0] > BLOCK  # greedy: no generator
    assert cached(chat(hybrid, "still here?", temperature=0.8))[0] > 0
    assert httpx.get(f"{hybrid.base_url}/readyz", timeout=10).status_code == 200


def new_session(server, session: str, question: str) -> tuple[int, int]:
    """A new session's first turn (memory on: the engine's tools, the card) as
    (prompt tokens, cached)."""
    return cached(httpx.post(f"{server.base_url}/v1/chat/completions", headers={
        "X-Tandem-Session": session}, json={
        "model": "tiny-hybrid", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "system", "content": "You help with the service."},
                     {"role": "user", "content": question}]}, timeout=120))


def test_a_new_session_finds_the_shared_context_cached_to_its_block_boundary(hybrid):
    """The boundary-aware layout: the head and the shared context end on a block boundary
    (padded inside the hidden message), and the prewarm after a fresh layout ends one token
    past it, so vLLM keeps the recurrent state there and the user's second new session
    reads all of it from the cache (the first session's prompt runs past the next boundary,
    where vLLM kept that prompt's own state). Plain vLLM's layout gives that session
    nothing (one state per prompt, in its own tokens), the third the head's block floor."""
    tandem = hybrid.app.state.tandem
    assert tandem.engine.reuse_block == BLOCK  # read from vLLM's raised block size
    user = tandem.memory.settings.user_name
    # a first message past the next boundary: that prompt's own state is kept there
    first_tokens, first = new_session(hybrid, "aligned-a", long_text("zeta", 300))
    record = tandem.memory.ledger.latest(user, "aligned-a")
    (shared,) = [s for s in record.spans if s.kind == "shared"]
    assert shared.end % BLOCK == 0 and first == 0  # laid out to the boundary
    assert first_tokens > shared.end + BLOCK
    hybrid.run(tandem.prewarm.tick())  # idle time (the loop may have run it already)
    _, second = new_session(hybrid, "aligned-b", "And the database?")
    assert second == shared.end, (shared.end, second)
    _, third = new_session(hybrid, "aligned-c", "Anything else listening?")
    assert third == shared.end

