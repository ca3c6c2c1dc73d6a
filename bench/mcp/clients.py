"""The MCP SDK's own client over both of Tandem's transports: the streamable HTTP endpoint
of a running app (`/mcp`) and `tandem mcp` spawned over stdio (the bench's and the tests')."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

TANDEM = Path(sys.executable).with_name("tandem")  # the venv's entry point


@asynccontextmanager
async def over_http(base_url: str, key: str | None = None,
                    headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    sent = {**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})}
    async with httpx2.AsyncClient(headers=sent, timeout=180) as http, \
            streamable_http_client(f"{base_url}/mcp", http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(home: Path, user: str | None = "tester", project: str | None = None,
                     env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """`tandem mcp` as a client spawns it, on `home`."""
    args = ["mcp", *(["--user", user] if user else []),
            *(["--project", project] if project else [])]
    params = StdioServerParameters(
        command=str(TANDEM), args=args,
        env={"TANDEM_HOME": str(home), "HF_HUB_OFFLINE": "1",
             "HOME": os.environ.get("HOME", "/root"), **(env or {})})
    async with stdio_client(params) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's answer, parsed (JSON text, or the text itself); fails on a tool error."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text
    assert not result.is_error, f"{tool}: {text}"
    try:
        return json.loads(text)
    except ValueError:
        return text
