"""One answer's engine generations: the first from the prompt, one more after each call
to an engine tool.

When the model calls `memory_search` or `memory_read`, the generation is ended right after
the call, the server runs the tool, and the answer goes on as a new engine request whose
prompt is the previous prompt + what the model wrote + the tool exchange: the prefix cache
serves all of it but the response. The client sees one answer, with a status line for
the call. After `ToolLimits.max_calls` calls the tool-call token is banned for the rest
of the turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import aclosing

from engine.backend import EngineBackend
from server.turn.answering.answer import Answer
from server.turn.answering.engine_tools import EngineToolbox
from server.turn.answering.output_parser import ParsedDelta
from server.turn.tool_exchange import tool_exchange_ids


async def answer_deltas(engine: EngineBackend, answer: Answer,
                        toolbox: EngineToolbox | None) -> AsyncIterator[ParsedDelta]:
    """What the client is shown, delta by delta, across the answer's generations. The
    first engine delta is always yielded, empty or not: it says the engine has the request
    (a stream's first event waits for it, so requests reach the engine in arrival order)."""
    chat = answer.chat
    params, n = chat.params, 0
    first = True
    store, leases = answer.memory_filter.store, answer.services.leases
    if store is not None and leases is not None:
        # replicas: a block's write runs on this loop as the answer streams, and the
        # user's lease may need a call to the coordination service: taken here in a
        # worker thread, so the write finds it kept (or its refusal) without a call
        await leases.ahead(store.user)
    while True:
        request_id = chat.request_id if n == 0 else f"{chat.request_id}-{n}"
        prompt = [*chat.prompt_ids, *answer.output_ids]
        async with aclosing(engine.generate(prompt, params, request_id=request_id)) as deltas:
            async for delta in deltas:
                parsed = answer.feed(delta)
                if parsed or first:
                    first = False
                    yield parsed
                if answer.held is not None:
                    break  # closing the stream aborts the rest of this generation
        held = answer.held
        if held is None or toolbox is None:
            return
        outcome = await toolbox.run(held.call, chat.memory.user, chat.memory.project,
                                    chat.memory.session)
        exchange_ids = tool_exchange_ids(engine.tokenizer, outcome.response,
                                         chat.enable_thinking)
        yield ParsedDelta(content=answer.continue_after(held, outcome.status, exchange_ids))
        n += 1
        room = engine.profile.max_model_len - len(chat.prompt_ids) - len(answer.output_ids)
        max_tokens = min(chat.params.max_tokens - answer.generated, room)
        if max_tokens < 1:
            answer.out_of_room = True
            return
        params = dataclasses.replace(
            chat.params, max_tokens=max_tokens,
            script_ids=chat.script_for(n),
            ban_tool_call=True if answer.engine_calls >= toolbox.limits.max_calls else None)
