"""The continuous conversation: one per user, no sessions, its history kept by the server.

`prepare_continuous` turns the user's new message into a chat request whose messages are
the layers (policy + core, working memory), the replay window of history turns and the
new message; `server/turn/chat_turn.py` then serves it like any chat turn, so the ledger's exact ids
carry from one message to the next. When the answer is recorded, the turn is appended to
the history (`history/turns/...`), unless memory may not write for the request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from conductor.memory.context import MemoryContext
from conductor.memory.hiding import SHARED_KIND
from conductor.memory.interface import MemoryDoor
from conductor.memory.turn import Tail
from conductor.memory.types import (
    TIME_KIND,
    FenceRefused,
    Part,
    Turn,
    TurnMessage,
    UserLayers,
    WindowBounds,
    conversation_messages,
    local_offset_minutes,
    time_line,
    turn_tokens,
)
from engine.backend import EngineBackend
from engine.profiles import Profile
from server.http.errors import APIError
from server.http.schema import ChatCompletionRequest, ChatMessage
from server.turn import chat_turn
from server.turn.answering.answer import RecordedTurn
from server.turn.answering.engine_tools import with_engine_tools
from server.turn.checks import ContextOverflow
from server.turn.memory import request_user
from server.turn.prepared import PreparedChat
from server.turn.prompt import assemble, render_chat

log = logging.getLogger("tandem.continuous")

CONTINUOUS_SESSION = "continuous"
# The fewest tokens a message of the conversation keeps for its answer (or its max_tokens,
# up to a quarter of the context): the replay window gives way to make that room.
ANSWER_ROOM = 512
FIT_TRIES = 4


def window_bounds(profile: Profile) -> WindowBounds:
    return WindowBounds(turns=profile.memory.replay_turns,
                        tokens=profile.memory.replay_tokens or profile.max_model_len // 3)


def prepare_continuous(engine: EngineBackend, profile: Profile, services: MemoryDoor,
                       request: ChatCompletionRequest, headers, peer: str | None,
                       key_user: str | None = None,
                       utc_offset_minutes: int | None = None) -> PreparedChat:
    """The user's next message in their one conversation. `request` carries the new user
    message as its last message (and the sampling settings); anything before it is the
    client's copy of the history and is not used: the server holds the history."""
    last = request.messages[-1]
    if last.role != "user":
        raise APIError(400, "the continuous conversation takes a user message last; tool "
                       "results and assistant messages belong to sessions "
                       "(memory.conversation: sessions)", code="invalid_value",
                       param="messages")
    user = request_user(headers, peer, services.settings, key_user)
    switch = (headers.get("x-tandem-memory") or "").strip().lower()
    if user is None or switch == "off" or profile.memory.mode == "off":
        # Memory off reads and writes no layer: the message is answered on its own.
        alone = request.model_copy(update={"messages": [last]})
        return chat_turn.prepare(engine, profile, services, alone, headers, peer, key_user)
    layers = services.layers(user)
    layers.ensure()
    now = datetime.now(UTC)
    offset = local_offset_minutes(now) if utc_offset_minutes is None else utc_offset_minutes
    previous = layers.last_turn()
    replaced = previous if is_regenerate(request, previous) else None
    if replaced is not None:  # the answer before it is the one a new message follows
        previous = layers.history.read(replaced.seq - 1) if replaced.seq > 1 else None
    time_tail = Tail(TIME_KIND, time_line(now, offset, previous.time if previous else None))
    room = min(request.requested_max_tokens() or ANSWER_ROOM, profile.max_model_len // 4)
    bounds = window_bounds(profile)
    for attempt in range(FIT_TRIES):
        prefix, window = _conversation_so_far(engine, profile, services, layers, bounds,
                                              leave_out=replaced)
        messages = [*(ChatMessage.model_validate(m) for m in prefix), last]
        assembled = request.model_copy(update={"messages": messages})
        try:
            prepared = chat_turn.prepare(engine, profile, services, assembled, headers, peer,
                                    key_user, session=CONTINUOUS_SESSION,
                                    leading_tails=[time_tail], answer_room=room,
                                    hidden_gives_way=False,  # the window gives way
                                    data=layer_texts(prefix))
            break
        except ContextOverflow as overflow:
            # The layers, the shared context and the notes grew with the user's memory;
            # the window (the only part the server may shorten) makes room. Its start
            # moves for good, so the next message fits too.
            over = overflow.prompt_tokens + room - profile.max_model_len
            # counted only here: most messages fit, and counting tokens is not free
            window_tokens = sum(turn_tokens(t, engine.count_tokens) for t in window)
            if window_tokens == 0 or attempt == FIT_TRIES - 1:
                raise
            bounds = WindowBounds(bounds.turns, max(0, window_tokens - over))
    if prepared.memory.writes:
        text = last.text()
        # once its file is down, the turn is searchable (the index syncs in idle time)
        written = partial(services.on_change, user)
        prepared.on_recorded = lambda recorded: _append_turn(layers, text, now, offset,
                                                             recorded, replaced, written)
    else:
        # A message that leaves no history turn (X-Tandem-Memory: read) is not a step of
        # the conversation: no later message starts with it, and its record would take
        # the place of the last real one.
        prepared.ledger_kept = False
    return prepared


def is_regenerate(request: ChatCompletionRequest, last: Turn | None) -> bool:
    """The last turn's user message again, right after its answer: the client asks for
    another answer to it, which replaces the last turn. A client that sends its copy of
    the history shows a message said twice on purpose (its last answer comes between)."""
    if last is None:
        return False
    text = request.messages[-1].text().strip()
    if text != last.user_text.strip():
        return False
    earlier = request.messages[:-1]
    said_twice = (len(earlier) >= 2 and earlier[-1].role == "assistant"
                  and earlier[-2].role == "user" and earlier[-2].text().strip() == text)
    return not said_twice


def _conversation_so_far(engine: EngineBackend, profile: Profile, services: MemoryDoor,
                         layers: UserLayers, bounds: WindowBounds | None = None,
                         leave_out: Turn | None = None
                         ) -> tuple[list[dict[str, Any]], list[Turn]]:
    """The layers and the replay window as chat messages, and the window's turns (without
    `leave_out`, a turn being regenerated); each replayed answer's status lines are made
    known, so rendering takes them off (after a restart too)."""
    window = layers.replay(bounds or window_bounds(profile), engine.count_tokens)
    if leave_out is not None:
        window = [turn for turn in window if turn.seq != leave_out.seq]
    for turn in window:
        for message in turn.messages:
            if message.role == "assistant":
                services.show_answer(layers.user, message.shown(), message.text())
    return conversation_messages(layers.core(), layers.working_memory(), window), window


def layer_texts(prefix: list[dict[str, Any]]) -> tuple[str, ...]:
    """The layer files' messages (policy and core, working memory): files the jobs and the
    user write, so data, never prompt structure."""
    return tuple(m["content"] for m in prefix if m["role"] == "system")


def conversation_prefix_ids(engine: EngineBackend, profile: Profile, services: MemoryDoor,
                            user: str) -> list[int]:
    """The ids the user's next message will start with, as the server would render them
    now (no ledger record matches after working memory or the checkpoint changed): the
    layers, the shared context, the replayed turns, up to the new message. A prefill of
    these in idle time lets that message find them cached."""
    so_far, _ = _conversation_so_far(engine, profile, services, services.layers(user))
    messages = [*so_far, {"role": "user", "content": "."}]
    memory = MemoryContext(user=user, session=CONTINUOUS_SESSION, project=None,
                           mode=profile.memory.mode, header=None, has_user_message=True)
    request, _ = with_engine_tools(ChatCompletionRequest(model=profile.name, messages=messages),
                                   memory, profile.tool_call_format == "qwen")
    rendered = render_chat(engine.tokenizer, request, profile.thinking,
                           services.answers_shown(user), layer_texts(so_far))
    shared = services.shared_context(user, None, memory.shows_card, memory.reads,
                                     engine.count_tokens)
    head = Tail(SHARED_KIND, shared.text, shared.note_ids) if shared is not None else None
    built = assemble(engine.tokenizer, rendered, None, head, [], engine.reuse_block)
    history = rendered.history
    new_message = history[history.rfind("<|im_start|>user"):] + (rendered.generation_prompt or "")
    cut = len(engine.tokenizer.encode(new_message, add_special_tokens=False))
    return built.ids[:-cut]


def _append_turn(layers: UserLayers, text: str, at: datetime, offset: int,
                 recorded: RecordedTurn, replaced: Turn | None = None,
                 written: Callable[[], None] = lambda: None) -> None:
    """The turn into the history: a new one, or in the place of `replaced` (a regenerate
    keeps its number and its file)."""
    user_parts = [Part("text", text)]
    user_parts += [Part("hidden", kind=t.kind, note_ids=t.note_ids) for t in recorded.hidden
                   if t.note_ids]
    answer: list[Part] = []
    if recorded.reasoning:
        answer.append(Part("reasoning", recorded.reasoning))
    # In the order the client was shown them: the model's text, the status line of each
    # engine-tool call between its parts, the status lines at the end (shown() joins
    # them back); the client's calls after them.
    answer += [Part(kind, text) for kind, text in recorded.segments]
    answer += [Part("tool_call", name=name, arguments=arguments, call_id=call_id)
               for call_id, name, arguments in recorded.tool_calls]
    messages = (TurnMessage("user", tuple(user_parts)), TurnMessage("assistant", tuple(answer)))
    if replaced is not None:
        turn = layers.history.replace(Turn(replaced.seq, replaced.time,
                                           replaced.utc_offset_minutes, messages,
                                           recorded.interrupted))
    else:
        turn = layers.history.reserve(lambda seq: Turn(seq, at, offset, messages,
                                                       recorded.interrupted))
    asyncio.get_running_loop().run_in_executor(None, _write_turn, layers, turn, written)


def _write_turn(layers: UserLayers, turn: Turn, written: Callable[[], None]) -> None:
    try:
        layers.history.write(turn)
        written()
    except OSError as exc:  # reported, never a crash of the answer that already went out
        log.error("history turn %d not written: %s", turn.seq, type(exc).__name__)
    except FenceRefused as exc:  # replicas: another replica is the user's writer now
        log.warning("history turn %d not written: %s", turn.seq, exc.reason)


def history_json(turn: Turn) -> dict[str, Any]:
    """A turn for a client to show: the stored JSON, which never holds hidden text."""
    return turn.to_json()
