"""One big body freezes no one (issue 53, item 3): a request of up to the 16 MiB body limit
is refused or served without holding the event loop, so `/healthz` and another user's chat
answer within a second while it runs.

Each body is sent to the real app (real engine) while a watcher on the server's own event
loop measures how late its 10 ms sleeps wake (a stalled loop wakes them late) and a second
client polls `/healthz`. Before the fix, a 15.6 MB chat stalled the loop for 38 s."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from server.access.key_check import MAX_BODY_BYTES
from server.http.body_limits import MAX_STRUCTURE, longest_token_chars

HEALTHZ_WITHIN_S = 1.0
# The loop may be held by steps bounded in size, never by one in proportion to the prompt
# (seconds). The largest bounded step is json's parse of a body at the limit, which holds
# the interpreter from its worker thread: 2.5 million ids parse in 0.25 s on this machine
# idle and took 0.53 s on a loaded CI runner, so the bound is twice that, still well under
# the 38 s a prompt-sized step took.
LOOP_STALL_AT_MOST_S = 1.0
HUGE_TEXT = "hello world, " * 1_200_000  # 15.6 MB, the size that stalled the loop for 38 s


class LoopWatch:
    """How late the server loop's 10 ms sleeps wake, and `/healthz` polled beside it."""

    def __init__(self, served) -> None:
        self.served = served
        self.stall = 0.0
        self.healthz: list[float] = []
        self._stop = threading.Event()

    async def _watch(self) -> None:
        while not self._stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            self.stall = max(self.stall, time.perf_counter() - before - 0.01)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.served.base_url, timeout=30) as client:
            while not self._stop.is_set():
                before = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                self.healthz.append(time.perf_counter() - before)
                time.sleep(0.05)

    def __enter__(self) -> LoopWatch:
        self._watching = asyncio.run_coroutine_threadsafe(self._watch(), self.served.loop)
        self._poller = threading.Thread(target=self._poll)
        self._poller.start()
        time.sleep(0.1)
        return self

    def __exit__(self, *_exc) -> None:
        time.sleep(0.1)
        self._stop.set()
        self._poller.join()
        self._watching.result(timeout=5)


def post(served, path: str, content: bytes) -> httpx.Response:
    with httpx.Client(base_url=served.base_url, timeout=120) as client:
        return client.post(path, content=content, headers={"Content-Type": "application/json"})


def chat(messages) -> bytes:
    return json.dumps({"model": "tiny", "messages": messages, "max_tokens": 2}).encode()


BODIES = {
    "chat, one huge message": ("/v1/chat/completions",
                               chat([{"role": "user", "content": HUGE_TEXT}])),
    "chat, small messages by the hundred thousand": (
        "/v1/chat/completions", chat([{"role": "user", "content": "a"}] * 400_000)),
    "responses, one huge input": ("/v1/responses", json.dumps(
        {"model": "tiny", "input": HUGE_TEXT}).encode()),
    "responses, items by the hundred thousand": ("/v1/responses", json.dumps(
        {"model": "tiny", "input": [{"role": "user", "content": "a"}] * 300_000}).encode()),
    "tokenize, one huge prompt": ("/tokenize", json.dumps({"prompt": HUGE_TEXT}).encode()),
    "tokenize, huge messages": ("/tokenize", json.dumps(
        {"messages": [{"role": "user", "content": HUGE_TEXT}]}).encode()),
    "completion, 32 huge prompts": ("/v1/completions", json.dumps(
        {"model": "tiny", "prompt": [HUGE_TEXT[:480_000]] * 32}).encode()),
    "detokenize, millions of ids": ("/detokenize", json.dumps(
        {"tokens": [9707] * 2_500_000}).encode()),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_a_body_up_to_the_limit_never_holds_the_event_loop(served, name):
    path, body = BODIES[name]
    assert len(body) <= MAX_BODY_BYTES
    with LoopWatch(served) as watch:
        answer = post(served, path, body)
    assert answer.status_code < 500, answer.text[:300]
    if answer.status_code >= 400:  # refused with a reason, in OpenAI's shape
        assert answer.json()["error"]["message"]
    assert max(watch.healthz) < HEALTHZ_WITHIN_S, (name, max(watch.healthz))
    assert watch.stall < LOOP_STALL_AT_MOST_S, (name, watch.stall)


def test_text_no_context_could_hold_is_refused_before_it_is_tokenized(served):
    answer = post(served, "/v1/chat/completions",
                  chat([{"role": "user", "content": HUGE_TEXT}]))
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "context_length_exceeded"
    assert "15,600,0" in answer.json()["error"]["message"]  # the text's length, counted


def test_text_just_inside_the_bound_is_tokenized_off_the_loop_and_counted(served, engine):
    """Text the bound lets through is tokenized (in a worker thread) and refused by its
    tokens, as vLLM would, while other clients are answered."""
    bound = served.app.state.tandem.engine.profile.max_model_len * longest_token_chars(
        engine.tokenizer)
    text = ("hello world, " * (bound // 13))[:bound - 1000]
    with LoopWatch(served) as watch:
        answer = post(served, "/v1/chat/completions", chat([{"role": "user", "content": text}]))
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "tokens" in error["message"]  # counted by the tokenizer, not by the bound
    assert watch.stall < LOOP_STALL_AT_MOST_S and max(watch.healthz) < HEALTHZ_WITHIN_S


def test_a_body_past_the_structure_bound_is_a_400_that_says_so(served):
    many = [{"role": "user", "content": "a"}] * (MAX_STRUCTURE // 3 + 1)
    answer = post(served, "/v1/chat/completions", chat(many))
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "request_too_large"


def test_another_users_chat_is_answered_while_a_big_batch_is_tokenized(served, engine):
    bound = served.app.state.tandem.engine.profile.max_model_len * longest_token_chars(
        engine.tokenizer)
    # 32 prompts, each just inside the bound: seconds of tokenizing before its 400
    prompt = ("hello world, " * (bound // 13))[:bound - 1000]
    big = json.dumps({"model": "tiny", "prompt": [prompt] * 32}).encode()
    finished: dict[str, float] = {}

    def small_chat() -> None:
        time.sleep(0.2)  # the big one is being tokenized by now
        answer = post(served, "/v1/chat/completions", chat([{"role": "user", "content": "hi"}]))
        finished["small"] = time.perf_counter()
        assert answer.status_code == 200, answer.text[:300]

    other = threading.Thread(target=small_chat)
    other.start()
    assert post(served, "/v1/completions", big).status_code == 400
    finished["big"] = time.perf_counter()
    other.join()
    # on the loop, the small chat waited for the whole tokenizing; off it, it goes first
    assert finished["small"] < finished["big"], finished
