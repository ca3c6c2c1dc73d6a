"""A lane: one app over the shared engine, in one memory mode, talking through real HTTP."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.lanes.conversation import Turn, naive_system_prompt, system_prompt
from bench.lanes.probe import EngineProbe
from conductor.hidden.tail_notes import build_matches
from conductor.memory.settings import MemorySettings
from conductor.notes import NoteStore
from engine.profiles import Profile
from server.app import create_app
from server.turn.memory import TOKEN_HEADER

USER = "bench"
# naive: memory off, every note in the system prompt; prefetch: memory on with the notes a
# conversation may need next prefilled in idle time after each turn, as branches (issue
# 58: each note's matched tail after the record, nothing recorded; `on` runs without it);
# hinted: memory on, no guess of its own, and the client sends its draft of each later
# message as a hint before it (POST /v1/memory/prefetch)
MODES = ("off", "shadow", "on", "naive", "prefetch", "hinted")
PREFETCHING = ("prefetch", "hinted")
TAIL_KINDS = ("shared", "session", "notes", "prefetch")
PREFETCH_OFF = (("notes", 0),)
# Branches covering the store (its 50 notes), the guess's placing off: the lane measures
# what a prefetch that costs no prompt length brings (issue 58, item 1). The guess alone
# (notes 3) matched 0 of 12 notes on the topic-hopping conversation (bench/README.md).
PREFETCH_ON = (("notes", 0), ("branches", 64))
# The drafts a typing client sends: at half of the message's words, and with the last
# tenth still untyped (a client sends one whenever the user pauses; the message itself
# comes seconds later, time enough on this CPU for the ~100 tokens a hint prefills).
DRAFT_FRACTIONS = (0.5, 0.9)


def draft(message: str, fraction: float) -> str:
    """The first `fraction` of the message's words, as typed so far."""
    words = message.split()
    return " ".join(words[:max(1, round(len(words) * fraction))])


@dataclass
class TurnResult:
    """What one chat turn cost, as the client and the engine saw it."""

    mode: str
    turn: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    memory_tokens: int  # memory context new in this turn's prompt (tail notes, naive block)
    ttft_s: float  # request sent -> first token out of the engine (prompt building included)
    engine_ttft_s: float | None  # engine.generate called -> first token
    decode_s_per_token: float | None
    total_s: float
    finish_reason: str | None

    @property
    def cached_fraction(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "cached_fraction": self.cached_fraction,
                "prefilled_tokens": self.prefilled_tokens}


@dataclass
class PrefetchTally:
    """A prefetching lane's guesses: notes prefetched (with their share of the hidden
    message's tokens) and which of them the message after them matched."""

    notes: dict[str, float] = field(default_factory=dict)  # note id -> tokens
    hits: set[str] = field(default_factory=set)
    runs: list[dict[str, Any]] = field(default_factory=list)
    hit_turns: list[int] = field(default_factory=list)  # every note they matched was there
    fresh: set[str] = field(default_factory=set)  # prefetched since the last message

    def fetched(self, note_ids: tuple[str, ...], tokens: int, outcome: str,
                prefilled: int | None = None, branch: bool = False) -> None:
        """A run: its notes, their hidden message's tokens, its outcome; a branch's
        tokens the engine prefilled (`prefilled`: its tail and the record's part block)."""
        run = {"notes": len(note_ids), "tokens": tokens, "outcome": outcome}
        if prefilled is not None:
            run["prefilled"] = prefilled
        if branch:
            run["branch"] = True
        self.runs.append(run)
        if outcome == "done":
            for note_id in note_ids:
                self.notes[note_id] = tokens / len(note_ids)
            self.fresh |= set(note_ids)

    def message(self, would_match: set[str], turn: int) -> None:
        """The next message matched `would_match`: a hit is a note prefetched for it
        (since the message before), which the server then counts as in place."""
        self.hits |= would_match & self.fresh
        if would_match and would_match <= self.fresh:
            self.hit_turns.append(turn)
        self.fresh = set()

    def as_dict(self) -> dict[str, Any]:
        wasted = sum(t for n, t in self.notes.items() if n not in self.hits)
        return {"runs": self.runs, "branches": sum(1 for r in self.runs if r.get("branch")),
                "prefetched_notes": len(self.notes),
                "hit_notes": len(self.hits),
                "hit_rate": len(self.hits) / len(self.notes) if self.notes else None,
                "prefetched_tokens": round(sum(self.notes.values())),
                "wasted_tokens": round(wasted), "hit_turns": self.hit_turns}


