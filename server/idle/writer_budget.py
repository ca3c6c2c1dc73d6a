"""What the background writer may spend on a paid backend (proxy mode in front of a cloud
API): a daily cap in USD, runs a day and a prompt-size cap, checked before each run from an
estimate, and the spend ledger the checks read (written for a free backend too: what the
writer asked of it).

The spend ledger (`cognition/spend.jsonl`) has one row a writer request, of client
`harness:writer`: its run, the backend and model, its token counts and its cost. Counts
only: no prompt text, no note title. A day is a UTC day; the rows survive a restart, so a
restart does not reset the cap. Cached prompt tokens are charged at the input price (a
provider's discount for them varies; the estimate errs high).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from conductor.memory.types import append_line

WRITER_CLIENT = "harness:writer"  # the spend ledger's client for the writer's requests
DAILY_USD = 0.25
RUNS_PER_DAY = 48
MAX_PROMPT_TOKENS = 32_000


@dataclass(frozen=True)
class WriterPolicy:
    """A backend's price (USD a million tokens) and, on a paid one, the writer's limits
    (a free backend's writer is not limited, only its requests written down)."""

    price_in: float
    price_out: float
    daily_usd: float = DAILY_USD
    runs_per_day: int = RUNS_PER_DAY
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    backend: str = ""  # the backend's URL and model, for the ledger's rows
    paid: bool = True

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_in + completion_tokens * self.price_out) / 1e6


@dataclass(frozen=True)
class RequestUsage:
    """One writer request's tokens, as the backend reported them."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


class WriterBudget:
    """The writer's spend today against its policy, from the spend ledger at `path`."""

    def __init__(self, policy: WriterPolicy, path: Path, now=time.time) -> None:
        self.policy = policy
        self.path = path
        self._now = now
        self._day = ""
        self._usd = 0.0
        self._runs: set[str] = set()
        self._load()

    def _today(self) -> str:
        return datetime.fromtimestamp(self._now(), UTC).date().isoformat()

    def _load(self) -> None:
        """Today's rows (a torn last line, left by a crash, is skipped)."""
        self._day, self._usd, self._runs = self._today(), 0.0, set()
        if not self.path.exists():
            return
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("day") == self._day:
                self._usd += float(row.get("usd") or 0.0)
                self._runs.add(str(row.get("run")))

    def _roll(self) -> None:
        if self._today() != self._day:
            self._day, self._usd, self._runs = self._today(), 0.0, set()

    @property
    def spent_today(self) -> float:
        self._roll()
        return self._usd

    @property
    def runs_today(self) -> int:
        self._roll()
        return len(self._runs)

    def refusal(self, prompt_tokens: list[int], max_output_tokens: int) -> str | None:
        """Why a run whose requests have these prompt sizes may not start, or None. The
        estimate: every prompt at the input price, every request at its output cap."""
        policy = self.policy
        self._roll()
        if not policy.paid:
            return None
        if len(self._runs) >= policy.runs_per_day:
            return f"the writer's {policy.runs_per_day} runs for today are spent"
        largest = max(prompt_tokens, default=0)
        if largest > policy.max_prompt_tokens:
            return (f"the writer's prompt would be {largest} tokens, over its cap of "
                    f"{policy.max_prompt_tokens}")
        estimate = policy.cost(sum(prompt_tokens), max_output_tokens * len(prompt_tokens))
        if self._usd + estimate > policy.daily_usd:
            return (f"the run would cost up to {estimate:.4f} USD; {self._usd:.4f} of the "
                    f"daily {policy.daily_usd:g} USD is spent")
        return None

    def charge(self, run_id: str, usage: list[RequestUsage]) -> float:
        """Write one ledger row a request the run made; the run's cost."""
        self._roll()
        total = 0.0
        for request in usage:
            usd = self.policy.cost(request.prompt_tokens, request.completion_tokens)
            total += usd
            row = {"at": datetime.fromtimestamp(self._now(), UTC).isoformat(),
                   "day": self._day, "client": WRITER_CLIENT, "run": run_id,
                   "backend": self.policy.backend, "prompt_tokens": request.prompt_tokens,
                   "cached_tokens": request.cached_tokens,
                   "completion_tokens": request.completion_tokens, "usd": round(usd, 8)}
            append_line(self.path, json.dumps(row), fsync=True)
        if usage:
            self._usd += total
            self._runs.add(run_id)
        return total
