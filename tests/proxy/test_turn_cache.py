"""Turn two through the proxy reads turn one's prompt and answer from the backend's prefix
cache (issue 68, item 7), as a client sends a conversation: a system prompt, a long user
message that matches a note, an answer that writes a note, then turn one again with its
answer and a new message. Memory changed between the turns (a new note), and the hidden
context sits where it sat, so none of turn one's ids move. The backend's own count for
this one request (usage `prompt_tokens_details.cached_tokens`, passed on by the proxy),
not vLLM's global counters, which the idle loop's prefills also move."""

from __future__ import annotations

import dataclasses
import json
import time

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
        one = app.state.tandem.memory.records(USER, "turns")[0]
        # every full block of turn one's prompt and answer (all but the last token, which
        # vLLM never serves from the cache) came from the cache
        assert cached >= (len(one.ids) - 1) // BLOCK_SIZE * BLOCK_SIZE > 0.9 * len(one.ids)
    finally:
        served.stop()


def streamed_text(base: str, messages: list[dict], script: str, session: str | None,
                  model: str) -> str:
    """An answer streamed as a client reads it: the content deltas joined."""
    body = {"model": model, "messages": messages, "max_tokens": 120, "script": script,
            "stream": True}
    parts = []
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120,
                      headers={"X-Tandem-Session": session} if session else {}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[len("data: "):]).get("choices") or ():
                parts.append((choice.get("delta") or {}).get("content") or "")
    return "".join(parts)


def first_record(app, timeout: float = 10.0):
    """Turn one's record, once the turn has filed it (a stream files it as it ends)."""
    deadline = time.monotonic() + timeout
    while True:
        records = app.state.tandem.memory.records(USER)
        if records or time.monotonic() > deadline:
            assert len(records) == 1, records
            return records[0]
        time.sleep(0.05)


def dog_owner_app(plain_vllm_server, tmp_path, profile: str) -> tuple:
    """A proxy app of `profile` over the plain vLLM server, started, whose user has one
    note that turn one's message matches."""
    app = proxy_app(vllm_backend(plain_vllm_server), tmp_path, profile_name=profile)
    assert app.state.tandem.memory.store(USER).add(
        title="the user's dog", body="The user has a dog called Biscuit, a beagle.",
        kind="reference", scope="user", source="cli", has_user_message=True).ok
    served = ServedApp(app)
    served.start(ready_timeout=60)
    return app, served


# a system prompt and a long user message that matches the note
FIRST_TURN = [SYSTEM, {"role": "user", "content": "My dog Biscuit the beagle needs a walk "
                       "every morning. Then the garden: " + " ".join(
                           f"step{i} water the beds" for i in range(120))}]


def turn_two_cached(served, first: list[dict], answer: str, session: str | None,
                    profile: str, one) -> httpx.Response:
    """Turn two after `answer`: every full block of turn one's prompt and answer (all
    but the last token, which vLLM never serves from the cache) came from the cache."""
    second = chat(served.base_url, [*first, {"role": "assistant", "content": answer},
                                    {"role": "user", "content": "What first?"}],
                  script="The walk.", session=session, model=profile)
    cached, prompt = own_cached(second), second.json()["usage"]["prompt_tokens"]
    print(f"{profile} session={session}: cached {cached} of {prompt}, turn one "
          f"{len(one.ids)}")
    assert cached >= (len(one.ids) - 1) // BLOCK_SIZE * BLOCK_SIZE > 0.9 * len(one.ids)
    return second


@pytest.mark.parametrize("profile", ["tiny", "tiny-qwen3-template"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("session", ["turns", None], ids=["header", "derived"])
def test_turn_two_reads_turn_one_as_a_plain_client_sends_it(plain_vllm_server, tmp_path,
                                                             profile, stream, session):
    """As the plainest OpenAI client calls (no X-Tandem-Session: the session is derived
    from the conversation's opening, turn one's answer included), streamed or not, under
    Tandem's template and under Qwen3's published one (which renders an earlier answer
    without the empty think block the thinking-off generation prompt put before it)."""
    app, served = dog_owner_app(plain_vllm_server, tmp_path, profile)
    try:
        first = FIRST_TURN
        if stream:
            text = streamed_text(served.base_url, first, BLOCK, session, profile)
        else:
            answer = chat(served.base_url, first, script=BLOCK, max_tokens=120,
                          session=session, model=profile)
            assert answer.status_code == 200, answer.text
            text = answer.json()["choices"][0]["message"]["content"]
        assert "› remembered: the kettle is blue" in text
        turn_two_cached(served, first, text, session, profile, first_record(app))
    finally:
        served.stop()


def without_status_lines(text: str) -> str:
    """What a client that shows the server's status lines apart sends back: the answer
    as the model wrote it."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("› ")).strip()


@pytest.mark.parametrize("session", ["turns", None], ids=["header", "derived"])
def test_turn_two_reads_turn_one_when_the_client_sends_the_answer_without_its_status_line(
        plain_vllm_server, tmp_path, session):
    """The answer wrote a note, so the client was shown "Noted." and a status line; it
    sends back "Noted." alone. That is the same answer: the ledger finds turn one's record
    (under the session the shown form derives) and its ids stand, the note's hidden block
    in the answer included. Before, a derived session was another (turn one's record not
    found: 480 of 1,266 cached) and a named one matched only up to the answer, which was
    rendered afresh without its block (1,312 of 1,351 where 1,376 were turn one's)."""
    profile = "tiny-qwen3-template"
    app, served = dog_owner_app(plain_vllm_server, tmp_path, profile)
    try:
        first = FIRST_TURN
        answer = chat(served.base_url, first, script=BLOCK, max_tokens=120, session=session,
                      model=profile)
        assert answer.status_code == 200, answer.text
        text = answer.json()["choices"][0]["message"]["content"]
        assert "› remembered: the kettle is blue" in text
        one = first_record(app)
        sent = without_status_lines(text)
        assert sent == "Noted."
        second = turn_two_cached(served, first, sent, session, profile, one)
        # and turn two's record goes on from turn one's, under one session
        records = app.state.tandem.memory.records(USER)
        assert len({r.session for r in records}) == 1, records
        # and the turn itself ran under that session (its memory token, its triggers)
        token = second.headers["x-tandem-memory-token"]
        assert app.state.tandem.memory.resolve_token(token) == (USER, records[0].session)
        two = max(records, key=lambda r: len(r.ids))
        assert list(two.ids[:len(one.ids)]) == list(one.ids)
    finally:
        served.stop()
