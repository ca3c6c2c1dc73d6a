"""Per-row state of the logits processors follows the batch (issue 20): a wrong move
would apply one request's script or ban to another."""

from __future__ import annotations

import asyncio
import math
import time
from types import SimpleNamespace

from vllm.v1.sample.logits_processor import MoveDirectionality

from engine.engine import GenerationParams
from kernels.rows import RowStates


def batch(removed=(), added=(), moved=()):
    return SimpleNamespace(removed=list(removed), added=list(added), moved=list(moved))


def params(name: str):
    return SimpleNamespace(extra_args={"name": name})


def test_rows_follow_adds_removals_moves_and_swaps():
    rows = RowStates(lambda p, _out: p.extra_args.get("name"))
    rows.update(batch(added=[(0, params("a"), [], []), (1, params("b"), [], []),
                             (2, params("c"), [], [])]))
    rows.update(batch(removed=[1], moved=[(2, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    assert rows.rows == {0: "a", 1: "c"}  # c filled the hole b left
    rows.update(batch(moved=[(0, 1, MoveDirectionality.SWAP)]))
    assert rows.rows == {0: "c", 1: "a"}
    rows.update(batch(added=[(0, params("d"), [], [])]))  # a new request takes row 0
    assert rows.rows == {0: "d", 1: "a"}
    rows.update(batch(added=[(1, SimpleNamespace(extra_args={}), [], [])]))  # no state
    assert rows.rows == {0: "d"}
    rows.update(None)
    assert rows.rows == {0: "d"}


def test_scripted_rows_running_at_once_each_get_their_own_script(served, engine, tokenizer):
    scripts = [f"Answer number {n}: " + " ".join([f"w{n}"] * (10 + 7 * n)) for n in range(5)]

    async def one(n: int, script: str) -> str:
        ids = tokenizer.encode(f"question {n}", add_special_tokens=False)
        params = GenerationParams(
            max_tokens=200, script_ids=tuple(tokenizer.encode(script, add_special_tokens=False)))
        text = ""
        async for delta in engine.generate(ids, params, kind="client"):
            text += delta.text
        return text

    async def all_at_once():
        return await asyncio.gather(*(one(n, s) for n, s in enumerate(scripts)))

    # Different lengths: rows finish at different steps, so the batch moves rows around.
    assert served.run(all_at_once()) == scripts


def test_a_banned_row_never_samples_the_tool_call_token_while_the_rows_beside_it_do(
        served, engine, tokenizer):
    """The tool-call ban is a switch of one row (`banned_token_ids` in its extra_args), not of
    the batch. A background row and a client row never decode in one step (the scheduler
    ends a background turn before a client's first step and holds a new one back while a
    client runs: test_engine_scheduling.py), but banned and unbanned rows do share a batch:
    a client generation past the engine tools' call limit runs banned beside other
    clients (server/turn/answering/generate.py). Six rows decode at once, banned and
    unbanned in turn, each forced to write the tool-call token at every other step; their
    lengths differ, so rows finish at different steps and vLLM moves the rest to fill the
    holes."""
    from engine.qwen_tokens import TOOL_CALL

    word = tuple(tokenizer.encode(" x", add_special_tokens=False))
    scripts = [(TOOL_CALL, *word) * (10 + 4 * n) for n in range(6)]

    async def one(n: int, script: tuple[int, ...]):
        ids = tokenizer.encode(f"row {n}", add_special_tokens=False)
        params = GenerationParams(max_tokens=len(script) + 4, temperature=0.0,
                                  script_ids=script, ban_tool_call=n % 2 == 0,
                                  logprob_token_ids=(TOOL_CALL,))
        out: list[int] = []
        odds: list[float] = []  # the tool-call token's log-probability at each step
        stamps: list[float] = []
        async for delta in engine.generate(ids, params, kind="client"):
            if delta.token_ids:
                stamps.append(time.monotonic())
            out += delta.token_ids
            odds += [step[TOOL_CALL] for step in delta.logprobs]
        return out, odds, stamps

    async def all_at_once():
        return await asyncio.gather(*(one(n, s) for n, s in enumerate(scripts)))

    rows = served.run(all_at_once())
    # One batch: every row wrote its first token before any row wrote its last.
    assert max(stamps[0] for _, _, stamps in rows) < min(stamps[-1] for _, _, stamps in rows)
    for n, (script, (out, odds, _)) in enumerate(zip(scripts, rows, strict=True)):
        at_calls = [odds[i] for i, t in enumerate(script) if t == TOOL_CALL]
        if n % 2 == 0:  # banned: it wrote (the script's other tokens), never the call
            assert len(out) >= len(script) and TOOL_CALL not in out, (n, out)
            assert all(odd == -math.inf for odd in odds), (n, odds)
        else:  # unbanned: the call token at every forced step, sampled from an open row
            assert out[:len(script)] == list(script), (n, out)
            assert all(odd > -1.0 for odd in at_calls), (n, at_calls)
