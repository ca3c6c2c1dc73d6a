"""Per-row state of the logits processors follows the batch (issue 20): a wrong move
would apply one request's script or ban to another."""

from __future__ import annotations

import asyncio
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
