"""The MCP tests' shared parts: an app with API keys on the session's engine, the SDK's
clients over both transports (bench/mcp/clients.py), and a refusal's checks."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import ClientSession

from bench.mcp.clients import call, over_http, over_stdio  # noqa: F401 (the tests' too)

TESTER_KEY = "tk-tester-key-for-the-mcp-tests"


@pytest.fixture(scope="module")
def keyed(served, tmp_path_factory):
    """An app of its own on the session's engine, served over HTTP with API keys on: the
    engine's key is `tester`'s, a named key `bob`'s."""
    from conductor.memory.settings import MemorySettings
    from server.access.auth import Auth
    from server.access.keys import KeyStore
    from server.app import create_app
    from tests.served import AppOnLoop

    home = tmp_path_factory.mktemp("mcp-home")
    keys = KeyStore(home)
    bob_key = keys.add("bob")
    engine = served.app.state.tandem.engine
    app = create_app(engine.profile, home, engine=engine,
                     memory_settings=MemorySettings(user_name="tester"),
                     auth=Auth(api_key=TESTER_KEY, keys=keys, engine_user="tester"))
    server = AppOnLoop(served, app)
    server.start()
    server.keys = {"tester": TESTER_KEY, "bob": bob_key}
    yield server
    server.stop()


async def refusal(session: ClientSession, tool: str, **arguments: Any) -> str:
    """A tool error's text; fails when the call went through."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text
    assert result.is_error, f"{tool} was not refused: {text}"
    assert "Traceback" not in text and 'File "' not in text
    return text



def empty_stores(server, users: tuple[str, ...] = ("tester", "bob")) -> None:
    """Every note of `users` gone, live or archived, and the search index told: each test
    starts from an empty memory whatever the one before it left."""
    memory = server.app.state.tandem.memory
    for user in users:
        store = memory.store(user)
        for note in store.list(state="all"):
            assert store.delete(note.id, via="cli").ok
        memory.on_change(user)
