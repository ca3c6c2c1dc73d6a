"""What every idle-time service is: work the server does for memory only while no client
request runs (prewarm, prefetch, the writer, the cognition jobs, the search sync).

The app's idle loop visits each in its order (`server/app.py`, `background_loop`) and calls
`tick`; a service checks `client_busy` before each unit of work and stops there, so a
client's request never waits behind it (what the engine already runs for it is preempted
at the next engine step by the scheduler). A client counts from the door (`ServerLoad`:
its request is being laid out, the engine does not have it yet) as well as in the
engine, so no new unit starts in the time its turn takes to reach the engine.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from conductor.memory.services import MemoryServices
from engine.backend import EngineBackend
from engine.generation import GenerationParams
from server.http.load_tracking import ServerLoad

RUNS_KEPT = 64  # the runs a service remembers for /metrics and the tests, newest last
PREFILL = GenerationParams(max_tokens=1, temperature=0.0)  # a prefill: one token, greedy


def client_waits(engine: EngineBackend, door: ServerLoad) -> bool:
    """A client's request is in the server, at its door or in the engine."""
    return door.in_flight > 0 or bool(engine.running("client"))


class IdleService(ABC):
    """One idle-time service: `tick` does what is due while nobody is waiting."""

    name: ClassVar[str]  # in the log when a run fails, and in the loop's order

    def __init__(self, memory: MemoryServices, engine: EngineBackend,
                 door: ServerLoad | None = None) -> None:
        """`door`: the server's generation requests in flight (none given: only the
        engine's client requests count, as for a CLI run outside a server)."""
        self.memory = memory
        self.engine = engine
        self.door = door or ServerLoad()
        self.runs: list[Any] = []  # this process's runs, newest last (bounded)

    def client_busy(self) -> bool:
        return client_waits(self.engine, self.door)

    @abstractmethod
    async def tick(self) -> list[Any]:
        """Do the due work, stopping at the first sign of a client; returns the runs."""

    async def prefill(self, user: str, ids: list[int]) -> tuple[int, str]:
        """Prefill `ids` as one background request of one token, under the user's cache
        salt (the blocks it fills are theirs to find): the tokens the cache already held,
        and "done", or "preempted" when a client's request ended it."""
        params = dataclasses.replace(PREFILL, cache_salt=self.memory.cache_salt(user))
        cached, outcome = 0, "preempted"
        async for delta in self.engine.generate(ids, params, kind="background"):
            if delta.finished:
                cached = delta.cached_tokens or 0
                outcome = "preempted" if delta.finish_reason == "abort" else "done"
        return cached, outcome

    def kept(self, runs: list[Any]) -> list[Any]:
        """`runs`, after remembering them (the last RUNS_KEPT)."""
        self.runs = [*self.runs, *runs][-RUNS_KEPT:]
        return runs
