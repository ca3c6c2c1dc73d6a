"""ConductorScheduler and the logits processors, on the real engine."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from engine.backend import RequestRejected
from engine.engine import GenerationParams
from engine.qwen_tokens import TOOL_CALL

USER = [{"role": "user", "content": "hello"}]


def prompt_ids(tokenizer, text: str = "Tell me a long story about the sea.") -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False,
                                             enable_thinking=False)
    return tokenizer.encode(rendered, add_special_tokens=False)


async def _collect(engine, ids, params, kind, stamps: list[float] | None = None):
    tokens: list[int] = []
    reason = None
    async for delta in engine.generate(ids, params, kind=kind):
        if delta.token_ids and stamps is not None:
            stamps.append(time.monotonic())
        tokens += delta.token_ids
        reason = delta.finish_reason or reason
    return tokens, reason


def test_background_turn_ends_when_a_client_request_arrives(served, engine, tokenizer,
                                                            monkeypatch):
    long_turn = GenerationParams(max_tokens=3000, temperature=1.0, seed=1)
    script = "The client request completes normally."
    # The moment the client request reaches the engine (not when the HTTP call was sent:
    # on a loaded machine the server's own work before that is not the scheduler's).
    admitted: list[float] = []
    count_started = engine.stats.started

    def stamp_admission(kind: str) -> None:
        if kind == "client":
            admitted.append(time.monotonic())
        count_started(kind)

    monkeypatch.setattr(engine.stats, "started", stamp_admission)

    async def scenario():
        stamps: list[float] = []
        background = asyncio.create_task(
            _collect(engine, prompt_ids(tokenizer), long_turn, "background", stamps))
        while len(stamps) < 5:  # the background turn is decoding
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=served.base_url, timeout=60) as c:
            answer = (await c.post("/v1/chat/completions", json={
                "model": "tiny", "messages": USER, "script": script})).json()
        tokens, reason = await background
        return tokens, reason, answer, sum(1 for t in stamps if t > admitted[0])

    tokens, reason, answer, after_client = served.run(scenario())
    assert reason == "abort"
    assert len(tokens) < 3000
    assert answer["choices"][0]["message"]["content"] == script
    # Ended at the next step: a delta or two may have been in flight, not dozens.
    assert after_client <= 3, after_client


def test_background_turn_waits_while_a_client_request_runs(served, engine, tokenizer):
    client_script = tuple(tokenizer.encode(" ".join(["word"] * 120), add_special_tokens=False))

    async def scenario():
        client_stamps: list[float] = []
        background_stamps: list[float] = []
        client = asyncio.create_task(_collect(
            engine, prompt_ids(tokenizer, "client"),
            GenerationParams(script_ids=client_script, max_tokens=400), "client", client_stamps))
        while not client_stamps:
            await asyncio.sleep(0.005)
        background = asyncio.create_task(_collect(
            engine, prompt_ids(tokenizer, "background"),
            GenerationParams(max_tokens=5, temperature=1.0), "background", background_stamps))
        await client
        await background
        return client_stamps, background_stamps

    client_stamps, background_stamps = served.run(scenario())
    assert background_stamps, "the background turn ran once the client was done"
    assert background_stamps[0] >= client_stamps[-1]


def test_tool_call_token_is_banned_in_background_turns(served, engine, tokenizer):
    script = tuple(tokenizer.encode("<tool_call>\n{\"name\": \"rm\"}\n</tool_call>",
                                    add_special_tokens=False))
    assert script[0] == TOOL_CALL
    forced = GenerationParams(script_ids=script, max_tokens=20)

    background, _ = served.run(_collect(engine, prompt_ids(tokenizer), forced, "background"))
    client, _ = served.run(_collect(engine, prompt_ids(tokenizer), forced, "client"))
    assert background and TOOL_CALL not in background  # it wrote, just not the call token
    assert client[0] == TOOL_CALL


def test_a_client_that_disconnects_mid_stream_aborts_its_engine_request(served, engine):
    before = engine.stats.requests_aborted["client"]
    body = {"model": "tiny", "messages": USER, "stream": True,
            "script": " ".join(["again"] * 1500), "max_tokens": 2000}
    with httpx.Client(base_url=served.base_url, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if '"content": "' in line and "again" in line:
                    break  # read a little, then hang up
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
            engine.running("client") or engine.stats.requests_aborted["client"] == before):
        time.sleep(0.1)
    assert engine.stats.requests_aborted["client"] == before + 1
    assert engine.running("client") == []


WHOLE_ANSWERS = {
    "/v1/chat/completions": {"messages": USER, "max_tokens": 2000},
    "/v1/completions": {"prompt": "hello", "max_tokens": 2000},
    "/v1/messages": {"messages": USER, "max_tokens": 2000},
    "/v1/responses": {"input": "hello", "max_output_tokens": 2000},
}


@pytest.mark.parametrize("path", list(WHOLE_ANSWERS))
def test_a_client_that_leaves_before_a_whole_answer_aborts_its_engine_request(
        served, engine, path):
    """A non-streamed answer's client hangs up once the engine generates for it: the
    engine request is aborted at once, as vLLM's server does (it ran on to max_tokens)."""
    import json
    import socket

    before = engine.stats.requests_aborted["client"]
    body = json.dumps({"model": "tiny", **WHOLE_ANSWERS[path]}).encode()
    host, port = served.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                     + body)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not engine.running("client"):
            time.sleep(0.01)
        assert engine.running("client"), "the engine never started the answer"
    left = time.monotonic()  # the client hung up
    while time.monotonic() < left + 30 and (
            engine.running("client") or engine.stats.requests_aborted["client"] == before):
        time.sleep(0.02)
    assert engine.stats.requests_aborted["client"] == before + 1
    assert engine.running("client") == []
    assert time.monotonic() - left < 5  # aborted, not run to its 2,000 tokens


def test_a_request_vllm_refuses_when_it_is_added_is_rejected_not_an_engine_failure(
        served, engine, tokenizer):
    # vLLM's VLLMValidationError is no ValueError: uncaught, it was a 500
    refused = GenerationParams(max_tokens=4, grammar="")
    with pytest.raises(RequestRejected, match="grammar"):
        served.run(_collect(engine, prompt_ids(tokenizer), refused, "client"))
    tokens, _ = served.run(_collect(engine, prompt_ids(tokenizer),
                                    GenerationParams(max_tokens=2), "client"))
    assert len(tokens) == 2  # the engine goes on serving


def test_the_warm_up_leaves_a_first_logprobs_request_nothing_to_set_up(engine):
    # vLLM reads the tokenizer's whole config (130-190 ms on the event loop, every stream
    # beside it waiting) the first time it detokenizes log-probabilities; it keeps what
    # it read on the tokenizer. The warm-up's request (named ids) is that first time,
    # before the server is ready.
    from vllm.tokenizers.detokenizer_utils import _CACHED_MARKER_KEY

    tokenizer = engine._llm.output_processor.tokenizer
    assert hasattr(tokenizer, _CACHED_MARKER_KEY)
