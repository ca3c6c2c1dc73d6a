"""Runs the real app (real engine) under uvicorn in a thread, for the whole test session."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

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
    """uvicorn on its own event loop thread; `run` executes a coroutine on that loop."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                loop="none", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="tandem-test-server",
                                        daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._server.serve())

    def start(self, ready_timeout: float = 600.0) -> None:
        self._thread.start()
        wait_ready(self.base_url, ready_timeout, lambda: None)

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=60)


class AppOnLoop:
    """A second app served over HTTP on a ServedApp's event loop, and so on its engine:
    uvicorn's server runs as a task of that loop, its requests reach the same AsyncLLM."""

    def __init__(self, host: ServedApp, app: FastAPI, config=None) -> None:
        """`config(app, host, port)`: uvicorn's settings (default: the test server's);
        pass `server.cli.main.server_config` to serve as `tandem serve` does."""
        self.app, self._host = app, host
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        if config is None:
            settings = uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                      log_level="warning", loop="none", lifespan="on")
        else:
            settings = config(app, "127.0.0.1", self.port)
            settings.loop, settings.lifespan = "none", "on"
        self._server = uvicorn.Server(settings)
        self._serving = None

    def start(self, ready_timeout: float = 60.0) -> None:
        self._serving = asyncio.run_coroutine_threadsafe(self._server.serve(), self._host.loop)

        def stopped() -> None:
            if self._serving.done():
                self._serving.result()  # raises what stopped it
                raise RuntimeError("the second app stopped before it was ready")

        wait_ready(self.base_url, ready_timeout, stopped)

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return self._host.run(coro, timeout)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._serving is not None:
            self._serving.result(timeout=60)
