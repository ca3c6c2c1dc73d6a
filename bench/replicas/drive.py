"""The users of the soak over replicas: each talks through the router for 2 or 3 turns of
one conversation. Every `pair_every`-th user then sends their last turn once more through
the router and once straight to their replica (in turns: every other pair router first),
so the two paths are timed on the same fully cached prompt and differ only by the router;
after the load, `quiet_pairs` users do the same one at a time, where a millisecond shows.
Every request streams; its time to first token is the first chunk that carries text, its
cached tokens the usage chunk's."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from bench.replicas.cluster import ROUTE_HEADER, Cluster

LATER_TURNS = ("Tell me about the tides, briefly.", "And what does the moon do to them?")


@dataclass(frozen=True)
class SoakPlan:
    users: int = 1000
    replicas: int = 3
    concurrency: int = 24  # users talking at once
    max_tokens: int = 8
    budget_s: float = 480.0  # no new user starts after this many seconds of load
    pair_every: int = 4  # every 4th user times the router against direct under load
    quiet_pairs: int = 60  # users timed both ways one at a time after the load


@dataclass
class Turn:
    status: int
    ttft_s: float | None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    text: str = ""
    remembered: bool = False
    error: str | None = None


@dataclass
class UserRun:
    user: str
    turns: list[Turn] = field(default_factory=list)
    replica: str | None = None  # the lease's holder after the first turn's write
    routed_s: float | None = None  # the repeated last turn through the router
    direct_s: float | None = None  # ... and straight to the replica
    quiet_routed_s: float | None = None  # the same pair after the load, one at a time
    quiet_direct_s: float | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    messages: list[dict[str, str]] = field(default_factory=list, repr=False)

    def later_cached(self) -> list[float]:
        """Each later turn's cached tokens over the turn before's prompt (capped at 1):
        how much of what that replica had read was read again."""
        out = []
        for before, turn in zip(self.turns, self.turns[1:], strict=False):
            if before.status == 200 and turn.status == 200 and before.prompt_tokens:
                out.append(min(1.0, turn.cached_tokens / before.prompt_tokens))
        return out


def say(message: str) -> None:
    print(f"[replicas-soak] {message}", file=sys.stderr, flush=True)


def turns_of(index: int) -> int:
    return 2 + index % 2  # half the users talk for two turns, half for three


async def chat(client: httpx.AsyncClient, url: str, headers: dict[str, str],
               messages: list[dict[str, str]], max_tokens: int) -> Turn:
    """One streamed chat request: its status, time to first text, usage and text."""
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body,
                                 headers=headers) as response:
            if response.status_code != 200:
                raw = await response.aread()
                code = _error_code(raw)
                return Turn(response.status_code, None, error=code)
            turn = Turn(200, None,
                        remembered="remembered" in response.headers.get(
                            "X-Tandem-Memory-Command", ""))
            first_chunk: float | None = None
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                first_chunk = first_chunk or time.perf_counter() - sent
                usage = chunk.get("usage") or {}
                if usage:
                    turn.prompt_tokens = usage.get("prompt_tokens", 0)
                    turn.cached_tokens = (usage.get("prompt_tokens_details") or {}).get(
                        "cached_tokens") or 0
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or ""
                    if piece and turn.ttft_s is None:
                        turn.ttft_s = time.perf_counter() - sent
                    turn.text += piece
            # an answer of no text (the tiny model's random weights may end at once):
            # its first chunk is when the engine answered
            turn.ttft_s = turn.ttft_s if turn.ttft_s is not None else first_chunk
            return turn
    except httpx.HTTPError as exc:
        return Turn(0, None, error=type(exc).__name__)


def _error_code(raw: bytes) -> str:
    try:
        error = json.loads(raw).get("error") or {}
    except ValueError:
        return raw[:120].decode(errors="replace")
    return str(error.get("code") or error.get("type") or "error")


async def timed_pair(client: httpx.AsyncClient, cluster: Cluster, run: UserRun,
                     router_first: bool, max_tokens: int) -> tuple[float | None, float | None]:
    """The user's last turn again through the router and straight to their replica (the
    prompt is cached on it for both): each one's time to first token."""
    assert run.replica is not None
    direct_url = cluster.node(run.replica).url
    order = [cluster.router_url, direct_url] if router_first else [direct_url,
                                                                    cluster.router_url]
    times: dict[str, float | None] = {}
    for url in order:
        turn = await chat(client, url, run.headers, run.messages, max_tokens)
        times[url] = turn.ttft_s if turn.status == 200 else None
    return times[cluster.router_url], times[direct_url]


async def one_user(client: httpx.AsyncClient, cluster: Cluster, index: int, user: str,
                   plan: SoakPlan) -> UserRun:
    """The user's turns through the router, then (every `pair_every`-th user) the
    repeated last turn both ways."""
    run = UserRun(user, headers={"Authorization": f"Bearer {cluster.keys[user]}",
                                 ROUTE_HEADER: user})
    # the first turn writes a note: the write takes the user's lease on the replica that
    # serves them, which is how the bench learns where the router placed them
    run.messages = [{"role": "user", "content": f"remember that {user} keeps the spare "
                     f"key in jar number {index}"}]
    for number in range(turns_of(index)):
        if number:
            run.messages += [{"role": "assistant", "content": run.turns[-1].text},
                             {"role": "user", "content": LATER_TURNS[number - 1]}]
        turn = await chat(client, cluster.router_url, run.headers, run.messages,
                          plan.max_tokens)
        run.turns.append(turn)
        if turn.status != 200:
            return run
        if number == 0:
            run.replica = await asyncio.to_thread(cluster.holder, user)
    if run.replica is not None and index % plan.pair_every == 0:
        run.routed_s, run.direct_s = await timed_pair(
            client, cluster, run, (index // plan.pair_every) % 2 == 0, plan.max_tokens)
    return run


async def run_users(cluster: Cluster, users: list[str], plan: SoakPlan,
                    progress: Callable[[int, list[UserRun]], None]) -> list[UserRun]:
    """Every user, `plan.concurrency` at once, until all are done or the budget is
    spent (users not started by then are left out and counted)."""
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for item in enumerate(users):
        queue.put_nowait(item)
    done: list[UserRun] = []
    started = time.monotonic()
    limits = httpx.Limits(max_connections=plan.concurrency * 2,
                          max_keepalive_connections=plan.concurrency * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def worker() -> None:
            while not queue.empty() and time.monotonic() - started < plan.budget_s:
                index, user = queue.get_nowait()
                done.append(await one_user(client, cluster, index, user, plan))
                progress(len(done), done)

        await asyncio.gather(*[worker() for _ in range(plan.concurrency)])
        quiet = [r for r in done if r.replica is not None][:plan.quiet_pairs]
        say(f"the router against direct, one user at a time: {len(quiet)} users")
        for number, run in enumerate(quiet):
            run.quiet_routed_s, run.quiet_direct_s = await timed_pair(
                client, cluster, run, number % 2 == 0, plan.max_tokens)
    return done
