"""One chat turn, top-down: the way a request goes through memory, each step a module.

Before the engine (`prepare`, below; modules of `server/turn/`):

1. check the request against the served profile ........... `checks.py`
2. resolve its user, session, project and memory's mode .... `memory.py`
3. memory's calls down, flat: `MemoryServices.begin_turn`
   (what the layout reads of memory, the hiding decision),
   the turn's token work (render, replay, assemble the
   prompt's ids with the hidden parts memory chooses, fit
   them in the context: memory gives way first), then
   `MemoryServices.admit_turn` (a miss noted, a memory
   command carried out) .................................... `prompt.py`, `replay.py`, `fit.py`
4. the engine's parameters ................................. `params.py`, `constraints/`

On the engine (`server/turn/answering/`; the routes call `respond.py` with the PreparedChat):

5. generate, running engine tools between generations ...... `generate.py`, `engine_tools.py`
6. parse the answer: reasoning, content, tool calls and
   held-back memory blocks ................................. `answer.py`, `output_parser.py`,
                                                             `memblock.py`
7. memory's one call up (`MemoryServices.record_turn`, from
   `Answer.finish` or `Answer.stopped`): the ledger's record,
   the shown answer, the injections, the writer's triggers .. `answer.py`

No step imports the routes; the engine is `engine.backend.EngineBackend`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

from conductor.memory.context import MemoryContext
from conductor.memory.interface import MemoryDoor
from conductor.memory.lease import LeaseBusy, LeaseUnavailable
from conductor.memory.turn import LaidTurn, Tail
from engine.backend import EngineBackend
from engine.profiles import Profile
from server.http.schema import ChatCompletionRequest
from server.turn.answering.engine_tools import with_engine_tools
from server.turn.checks import check_request, check_room, check_token_ids
from server.turn.commands import header as command_header
from server.turn.commands import lease_busy, status_lines
from server.turn.fit import answer_reserve, count_hidden, fitting, layouts, turn_facts
from server.turn.memory import resolve_context
from server.turn.params import generation_params, script_ids
from server.turn.prepared import PreparedChat
from server.turn.prompt import tools_for_template, visible_messages


def prepare(engine: EngineBackend, profile: Profile, services: MemoryDoor,
            request: ChatCompletionRequest, headers, peer: str | None,
            key_user: str | None = None, session: str | None = None,
            leading_tails: Sequence[Tail] = (), answer_room: int = 1,
            hidden_gives_way: bool = True, data: Sequence[str] = (),
            counting: bool = False) -> PreparedChat:
    """Validate against the served profile and build the prompt; APIError when bad.
    `session` overrides the header and the derived id (the continuous conversation's);
    `leading_tails` go right after the new messages, before memory's own tails;
    `answer_room`: the fewest tokens the prompt must leave for the answer;
    `hidden_gives_way`: memory's hidden parts are left out before the request is refused
    as too long (`server/turn/fit.py`); the ContextOverflow then counts the prompt
    without them. `data`: message contents that are data (the continuous conversation's
    layer files): their special-token text is encoded as text. `counting`: the prompt is
    laid out to be counted only (the Messages API's count_tokens), so nothing a turn sets
    off happens: no memory command is carried out, no hidden part counted, no miss noted."""
    # 1. the request against the profile
    constraints = check_request(engine, profile, request, headers)
    # 2. who, which session, which memory mode
    memory = _resolve(request, headers, peer, profile, services, key_user, session)
    # 3. hidden parts, ids, and a layout that leaves the answer its room
    thinking = request.enable_thinking(profile.thinking)
    max_tokens = request.requested_max_tokens()
    need = max(answer_room, max_tokens or 0)
    # memory's parts leave the answer room even when the client names none
    memory_need = need if max_tokens is not None else max(
        need, answer_reserve(profile.max_model_len))
    # A max_tokens that not even the client's own prompt leaves room for is cut to the
    # room, as vLLM cuts it (get_max_tokens): then memory keeps what leaves the answer
    # its usual reserve, rather than giving way for tokens the answer cannot have anyway.
    reserve = max(answer_room, answer_reserve(profile.max_model_len))
    offered, engine_tools = with_engine_tools(request, memory,
                                              profile.tool_call_format == "qwen")
    visible = visible_messages(offered)
    # vLLM's kv_transfer_params: ids handed over from a prefill server stand for the render
    forwarded = request.forwarded_ids()

    facts = turn_facts(offered, visible, memory, profile.memory.commands != "off", counting)
    view = services.begin_turn(facts)  # memory's first call down
    # the token work: the first layout that fits, and the request refused (before memory
    # acts on it) when not even the client's own does
    layout = fitting(layouts(engine, view, memory, request, offered, engine_tools, visible,
                             thinking, leading_tails, hidden_gives_way, data),
                     lambda laid: profile.max_model_len - laid.tokens >= (
                         memory_need if laid.holds_memory else need),
                     then=lambda laid: profile.max_model_len - laid.tokens >= (
                         reserve if laid.holds_memory else answer_room))
    check_token_ids(engine, "kv_transfer_params", forwarded or [])
    check_room(len(forwarded or layout.built.ids), profile.max_model_len, answer_room)
    if not counting:
        count_hidden(services.metrics, layout)
    try:  # memory's second call down: the layout stands, the request is valid
        plan = services.admit_turn(view, LaidTurn(tuple(layout.visible), layout.missed))
    except (LeaseBusy, LeaseUnavailable) as exc:  # a memory command on another's writer
        raise lease_busy(exc) from None
    prompt_ids = forwarded or layout.built.ids
    room = profile.max_model_len - len(prompt_ids)  # check_room passed above
    command = plan.command
    # 4. the engine's parameters
    scripts = script_ids(engine, request)
    params = generation_params(layout.request, profile, room, constraints, plan.salt,
                               scripts[0] if scripts else None)
    calls_tools = profile.tool_call_format == "qwen" and not constraints.json_answer
    return PreparedChat(
        completion_id=f"chatcmpl-{uuid.uuid4().hex}", model=request.model or profile.name,
        prompt_ids=prompt_ids, params=params,
        parse_tools=calls_tools and tools_for_template(layout.request) is not None,
        memory=memory, visible=layout.visible,
        # replayed ids bring their hidden spans along: they sit where they were
        spans=[*(layout.replayed or ()), *layout.built.spans], token=layout.hidden.token,
        enable_thinking=thinking,
        engine_tools=layout.engine_tools, scripts=scripts, forced=constraints.forced,
        json_answer=constraints.json_answer, replayed_tokens=layout.built.replayed_tokens,
        hidden=layout.hidden, choices=request.n,
        head_checkpointed=engine.reuse_block is None or layout.built.replayed_tokens > 0,
        return_token_ids=bool(request.return_token_ids),
        include_reasoning=request.include_reasoning, echo=request.echoed(),
        recorded=not request.shapes_its_prompt(),
        tokens_as_ids=bool(request.return_tokens_as_token_ids),
        # a JSON answer stays JSON: the header alone tells what the command did
        command_lines=() if constraints.json_answer else status_lines(profile, command),
        command_header=command_header(command),
    )


def _resolve(request: ChatCompletionRequest, headers, peer: str | None, profile: Profile,
             services: MemoryDoor, key_user: str | None,
             session: str | None) -> MemoryContext:
    memory = resolve_context(request, headers, peer, profile.memory.mode, services.settings,
                             key_user, session, services.derived_session)
    if request.runs_without_memory() and memory.header is None:
        # as with X-Tandem-Memory: off (see ChatCompletionRequest.runs_without_memory)
        memory = dataclasses.replace(memory, header="off")
    return memory
