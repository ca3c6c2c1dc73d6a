"""An ASGI app under uvicorn on a thread and event loop of its own, for benchmarks and
tests that talk to it over HTTP while the caller's thread drives them."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import uvicorn

from bench.load.plain_vllm import free_port


def wait_ready(base_url: str, timeout: float, check: Callable[[], None]) -> None:
    """Poll /readyz until it answers 200; `check` raises when the server has stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check()
        try:
            response = httpx.get(f"{base_url}/readyz", timeout=2)
            if response.status_code == 200:
                return
            if response.json().get("status") == "failed":
                raise RuntimeError(f"engine failed: {response.json()}")
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{base_url} did not become ready")


class ServedApp:
    """uvicorn on its own event loop thread; `run` executes a coroutine on that loop.
    `start`/`stop`, or a `with` block (ready within `ready_timeout`)."""

    def __init__(self, app, ready_timeout: float = 600.0) -> None:
        self.app = app
        self.ready_timeout = ready_timeout
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                loop="none", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="tandem-app-thread",
                                        daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._server.serve())

    def start(self, ready_timeout: float | None = None) -> None:
        self._thread.start()
        wait_ready(self.base_url, ready_timeout or self.ready_timeout, lambda: None)

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=60)

    def __enter__(self) -> ServedApp:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
