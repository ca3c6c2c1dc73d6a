"""Requests to a second app that shares the session's engine, run on the server's loop."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import httpx

# The notes' index in the shared context, as the GPU profiles show it (the CPU default,
# which the tiny profile keeps, shows none): for tests of what the index does.
WITH_INDEX = {"notes_shown": (("index_budget", 1500),)}


class InProcessApp:
    """An app variant (other profile switches, other memory settings) over the same engine."""

    def __init__(self, served, home: Path, memory_mode: str | None = None,
                 scripted: bool = True, trusted_proxies: frozenset[str] = frozenset(),
                 client_host: str = "127.0.0.1", auth=None,
                 memory_changes: dict | None = None,
                 profile_changes: dict | None = None) -> None:
        from conductor.memory.services import MemorySettings
        from engine.profiles import ProfileMemory
        from server.app import create_app

        engine = served.app.state.tandem.engine
        profile = engine.profile
        if memory_mode is not None:
            profile = dataclasses.replace(profile, memory=ProfileMemory(mode=memory_mode))
        if memory_changes:  # other memory keys of the profile (conversation, replay window)
            profile = dataclasses.replace(
                profile, memory=dataclasses.replace(profile.memory, **memory_changes))
        profile = dataclasses.replace(profile, scripted=scripted, **(profile_changes or {}))
        settings = MemorySettings(user_name="tester", trusted_proxies=trusted_proxies)
        self.app = create_app(profile, home, engine=engine, memory_settings=settings, auth=auth)
        self.memory = self.app.state.tandem.memory
        self._served = served
        self._client_host = client_host

    @classmethod
    def over(cls, served, app, client_host: str = "127.0.0.1") -> InProcessApp:
        """Requests to an app made elsewhere (one served over HTTP too, say)."""
        wrapped = cls.__new__(cls)
        wrapped.app, wrapped.memory = app, app.state.tandem.memory
        wrapped._served, wrapped._client_host = served, client_host
        return wrapped

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=(self._client_host, 5000))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                         timeout=120) as client:
                response = await client.request(method, path, **kwargs)
                await response.aread()
                return response
        return self._served.run(go())

    def chat(self, messages: list[dict], script: str, headers: dict | None = None,
             stream: bool = False, **body) -> tuple[str, dict, httpx.Response]:
        """(content the client saw, usage, response) for one scripted turn."""
        response = self.request("POST", "/v1/chat/completions", headers=headers or {}, json={
            "model": "tiny", "messages": messages, "script": script, "stream": stream,
            "stream_options": {"include_usage": True} if stream else None, **body})
        return _answer(response, stream)

    def converse(self, message: str, script: str, headers: dict | None = None,
                 stream: bool = False, **body) -> tuple[str, dict, httpx.Response]:
        """(content the client saw, usage, response) for one message of the continuous
        conversation."""
        response = self.request("POST", "/v1/conductor/converse", headers=headers or {}, json={
            "message": message, "script": script, "stream": stream,
            "stream_options": {"include_usage": True} if stream else None, **body})
        return _answer(response, stream)


def _answer(response: httpx.Response, stream: bool) -> tuple[str, dict, httpx.Response]:
    assert response.status_code == 200, response.text
    if not stream:
        data = response.json()
        return data["choices"][0]["message"]["content"] or "", data["usage"], response
    content, usage = "", {}
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            if event["choices"]:
                content += event["choices"][0]["delta"].get("content") or ""
            usage = event.get("usage") or usage
    return content, usage, response


def eventually(check, timeout: float = 10.0) -> None:
    """Wait for work the server finishes after the answer (file writes in a thread)."""
    import time

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)
