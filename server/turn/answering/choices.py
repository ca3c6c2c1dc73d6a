"""n > 1 (vLLM's and OpenAI's `n`): the choices of one request, generated side by side.

Every choice reads the same prompt; choice i samples with seed + i when a seed is given
(as vLLM's child requests do). Only choice 0 is the turn the ledger records: a client
that continues with another choice sends its text back, and that turn re-renders.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any, TypeVar

T = TypeVar("T")
_END = object()


def choice_copies(chat: Any) -> list[Any]:
    """The PreparedChat of each choice, choice 0 being `chat` itself."""
    seed = chat.params.seed
    return [chat] + [
        dataclasses.replace(chat, choice=i, params=dataclasses.replace(
            chat.params, seed=None if seed is None else seed + i))
        for i in range(1, chat.choices)]


def combined_usage(usages: list[dict]) -> dict:
    """One prompt read n times is one prompt: its tokens count once, the answers' add up."""
    first = usages[0]
    completion = sum(u["completion_tokens"] for u in usages)
    usage = {**first, "completion_tokens": completion,
             "total_tokens": first["prompt_tokens"] + completion}
    reasoning = [u.get("completion_tokens_details", {}).get("reasoning_tokens") for u in usages]
    if any(r is not None for r in reasoning):
        usage["completion_tokens_details"] = {"reasoning_tokens": sum(r or 0 for r in reasoning)}
    return usage


async def merged(streams: list[AsyncIterator[T]]) -> AsyncIterator[T]:
    """The items of all streams as they come; an error in one ends the whole."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield item
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                await queue.put(item)
            await queue.put(_END)
        except BaseException as error:  # handed to the reader, who raises it
            await queue.put(error)

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    running = len(tasks)
    try:
        while running:
            item = await queue.get()
            if item is _END:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
