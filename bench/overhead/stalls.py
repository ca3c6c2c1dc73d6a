"""The stall watcher: how long the event loop went without running anything else.

A task on the loop beats every `INTERVAL_S`; a beat that comes late by more than
`STALL_S` was held up by work that ran on the loop (or held the GIL that the loop needs)
for that long. A thread beside it looks at the loop while a beat is overdue and notes the
innermost frame of our code on each thread (the loop's, and the worker threads the turn
runs in): where the stalls were spent, as a sampling profiler would see it.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTERVAL_S = 0.0005
STALL_S = 0.001  # the bound: nothing on the event loop past 1 ms at a time
ROOT = str(Path(__file__).resolve().parents[2])
OURS = tuple(f"{ROOT}/{p}/" for p in ("server", "conductor", "engine"))


@dataclass
class StallWatcher:
    """Start with `async with StallWatcher() as watcher:`; read `summary()` after."""

    lags: list[float] = field(default_factory=list)
    samples: collections.Counter = field(default_factory=collections.Counter)
    _beat: float = 0.0
    _running: bool = False
    _task: asyncio.Task | None = None
    _thread: threading.Thread | None = None
    _loop_thread: int = 0
    # the garbage collector's runs meanwhile, by generation: (seconds each); a full
    # collection walks every tracked object the server holds (issue 58, item 4)
    collections: dict[int, list[float]] = field(default_factory=dict)
    _gc_started: float = 0.0

    async def __aenter__(self) -> StallWatcher:
        gc.callbacks.append(self._collected)
        self._running, self._beat = True, time.perf_counter()
        self._loop_thread = threading.get_ident()
        self._task = asyncio.create_task(self._beats())
        self._thread = threading.Thread(target=self._sample, name="stall-sampler", daemon=True)
        self._thread.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._running = False
        if self._task is not None:
            await self._task
        if self._thread is not None:
            self._thread.join()
        gc.callbacks.remove(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.collections.setdefault(info["generation"], []).append(
                time.perf_counter() - self._gc_started)

    async def _beats(self) -> None:
        while self._running:
            before = time.perf_counter()
            await asyncio.sleep(INTERVAL_S)
            self._beat = now = time.perf_counter()
            self.lags.append(max(0.0, now - before - INTERVAL_S))

    def _sample(self) -> None:
        while self._running:
            time.sleep(STALL_S / 4)
            if time.perf_counter() - self._beat < STALL_S + INTERVAL_S:
                continue
            for thread, frame in sys._current_frames().items():
                if thread == threading.get_ident():
                    continue
                where = _our_frame(frame)
                if where is not None:
                    side = "loop" if thread == self._loop_thread else "worker"
                    self.samples[f"{side}: {where}"] += 1

    def summary(self, top: int = 12) -> dict[str, Any]:
        lags = sorted(self.lags)
        stalls = [lag for lag in lags if lag > STALL_S]
        return {
            "beats": len(lags), "interval_ms": INTERVAL_S * 1000, "bound_ms": STALL_S * 1000,
            "stalls_over_bound": len(stalls),
            "stall_share": len(stalls) / len(lags) if lags else 0.0,
            "max_ms": lags[-1] * 1000 if lags else 0.0,
            "p99_ms": _quantile(lags, 0.99) * 1000, "p999_ms": _quantile(lags, 0.999) * 1000,
            "stalled_s": sum(stalls),
            "where": [{"frame": k, "samples": n} for k, n in self.samples.most_common(top)],
            "collections": {str(gen): {"n": len(times), "total_ms": sum(times) * 1000,
                                       "max_ms": max(times) * 1000}
                            for gen, times in sorted(self.collections.items())},
        }


# A thread whose innermost frame is one of these is waiting, not running: it holds no GIL
# and stalls nothing (the write-behind thread's idle wait, a pool's idle workers).
WAITING = frozenset({"wait", "wait_for", "_wait_for_tstate_lock", "get", "select", "sleep",
                     "acquire"})


def _our_frame(frame) -> str | None:
    """The innermost frame of Tandem's own code in a stack, as `path:function`; None for
    a thread that is waiting (`WAITING`)."""
    if frame is not None and frame.f_code.co_name in WAITING:
        return None
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(OURS):
            return f"{name[len(ROOT) + 1:]}:{frame.f_code.co_name}"
        frame = frame.f_back
    return None


def _quantile(values: list[float], q: float) -> float:
    """`values` sorted: the q-quantile (nearest rank)."""
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]
