"""The load bench's clients: N at once, each one chat request on a prompt of its own, over
real HTTP (aiohttp: lighter than httpx, so the load generator takes less of the cores the
servers share), half of them streamed. Works against any OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

# Plain words of about one token each: prompt lengths in words are about their tokens.
WORDS = ("the build runs on node and the tests use a local database while the api "
         "listens on a port that the team picked after a long talk about deploys and "
         "logs and caches which keep the service fast for every user in the office").split()


@dataclass(frozen=True)
class LoadPlan:
    """Each request samples at temperature 1 with a seed of its own, the same seeds in every
    server, so each writes the same tokens everywhere: greedy, the random-weight tiny model
    writes only newlines, which a server may hold until it knows what they start (Tandem
    waits to see whether a `<think>` follows), and the first token's time would then be
    the last's."""

    clients: int
    max_tokens: int = 16
    min_words: int = 100
    max_words: int = 250
    streamed_share: float = 0.5


@dataclass(frozen=True)
class RequestShape:
    """What every request of a lane carries beside its user message: none for the plain
    lanes; for `vllm_memory_tokens`, the tokens memory on hides in each prompt (the
    engine's tool catalog and the memory card) sent as plain request parts."""

    system: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | None = None

    def body(self, prompt: str) -> dict[str, Any]:
        messages = [{"role": "user", "content": prompt}]
        if self.system is not None:
            messages.insert(0, {"role": "system", "content": self.system})
        out: dict[str, Any] = {"messages": messages}
        if self.tools:
            out["tools"] = list(self.tools)
        if self.tool_choice is not None:
            out["tool_choice"] = self.tool_choice
        return out


PLAIN = RequestShape()


@dataclass
class RequestResult:
    streamed: bool
    status: int
    latency_s: float
    ttft_s: float | None  # streamed requests: the first chunk with text
    output_tokens: int
    prompt_tokens: int = 0  # as the server counted them (its usage)
    cached_tokens: int = 0  # of them read from the prefix cache (usage's prompt_tokens_details)


def prompts(plan: LoadPlan, seed: int) -> list[str]:
    """A distinct prompt a client: its own opening words, so no two share a cached prefix."""
    rng = random.Random(seed)
    out = []
    for i in range(plan.clients):
        words = [rng.choice(WORDS) for _ in range(rng.randint(plan.min_words, plan.max_words))]
        out.append(f"Request {seed}-{i}: " + " ".join(words))
    return out


async def one_request(session: aiohttp.ClientSession, url: str, model: str, prompt: str,
                      streamed: bool, max_tokens: int, headers: dict[str, str], seed: int,
                      shape: RequestShape = PLAIN) -> RequestResult:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 1.0,
                            "seed": seed, **shape.body(prompt)}
    if streamed:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    ttft, usage = None, {}
    async with session.post(url, json=body, headers=headers) as response:
        if response.status != 200:  # an error, counted as one (its body may not be JSON)
            await response.read()
        elif not streamed:
            data = await response.json(content_type=None)
            usage = data.get("usage") or {}
        else:
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
                if ttft is None and (delta.get("content") or delta.get("reasoning")):
                    ttft = time.perf_counter() - started
        status = response.status
    latency = time.perf_counter() - started
    return RequestResult(streamed, status, latency,
                         (ttft if ttft is not None else latency) if streamed else None,
                         usage.get("completion_tokens", 0), usage.get("prompt_tokens", 0),
                         (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


async def run_round(base_url: str, model: str, plan: LoadPlan, seed: int,
                    headers: dict[str, str] | None = None, shape: RequestShape = PLAIN
                    ) -> dict[str, Any]:
    """Every client's request sent at once; the round's wall time and percentiles."""
    texts = prompts(plan, seed)
    streamed = [i < round(plan.clients * plan.streamed_share) for i in range(plan.clients)]
    random.Random(seed).shuffle(streamed)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        url = f"{base_url.rstrip('/')}/v1/chat/completions"
        started = time.perf_counter()
        results = await asyncio.gather(*(
            one_request(session, url, model, text, s, plan.max_tokens, headers or {},
                        seed * 1000 + i, shape)
            for i, (text, s) in enumerate(zip(texts, streamed, strict=True))))
        wall = time.perf_counter() - started
    return round_figures(list(results), wall)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)  # nearest rank
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def round_figures(results: list[RequestResult], wall: float) -> dict[str, Any]:
    latencies = [r.latency_s for r in results]
    ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
    tokens = sum(r.output_tokens for r in results)
    return {
        "wall_s": wall,
        "requests": len(results),
        "errors": sum(1 for r in results if r.status != 200),
        "statuses": sorted({r.status for r in results}),
        "output_tokens": tokens,
        "prompt_tokens_mean": statistics.fmean(r.prompt_tokens for r in results)
        if results else None,
        # what the engine prefilled a request: the prompt less what the cache held
        "uncached_tokens_mean": statistics.fmean(r.prompt_tokens - r.cached_tokens
                                                 for r in results) if results else None,
        "output_tokens_per_s": tokens / wall if wall else None,
        "latency_p50_s": percentile(latencies, 50), "latency_p95_s": percentile(latencies, 95),
        "latency_p99_s": percentile(latencies, 99),
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p95_s": percentile(ttfts, 95),
        "ttft_p99_s": percentile(ttfts, 99),
        "latency_mean_s": statistics.fmean(latencies) if latencies else None,
        "requests_detail": [asdict(r) for r in results],
    }
