"""The turn's answer on the engine, as the client reads it: one chat.completion object or
server-sent chunks, n choices side by side.

Each choice generates (`generate.answer_deltas`: engine tools run between generations),
parses through its `Answer` (reasoning, content, tool calls, held-back memory blocks) and
is recorded in the ledger when it finishes or the client goes away (`Answer.finish`,
`Answer.stopped`). Only choice 0 records the turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from conductor.memory.interface import MemoryDoor
from engine.backend import EngineBackend, EngineDead
from server.http.schema import SYSTEM_FINGERPRINT
from server.http.sse import DONE, frame, prepended
from server.turn.answering.answer import Answer
from server.turn.answering.choices import choice_copies, combined_usage, merged
from server.turn.answering.engine_tools import NAMES as engine_tool_names
from server.turn.answering.engine_tools import EngineToolbox
from server.turn.answering.generate import answer_deltas
from server.turn.answering.logprobs import prompt_logprobs_json
from server.turn.answering.output_parser import ParsedDelta
from server.turn.prepared import PreparedChat


def start_answer(engine: EngineBackend, services: MemoryDoor, chat: PreparedChat,
           toolbox: EngineToolbox | None) -> tuple[Answer, EngineToolbox | None]:
    toolbox = toolbox if chat.engine_tools and not chat.json_answer else None
    return Answer.start(chat, services, engine.tokenizer, engine.tokens.end_of_turn,
                        engine_tool_names if toolbox is not None else frozenset()), toolbox


async def complete(engine: EngineBackend, services: MemoryDoor, chat: PreparedChat,
                   toolbox: EngineToolbox | None = None) -> dict:
    """The whole answer (n choices of it) as one chat.completion object."""
    done = await asyncio.gather(*(_complete_choice(engine, services, c, toolbox)
                                  for c in choice_copies(chat)))
    body = {
        "id": chat.completion_id,
        "object": "chat.completion",
        "created": chat.created,
        "model": chat.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [choice for choice, _ in done],
        "usage": combined_usage([answer.usage() for _, answer in done]),
        # vLLM's own fields, null unless asked for (its clients read them as attributes)
        "prompt_logprobs": prompt_logprobs_json(done[0][1].prompt_logprobs)
        if chat.params.prompt_logprobs is not None else None,
        "prompt_token_ids": list(chat.prompt_ids) if chat.return_token_ids else None,
    }
    return body


async def _complete_choice(engine: EngineBackend, services: MemoryDoor, chat: PreparedChat,
                           toolbox: EngineToolbox | None) -> tuple[dict, Answer]:
    answer, toolbox = start_answer(engine, services, chat, toolbox)
    parts: list[ParsedDelta] = []
    try:
        async for parsed in answer_deltas(engine, answer, toolbox):
            parts.append(parsed)
    except asyncio.CancelledError:  # the client went away before the answer was whole
        answer.stopped()
        raise
    parts.append(answer.finish())
    reasoning = "".join(p.reasoning for p in parts)
    message: dict = {"role": "assistant",
                     "content": chat.echo + "".join(p.content for p in parts) or None}
    if reasoning and chat.include_reasoning:
        message.update(reasoning_fields(reasoning))
    if answer.client_calls:
        message["tool_calls"] = [c.as_openai() for c in answer.client_calls]
    logprobs = answer.shown_logprobs(final=True) if chat.params.top_logprobs is not None \
        else None
    choice = {"index": chat.choice, "message": message,
              "logprobs": None if logprobs is None else {"content": logprobs},
              "finish_reason": answer.finish_reason,
              # a stop string, as vLLM's; the end of turn is the model's end: None
              "stop_reason": answer.last.stop_reason
              if answer.last and isinstance(answer.last.stop_reason, str) else None,
              "token_ids": list(answer.output_ids) if chat.return_token_ids else None}
    return choice, answer


def reasoning_fields(reasoning: str) -> dict[str, str]:
    """The reasoning under both names clients read: `reasoning` (vLLM since 0.11, after
    OpenAI's guidance) and `reasoning_content` (DeepSeek's, still read by the Vercel AI SDK,
    OpenCode and older vLLM clients)."""
    return {"reasoning": reasoning, "reasoning_content": reasoning}


def _chunk(chat: PreparedChat, delta: dict, finish_reason: str | None = None,
           logprobs: list[dict] | None = None, token_ids: list[int] | None = None,
           usage: dict | None = None, first: bool = False) -> str:
    choice: dict = {"index": chat.choice, "delta": delta, "finish_reason": finish_reason}
    if logprobs:
        choice["logprobs"] = {"content": logprobs}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    body = {
        "id": chat.completion_id,
        "object": "chat.completion.chunk",
        "created": chat.created,
        "model": chat.model,
        "choices": [choice],
    }
    if first and chat.return_token_ids:  # as vLLM: the prompt's ids once, in the first chunk
        body["prompt_token_ids"] = list(chat.prompt_ids)
    if usage is not None:
        body["usage"] = usage
    return frame(body)


def _delta_fields(chat: PreparedChat, parsed: ParsedDelta, first_call_index: int) -> dict:
    out: dict = {}
    if parsed.reasoning and chat.include_reasoning:
        out.update(reasoning_fields(parsed.reasoning))
    if parsed.content:
        out["content"] = parsed.content
    if parsed.tool_calls:
        out["tool_calls"] = [c.as_openai(first_call_index + i)
                             for i, c in enumerate(parsed.tool_calls)]
    return out


def _joined(first: ParsedDelta, then: ParsedDelta) -> ParsedDelta:
    return ParsedDelta(reasoning=first.reasoning + then.reasoning,
                       content=first.content + then.content,
                       tool_calls=[*first.tool_calls, *then.tool_calls])


async def stream(engine: EngineBackend, services: MemoryDoor, chat: PreparedChat,
                 include_usage: bool, toolbox: EngineToolbox | None = None,
                 continuous_usage: bool = False) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format (the n choices' chunks as they come),
    ending with `data: [DONE]`. `continuous_usage`: vLLM's continuous_usage_stats."""
    answers: list[Answer] = []
    async for event in merged([_choice_events(engine, services, c, toolbox, answers,
                                              continuous_usage)
                               for c in choice_copies(chat)]):
        yield event
    if include_usage:
        usage_body = {"id": chat.completion_id, "object": "chat.completion.chunk",
                      "created": chat.created, "model": chat.model,
                      "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [],
                      "usage": combined_usage([a.usage() for a in
                                               sorted(answers, key=lambda a: a.chat.choice)])}
        yield frame(usage_body)
    yield DONE


