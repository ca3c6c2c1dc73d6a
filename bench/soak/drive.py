"""The soak: many clients for a fixed time against a server with memory on, then proof
that nothing was lost and nothing leaked.

The load comes in bursts with lulls between (30 s and 10 s by default), as people's does,
so the writer and the cognition jobs run in the lulls and the next burst preempts them.
Each client holds a conversation (its history sent back as shown, status lines and all),
half of its requests streamed, a share of its answers carrying a `<tandem_memory>` block,
a share of its streams left after the first chunk. One client talks in the continuous
conversation (its turns go to the history layer, where the cognition jobs read them).
Afterwards:

* no 5xx, every connection answered;
* every `› remembered: <title>` a client was shown has its note on disk, every note file
  parses, the journal has no torn line, every history turn parses;
* the engine is idle once the background work is done: every request the engine started
  finished or was aborted (`/metrics`), no leaked request.

The answers are scripted (the tiny profile's driver), so the soak needs a scripted
profile: it measures the server, not the model. `tandem bench --soak` starts its own
`tandem serve` (writer and jobs on, a short writer idle wait); `--quick` is the suite's
size. Loopback only.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.load.clients import percentile
from conductor.layers.history import HistoryStore
from conductor.layers.paths import LayerFiles, layer_users
from conductor.notes.note_format import parse
from conductor.storage.journal import Journal

REMEMBERED = re.compile(r"› remembered: (.+)")


@dataclass(frozen=True)
class SoakPlan:
    clients: int = 32
    duration_s: float = 120.0
    streamed_share: float = 0.5
    block_share: float = 0.25        # answers that carry a note block
    leave_share: float = 0.125       # streams the client leaves after the first chunk
    turns_per_session: int = 6       # then the client starts a new conversation
    converse_clients: int = 1        # clients in the continuous conversation
    burst_s: float = 30.0            # the load comes in bursts...
    lull_s: float = 10.0             # ...with lulls between, when background turns run
    seed: int = 0

    def lull_left(self, elapsed: float) -> float:
        """Seconds of the current lull still to wait (0 during a burst)."""
        into = elapsed % (self.burst_s + self.lull_s)
        return max(0.0, self.burst_s + self.lull_s - into) if into >= self.burst_s else 0.0


@dataclass
class Exchange:
    route: str
    streamed: bool
    left: bool                       # the client closed the stream after its first chunk
    status: int                      # 0: the connection itself failed
    latency_s: float
    ttft_s: float | None
    output_tokens: int = 0
    at_s: float = 0.0                # when it was sent, from the soak's start
    error_code: str | None = None    # the error body's code, for any status but 200


@dataclass
class ClientLog:
    exchanges: list[Exchange] = field(default_factory=list)
    remembered: list[str] = field(default_factory=list)  # titles the client was shown


def _answer_script(rng: random.Random, client: int, turn: int, with_block: bool) -> tuple[
        str, str | None]:
    """(script, the block's title or None)."""
    text = f"Noted, client {client} turn {turn}: " + " ".join(
        rng.choice(("logs", "ports", "deploys", "caches", "tests")) for _ in range(8)) + "."
    if not with_block:
        return text, None
    title = f"Soak fact c{client} t{turn} {rng.randrange(10**6):06d}"
    block = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: ' + title +
             f'\n\nClient {client} said the build uses port {rng.randrange(1024, 65535)}.\n'
             '</tandem_memory>')
    return f"{text}\n{block}", title


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                headers: dict[str, str], streamed: bool, leave: bool,
                started_at: float) -> tuple[Exchange, str]:
    """One request; (its record, the text the client was shown)."""
    route = url.rsplit("/v1/", 1)[-1]
    sent = time.perf_counter()
    ttft, shown, tokens, code = None, "", 0, None
    try:
        async with session.post(url, json=body, headers=headers) as response:
            status = response.status
            if status != 200:
                error = (await response.json(content_type=None) or {}).get("error") or {}
                code = f"{error.get('code')}: {str(error.get('message'))[:160]}"
            elif not streamed:
                data = await response.json(content_type=None)
                shown = _message_text(data)
                tokens = (data.get("usage") or {}).get("completion_tokens", 0)
            else:
                async for raw in response.content:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("data:") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    tokens = (chunk.get("usage") or {}).get("completion_tokens", tokens)
                    piece = _delta_text(chunk)
                    if ttft is None and piece:
                        ttft = time.perf_counter() - sent
                        if leave:
                            response.close()  # the client goes mid-answer
                            break
                    shown += piece
    except (TimeoutError, aiohttp.ClientError):
        status = 0
    latency = time.perf_counter() - sent
    return Exchange(route, streamed, leave, status, latency, ttft, tokens,
                    sent - started_at, code), shown


