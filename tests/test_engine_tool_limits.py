"""The engine tools' caps, and the prewarm's bound, on their own: a response past 512
tokens is cut and says so, a call past 10 s is told it timed out, and the prewarm keeps the
last four heads (system prompt + tools) a user and project saw. The tools on the real
engine: tests/test_engine_tools.py."""

from __future__ import annotations

import asyncio
import json

from conductor.hidden.prewarm import HEADS_PER_GROUP, ContextGroup, PrewarmHeads
from conductor.memory.services import MemoryServices
from conductor.memory.settings import MemorySettings
from server.turn.answering.engine_tools import READ, SEARCH, EngineToolbox, ToolLimits
from server.turn.answering.output_parser import ToolCall

USER = "tester"


class SlowSearch:
    """A search service that takes longer than any cap (the toolbox's own timing is under
    test, not the search)."""

    async def search(self, *_args, **_kwargs):
        await asyncio.sleep(5)
        return [], None


class NoSources:
    """A search service with no indexed sources: a note is read from the store by id."""

    def index(self, _user: str):
        return self

    def registry(self):
        return None


def test_the_defaults_are_512_tokens_and_10_seconds():
    limits = ToolLimits()
    assert (limits.response_tokens, limits.timeout_s) == (512, 10.0)


def test_a_response_past_the_token_cap_is_cut_and_says_so(tmp_path, tokenizer):
    """A note's longest body is under 512 tokens (the store caps it): the cap is set lower
    here; a long layer section or document read by its ref meets the default one."""
    memory = MemoryServices(tmp_path, MemorySettings(user_name=USER))
    body = " ".join(f"fact{i} is kept here" for i in range(40))
    result = memory.store(USER).add(title="a long runbook", body=body, kind="runbook",
                                    scope="user", source="cli", has_user_message=True)
    assert result.ok, result.reason
    toolbox = EngineToolbox(memory, NoSources(), tokenizer, ToolLimits(response_tokens=64))
    call = ToolCall(READ, json.dumps({"ref": result.note.id}))
    outcome = asyncio.run(toolbox.run(call, USER))
    assert outcome.ok, outcome.response
    kept, marker = outcome.response.rsplit("\n", 1)
    assert marker == "[cut at 64 tokens: read one section by its ref for the rest]"
    assert len(tokenizer.encode(kept, add_special_tokens=False)) <= 64
    assert "a long runbook" in kept and "fact39" not in kept
    whole = EngineToolbox(memory, NoSources(), tokenizer)  # the default cap: 512
    assert "fact39 is kept here" in asyncio.run(whole.run(call, USER)).response


def test_a_call_past_the_time_cap_is_told_it_timed_out(tmp_path, tokenizer):
    memory = MemoryServices(tmp_path, MemorySettings(user_name=USER))
    toolbox = EngineToolbox(memory, SlowSearch(), tokenizer, ToolLimits(timeout_s=0.2))
    outcome = asyncio.run(toolbox.run(ToolCall(SEARCH, json.dumps({"query": "deploys"})),
                                      USER))
    assert not outcome.ok
    assert outcome.response == "Error: memory_search took longer than 0.2 s; try again later"


def test_the_prewarm_keeps_the_last_four_heads_of_a_group():
    heads = PrewarmHeads()
    group = ContextGroup(USER, None, card=True, reads=True)
    for n in range(6):
        heads.seen(group, (n,), version="v1")
    heads.seen(group, (2,), version="v1")  # seen again: the most recent
    assert HEADS_PER_GROUP == 4
    assert [s.head_ids for s in heads.stale(group, "v2")] == [(2,), (5,), (4,), (3,)]
