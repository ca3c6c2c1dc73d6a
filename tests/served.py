"""The real app (real engine) under uvicorn in a thread for the whole test session
(ServedApp, shared with the benchmarks), and second apps served on its loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from bench.load.app_thread import ServedApp, wait_ready
from bench.load.plain_vllm import free_port

__all__ = ["AppOnLoop", "ServedApp", "serving"]


@contextmanager
def serving(profile: str, home: Path) -> Iterator[ServedApp]:
    """A profile's real app served from `home` for a lane of its own (its own engine),
    stopped after."""
    from engine.profiles import load_profile
    from server.app import create_app

    server = ServedApp(create_app(load_profile(profile), home))
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