def _message_text(data: dict[str, Any]) -> str:
    if "choices" in data:
        return (data["choices"][0].get("message") or {}).get("content") or ""
    return data.get("content") or data.get("text") or ""


def _delta_text(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices")
    if choices:
        return (choices[0].get("delta") or {}).get("content") or ""
    return chunk.get("content") or chunk.get("delta") or ""


async def _client(index: int, base: str, model: str, plan: SoakPlan, deadline: float,
                  started_at: float, session: aiohttp.ClientSession) -> ClientLog:
    rng = random.Random(plan.seed * 10_000 + index)
    log = ClientLog()
    converse = index < plan.converse_clients
    history: list[dict[str, str]] = []
    conversation, turn = 0, 0
    while True:
        await asyncio.sleep(plan.lull_left(time.perf_counter() - started_at))
        if time.monotonic() >= deadline:
            break
        turn += 1
        if not converse and len(history) >= 2 * plan.turns_per_session:
            history, conversation = [], conversation + 1
        streamed = rng.random() < plan.streamed_share
        leave = streamed and rng.random() < plan.leave_share
        script, title = _answer_script(rng, index, turn, rng.random() < plan.block_share)
        question = f"Client {index}, conversation {conversation}, question {turn}: what now?"
        if converse:
            url = f"{base}/v1/conductor/converse"
            body: dict[str, Any] = {"message": question, "script": script,
                                    "stream": streamed}
            headers: dict[str, str] = {}
        else:
            url = f"{base}/v1/chat/completions"
            messages = [*history, {"role": "user", "content": question}]
            body = {"model": model, "messages": messages, "script": script,
                    "stream": streamed, "max_tokens": 200}
            # half the clients name their session, half leave it to the server
            headers = ({"X-Tandem-Session": f"soak-{plan.seed}-{index}-{conversation}"}
                       if index % 2 else {})
        exchange, shown = await _post(session, url, body, headers, streamed, leave,
                                      started_at)
        log.exchanges.append(exchange)
        if exchange.status == 200 and not leave:
            log.remembered += REMEMBERED.findall(shown)
            if title is not None and title not in shown:
                log.remembered.append(f"!missing-status:{title}")
            if not converse:
                history += [{"role": "user", "content": question},
                            {"role": "assistant", "content": shown}]
        else:
            history, conversation = [], conversation + 1  # start afresh after a failure
    return log


async def run_clients(base_url: str, model: str | None, plan: SoakPlan) -> list[ClientLog]:
    """Every client until the plan's time is up; `model` None: the server's first model."""
    base = base_url.rstrip("/")
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if model is None:
            async with session.get(f"{base}/v1/models") as response:
                model = (await response.json())["data"][0]["id"]
        started_at = time.perf_counter()
        deadline = time.monotonic() + plan.duration_s
        return list(await asyncio.gather(*(
            _client(i, base, model, plan, deadline, started_at, session)
            for i in range(plan.clients))))


def _counters(metrics_text: str) -> dict[tuple[str, str], float]:
    """(started|finished|aborted, kind) -> count, from Tandem's request counters."""
    found: dict[tuple[str, str], float] = {}
    for line in metrics_text.splitlines():
        match = re.match(r'tandem_requests_(started|finished|aborted)_total\{kind="([^"]+)"\} '
                         r"([\d.e+]+)", line)
        if match:
            found[(match[1], match[2])] = float(match[3])
    return found


def engine_in_flight(metrics_text: str, kind: str | None = None) -> int:
    """Requests the engine started and neither finished nor aborted (of one kind, or all)."""
    counts = _counters(metrics_text)
    kinds = {k for _, k in counts} if kind is None else {kind}
    return int(sum(counts.get(("started", k), 0) - counts.get(("finished", k), 0)
                   - counts.get(("aborted", k), 0) for k in kinds))


def started_by_kind(metrics_text: str) -> dict[str, int]:
    """Engine requests started, by kind (client, background)."""
    return {k: int(v) for (what, k), v in _counters(metrics_text).items() if what == "started"}


@dataclass
class Afterwards:
    """What the engine did once the clients had stopped."""

    client_in_flight: int           # must be 0 at once: every client request ended
    idle_after_s: float | None      # when nothing was in flight, None if not in the wait
    background_in_flight: int       # at the end of the wait
    background_started_during_wait: int  # > 0: a backlog being worked off, not a leak
    started_by_kind: dict[str, int]

    @property
    def leaked(self) -> bool:
        return self.client_in_flight > 0 or (
            self.background_in_flight > 0 and self.background_started_during_wait == 0)


async def wait_idle(base_url: str, timeout_s: float) -> Afterwards:
    """Read /metrics until the engine is idle or `timeout_s` passes. Background turns
    left from the soak (writer runs for every idle session, jobs) may outlast the wait;
    they are a backlog while new ones keep starting, a leak when one never ends."""
    url = f"{base_url.rstrip('/')}/metrics"
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        async def metrics() -> str:
            async with session.get(url) as response:
                return await response.text()

        first = await metrics()
        client_in_flight = engine_in_flight(first, "client")
        text, idle_after = first, None
        while time.monotonic() - started < timeout_s:
            if engine_in_flight(text) == 0:
                idle_after = time.monotonic() - started
                break
            await asyncio.sleep(0.5)
            text = await metrics()
    begun = started_by_kind(first).get("background", 0)
    return Afterwards(client_in_flight, idle_after, engine_in_flight(text, "background"),
                      started_by_kind(text).get("background", 0) - begun,
                      started_by_kind(text))


def afterwards_json(after: Afterwards) -> dict[str, Any]:
    return {**asdict(after), "leaked": after.leaked}


def check_memory(memory_root: Path, remembered: list[str]) -> dict[str, Any]:
    """What is on disk against what clients were shown."""
    titles: set[str] = set()
    unreadable = 0
    for path in (memory_root / "notes").rglob("*.md"):
        if path.name == "INDEX.md" or "revisions" in path.parts:
            continue
        try:
            titles.add(parse(path.read_text(encoding="utf-8"), path).title)
        except (ValueError, OSError):
            unreadable += 1
    journal = Journal(memory_root / "journal.jsonl").read()
    turns, bad_turns = 0, 0
    for user in layer_users(memory_root):
        history = HistoryStore(LayerFiles(memory_root, user))
        for seq in history.seqs():
            turns += 1
            bad_turns += history.read(seq) is None
    shown = [t for t in remembered if not t.startswith("!missing-status:")]
    return {
        "notes_acknowledged": len(shown),
        "notes_lost": sorted(set(shown) - titles),
        "blocks_without_status_line": sum(t.startswith("!missing-status:") for t in remembered),
        "note_files_unreadable": unreadable,
        "journal_entries": len(journal.entries),
        "journal_torn_lines": journal.torn,
        "history_turns": turns,
        "history_turns_unreadable": bad_turns,
    }


def figures(logs: list[ClientLog], plan: SoakPlan) -> dict[str, Any]:
    exchanges = [e for log in logs for e in log.exchanges]
    whole = [e for e in exchanges if not e.left]
    ttfts = [e.ttft_s for e in exchanges if e.ttft_s is not None]
    tokens = sum(e.output_tokens for e in whole)
    return {
        "plan": asdict(plan),
        "requests": len(exchanges),
        "by_status": {str(s): sum(e.status == s for e in exchanges)
                      for s in sorted({e.status for e in exchanges})},
        "errors": _error_counts(exchanges),
        "server_errors_5xx": sum(e.status >= 500 for e in exchanges),
        "other_than_200": sum(e.status != 200 for e in exchanges),
        "connection_failures": sum(e.status == 0 for e in exchanges),
        "streams_left_mid_answer": sum(e.left for e in exchanges),
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
        "latency_p50_s": percentile([e.latency_s for e in whole], 50),
        "latency_p99_s": percentile([e.latency_s for e in whole], 99),
        "output_tokens_per_s": tokens / plan.duration_s,
        "timeline": [[round(e.at_s, 3), round(e.ttft_s or e.latency_s, 4), e.status]
                     for e in exchanges],
    }


def _error_counts(exchanges: list[Exchange]) -> dict[str, int]:
    """Error bodies by code, with the first message of each (no client text in them)."""
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for e in exchanges:
        if e.error_code:
            code = e.error_code.split(":", 1)[0]
            counts[code] = counts.get(code, 0) + 1
            first.setdefault(code, e.error_code)
    return {first[c]: n for c, n in counts.items()}


def passed(results: dict[str, Any]) -> bool:
    memory = results["memory"]
    return (results["other_than_200"] == 0 and results["requests"] > 0
            and not memory["notes_lost"] and memory["blocks_without_status_line"] == 0
            and memory["note_files_unreadable"] == 0 and memory["journal_torn_lines"] == 0
            and memory["history_turns_unreadable"] == 0 and not results["afterwards"]["leaked"])


async def soak(base_url: str, model: str | None, memory_root: Path, plan: SoakPlan,
               idle_timeout_s: float = 300.0) -> dict[str, Any]:
    """The clients, the wait for idle, and the checks; the server stays up."""
    logs = await run_clients(base_url, model, plan)
    results = figures(logs, plan)
    results["afterwards"] = afterwards_json(await wait_idle(base_url, idle_timeout_s))
    results["memory"] = check_memory(memory_root,
                                     [t for log in logs for t in log.remembered])
    results["passed"] = passed(results)
    return results