async def _choice_events(engine: EngineBackend, services: MemoryDoor, chat: PreparedChat,
                         toolbox: EngineToolbox | None, answers: list[Answer],
                         continuous_usage: bool = False) -> AsyncIterator[str]:
    """One choice's chunks, from its role to its finish reason; as vLLM's, the last
    text comes in the chunk with the finish reason."""
    answer, toolbox = start_answer(engine, services, chat, toolbox)
    answers.append(answer)
    calls_sent = ids_sent = 0
    wants_logprobs = chat.params.top_logprobs is not None

    def new_ids() -> list[int] | None:
        nonlocal ids_sent
        if not chat.return_token_ids:
            return None
        ids, ids_sent = answer.output_ids[ids_sent:], len(answer.output_ids)
        return ids

    def usage() -> dict | None:
        return answer.usage() if continuous_usage else None

    deltas = answer_deltas(engine, answer, toolbox)
    try:
        # The first event waits for the engine's first delta (see server.http.sse.started).
        first = await anext(deltas, None)
    except (GeneratorExit, asyncio.CancelledError, EngineDead):
        answer.stopped()
        raise
    opening = usage()
    if opening is not None:  # the role comes before any token
        opening = {**opening, "completion_tokens": 0, "total_tokens": opening["prompt_tokens"]}
    yield _chunk(chat, {"role": "assistant", "content": ""}, usage=opening, first=True)
    if chat.echo:  # vLLM's echo: the repeated message in a chunk of its own
        yield _chunk(chat, {"content": chat.echo}, usage=opening)
    last = ParsedDelta()  # the final generation's last text, sent with the finish reason
    try:
        async for parsed in prepended(first, deltas):
            if answer.last is not None and answer.last.finished and answer.held is None:
                last = _joined(last, parsed)
                continue
            logprobs = answer.shown_logprobs() if wants_logprobs else None
            if parsed or logprobs:
                yield _chunk(chat, _delta_fields(chat, parsed, calls_sent), logprobs=logprobs,
                             token_ids=new_ids(), usage=usage())
                calls_sent += len(parsed.tool_calls)
    except (GeneratorExit, asyncio.CancelledError, EngineDead):
        answer.stopped()  # the record ends where the client's text did
        raise
    rest = _joined(last, answer.finish())
    logprobs = answer.shown_logprobs(final=True) if wants_logprobs else None
    yield _chunk(chat, _delta_fields(chat, rest, calls_sent), finish_reason=answer.finish_reason,
                 logprobs=logprobs, token_ids=new_ids(), usage=usage())


def response_headers(chat: PreparedChat) -> dict[str, str]:
    token = {"X-Tandem-Memory-Token": chat.token} if chat.token else {}
    return {**token, **chat.command_header}