@dataclass
class Conversation:
    """One session of a lane: its id, the history the client keeps, tail tokens so far."""

    session: str
    history: list[dict] = field(default_factory=list)
    tail_tokens: int = 0
    token: str | None = None  # the memory routes' token, from the first answer on


class Lane:
    """An app in one memory mode over the probed engine, with its own memory home."""

    def __init__(self, mode: str, probe: EngineProbe, home: Path, nonce: str,
                 generation: dict[str, Any]) -> None:
        profile: Profile = probe.profile
        app_mode = {"naive": "off", "prefetch": "on", "hinted": "on"}.get(mode, mode)
        # The writer stays off here: background turns are measured on their own.
        memory = dataclasses.replace(profile.memory, mode=app_mode, writer_mode="off",
                                     prefetch=PREFETCH_ON if mode == "prefetch"
                                     else PREFETCH_OFF)
        self.mode = mode
        self.number = MODES.index(mode) + 1
        self.nonce = nonce
        self.probe = probe
        self.model = profile.name
        self.generation = generation
        self.app = create_app(dataclasses.replace(profile, memory=memory), home, engine=probe,
                              memory_settings=MemorySettings(user_name=USER))
        self.services = self.app.state.tandem.memory
        self._naive_tokens: dict[str, int] = {}
        self._continuous = Conversation(session="continuous")
        self.prefetch = PrefetchTally()  # the prefetch lanes' guesses and their hits
        self._token: str | None = None  # the last answer's memory token

    def store(self) -> NoteStore:
        return self.services.store(USER)

    def conversation(self, name: str) -> Conversation:
        return Conversation(session=f"bench-{self.nonce}-{self.mode}-{name}")

    def system(self, message: str) -> str:
        if self.mode == "naive":
            return naive_system_prompt(self.nonce, self.number, message)
        return system_prompt(self.nonce, self.number)

    async def ask(self, conversation: Conversation, turn: Turn, number: int,
                  script: bool) -> TurnResult:
        """One turn: send the history plus `turn.user`, keep the answer in the history."""
        system = self.system(turn.user)
        if self.mode == "hinted" and conversation.token is not None:
            await self._send_drafts(conversation, turn.user)
        if self.mode in PREFETCHING:
            self.prefetch.message(self._would_match(conversation, turn.user), number)
        user = {"role": "user", "content": turn.user}
        messages = [{"role": "system", "content": system}, *conversation.history, user]
        body = {"model": self.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, **self.generation}
        if script:
            body["script"] = turn.answer
        content, usage, completion_id, sent, done = await self._post(
            "/v1/chat/completions", body, {"X-Tandem-Session": conversation.session})
        conversation.token = self._token or conversation.token
        conversation.history += [user, {"role": "assistant", "content": content}]
        result = self._result(conversation, system, number, usage, completion_id, sent, done)
        if self.mode == "prefetch":  # the idle time before the next turn
            await self._idle()
        return result

    async def _idle(self) -> None:
        """An idle moment: the server's prefetch runs, its notes are counted."""
        for run in await self.app.state.tandem.prefetch.tick():
            self.prefetch.fetched(run.note_ids, run.tokens, run.outcome, run.prefilled,
                                  run.branch)

    async def _send_drafts(self, conversation: Conversation, message: str) -> None:
        """The hinted lane's client: each draft of the message as a hint, with the idle
        moment the user's typing leaves after it."""
        for fraction in DRAFT_FRACTIONS:
            response = await self._request(
                "/v1/memory/prefetch", {"hint": draft(message, fraction)},
                {"X-Tandem-Session": conversation.session, TOKEN_HEADER: conversation.token})
            if response.status_code != 202:
                raise RuntimeError(f"lane {self.mode}: hint refused: HTTP "
                                   f"{response.status_code}: {response.text}")
            await self._idle()

    def _would_match(self, conversation: Conversation, message: str) -> set[str]:
        """The notes `message` matches before the prefetched ones are skipped: which of
        the guesses it needed."""
        store = self.store()
        record = self.services.latest_record(USER, conversation.session)
        already = {i for s in (record.spans if record else ()) if s.kind == "notes"
                   for i in s.note_ids}
        found = build_matches(store, message, store.list(include_stale=False), already,
                              self.probe.count_tokens, self.services.notes_shown)
        return set(found.note_ids) if found is not None else set()

    async def converse(self, turn: Turn, number: int, script: bool) -> TurnResult:
        """One message of the lane user's continuous conversation: the server keeps the
        history, the client sends the new message only."""
        body = {"message": turn.user, "stream": True, "stream_options": {"include_usage": True},
                **self.generation}
        if script:
            body["script"] = turn.answer
        _, usage, completion_id, sent, done = await self._post("/v1/conductor/converse", body,
                                                               {})
        return self._result(self._continuous, None, number, usage, completion_id, sent, done)

    def _result(self, conversation: Conversation, system: str | None, number: int, usage: dict,
                completion_id: str, sent: float, done: float) -> TurnResult:
        final = self.probe.final.get(completion_id)
        timings = final.timings if final is not None else None
        first = self.probe.first_token_at.get(completion_id, done)
        details = usage.get("prompt_tokens_details") or {}
        return TurnResult(
            mode=self.mode, turn=number, prompt_tokens=usage["prompt_tokens"],
            cached_tokens=details.get("cached_tokens") or 0,
            completion_tokens=usage["completion_tokens"],
            memory_tokens=self._memory_tokens(conversation, system or ""),
            ttft_s=first - sent, engine_ttft_s=timings.ttft_s if timings else None,
            decode_s_per_token=timings.decode_s_per_token if timings else None,
            total_s=done - sent, finish_reason=final.finish_reason if final else None)

    def _memory_tokens(self, conversation: Conversation, system: str) -> int:
        if self.mode == "naive":
            tokenizer = self.probe.tokenizer
            return len(tokenizer.encode(system, add_special_tokens=False)) - len(
                tokenizer.encode(system_prompt(self.nonce, self.number), add_special_tokens=False))
        record = self.services.latest_record(USER, conversation.session)
        total = sum(s.end - s.start for s in record.spans if s.kind in TAIL_KINDS) if record else 0
        new, conversation.tail_tokens = total - conversation.tail_tokens, total
        return new

    async def _request(self, path: str, body: dict, headers: dict[str, str]
                       ) -> httpx.Response:
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                     timeout=None) as client:
            return await client.post(path, json=body, headers=headers)

    async def _post(self, path: str, body: dict, headers: dict[str, str]
                    ) -> tuple[str, dict, str, float, float]:
        sent = time.perf_counter()
        response = await self._request(path, body, headers)
        done = time.perf_counter()
        self._token = response.headers.get(TOKEN_HEADER)
        if response.status_code != 200:
            raise RuntimeError(f"lane {self.mode}: HTTP {response.status_code}: {response.text}")
        content, usage, completion_id = parse_stream(response.text)
        return content, usage, completion_id, sent, done


def parse_stream(text: str) -> tuple[str, dict, str]:
    """(content, usage, completion id) from a streamed chat completion's events."""
    content, usage, completion_id = "", {}, ""
    for line in text.splitlines():
        if not line.startswith("data: {"):
            continue
        event = json.loads(line[6:])
        completion_id = completion_id or event.get("id", "")
        for choice in event.get("choices") or ():
            content += choice.get("delta", {}).get("content") or ""
        usage = event.get("usage") or usage
    if not usage:
        raise RuntimeError("the stream ended without usage")
    return content, usage, completion_id
