"""Turn two through the proxy reads turn one's prompt and answer from the backend's prefix
cache (issue 68, item 7), as a client sends a conversation: a system prompt, a long user
message that matches a note, an answer that writes a note, then turn one again with its
answer and a new message. Memory changed between the turns (a new note), and the hidden
context sits where it sat, so none of turn one's ids move. The backend's own count for
this one request (usage `prompt_tokens_details.cached_tokens`, passed on by the proxy),
not vLLM's global counters, which the idle loop's prefills also move."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from tests.proxy.conftest import BLOCK, USER, chat, proxy_app, vllm_backend
from tests.served import ServedApp

pytestmark = pytest.mark.endpoint
BLOCK_SIZE = 32  # the endpoint session's vLLM (bench/load/plain_vllm.py TEST_ARGS)
SYSTEM = {"role": "system", "content": "You are a careful assistant who answers briefly "
                                       "and kindly. " * 8}


def own_cached(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("wire", ["completions", "chat"])
def test_turn_two_reads_turn_ones_prompt_and_answer_from_the_cache(plain_vllm_server,
                                                                   tmp_path, wire):
    backend = dataclasses.replace(vllm_backend(plain_vllm_server), wire=wire)
    app = proxy_app(backend, tmp_path)
    store = app.state.tandem.memory.store(USER)
    assert store.add(title="the user's dog", body="The user has a dog called Biscuit, a "
                     "beagle.", kind="reference", scope="user", source="cli",
                     has_user_message=True).ok
    served = ServedApp(app)
    served.start(ready_timeout=60)
    try:
        words = " ".join(f"step{i} water the beds" for i in range(120))
        first = [SYSTEM, {"role": "user", "content": "My dog Biscuit the beagle needs a "
                          f"walk every morning. Then the garden: {words}"}]
        answer = chat(served.base_url, first, script=BLOCK, max_tokens=120, session="turns")
        assert answer.status_code == 200, answer.text
        text = answer.json()["choices"][0]["message"]["content"]
        assert "› remembered: the kettle is blue" in text  # memory changed in turn one
        second = chat(served.base_url, [*first, {"role": "assistant", "content": text},
                                        {"role": "user", "content": "What first?"}],
                      script="The walk.", session="turns")
        cached = own_cached(second)
        one = app.state.tandem.memory.ledger.records(USER, "turns")[0]
        # every full block of turn one's prompt and answer (all but the last token, which
        # vLLM never serves from the cache) came from the cache
        assert cached >= (len(one.ids) - 1) // BLOCK_SIZE * BLOCK_SIZE > 0.9 * len(one.ids)
    finally:
        served.stop()
