"""Per-request timings (TTFT, decode time per token) and engine-wide counters."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

RECENT_REQUESTS = 256


@dataclass
class RequestTimings:
    kind: str
    prompt_tokens: int
    request_id: str = ""
    started: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None  # the engine's (or the backend's stream's) end
    output_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None

    def tokens(self, count: int) -> None:
        if count <= 0:
            return
        now = time.perf_counter()
        if self.first_token_at is None:
            self.first_token_at = now
        self.last_token_at = now
        self.output_tokens += count

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started

    @property
    def decode_s_per_token(self) -> float | None:
        """Mean time per output token after the first (None with fewer than two tokens)."""
        if self.first_token_at is None or self.last_token_at is None or self.output_tokens < 2:
            return None
        return (self.last_token_at - self.first_token_at) / (self.output_tokens - 1)


@dataclass
class EngineStats:
    """Counters the /metrics route exposes; updated by Engine.generate."""

    requests_started: Counter = field(default_factory=Counter)
    requests_finished: Counter = field(default_factory=Counter)
    requests_aborted: Counter = field(default_factory=Counter)
    prompt_tokens: Counter = field(default_factory=Counter)
    cached_tokens: Counter = field(default_factory=Counter)
    output_tokens: Counter = field(default_factory=Counter)
    ttft_sum_s: Counter = field(default_factory=Counter)
    ttft_count: Counter = field(default_factory=Counter)
    # An engine over HTTP: background requests that gave way to clients, by how
    # (closed_for_client, refused_beside_client) and client requests sent while a
    # background stream was still open (overlap: should stay 0).
    background_yields: Counter = field(default_factory=Counter)
    # The last finished requests' timings by request id: the benches read one answer's
    # generations here (an engine-tool continuation is `<completion id>-<n>`).
    recent: OrderedDict[str, RequestTimings] = field(default_factory=OrderedDict)
    # Told each finished request (the server's histograms).
    observers: list = field(default_factory=list)

    def started(self, kind: str) -> None:
        self.requests_started[kind] += 1

    def aborted(self, kind: str) -> None:
        self.requests_aborted[kind] += 1

    def finished(self, timings: RequestTimings) -> None:
        kind = timings.kind
        self.requests_finished[kind] += 1
        self.prompt_tokens[kind] += timings.prompt_tokens
        self.cached_tokens[kind] += timings.cached_tokens
        self.output_tokens[kind] += timings.output_tokens
        if timings.ttft_s is not None:
            self.ttft_sum_s[kind] += timings.ttft_s
            self.ttft_count[kind] += 1
        for observe in self.observers:
            observe(timings)
        self.recent[timings.request_id] = timings
        while len(self.recent) > RECENT_REQUESTS:
            self.recent.popitem(last=False)
