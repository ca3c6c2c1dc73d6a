"""`tandem mcp` beside a running `tandem serve`: the server says where it is in
`$TANDEM_HOME/server.json` while it serves, `tandem mcp` forwards each call to its `/mcp`
(one process writes the folder's search index), and once it stops the calls run on the
folder again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.load.app_thread import wait_ready
from bench.load.plain_vllm import free_port
from server.mcp import discovery
from tests.mcp_clients import call, over_stdio, refusal

READY_TIMEOUT_S = 300


def test_a_file_left_by_a_dead_server_names_no_server(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / discovery.FILE).write_text(json.dumps(
        {"url": "http://127.0.0.1:9", "pid": dead.pid, "user": "tester"}))
    assert discovery.running(tmp_path) is None
    (tmp_path / discovery.FILE).write_text("{not json")
    assert discovery.running(tmp_path) is None
    assert discovery.local_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert discovery.local_url("::", 8000) == "http://[::1]:8000"


def test_tandem_mcp_forwards_to_the_running_server_and_works_alone_after_it_stops(
        serve_home: Path):
    home = serve_home
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--profile", "tiny", "--port", str(port),
         "--user", "tester"], env={**os.environ, "TANDEM_HOME": str(home)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def still_serving() -> None:
        assert server.poll() is None, "serve stopped before it was ready"

    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (home / discovery.FILE).exists() and time.monotonic() < deadline:
            still_serving()
            time.sleep(0.2)
        announced = json.loads((home / discovery.FILE).read_text())
        assert announced == {"url": base, "pid": server.pid, "user": "tester", "uds": None}
        assert (home / discovery.FILE).stat().st_mode & 0o777 == 0o600
        wait_ready(base, max(deadline - time.monotonic(), 1.0), still_serving)

        async def through_the_server():
            async with over_stdio(home) as s:
                added = await call(s, "memory_remember", title="Printer on floor two",
                                   body="The printer on floor two needs the blue toner.")
                # The server holds the search index now: only a forwarded search works.
                found = await call(s, "memory_search", query="which toner for the printer")
            async with over_stdio(home, user="bob") as s:
                other = await refusal(s, "memory_recent")
            return added, found, other

        added, found, other = asyncio.run(through_the_server())
        assert found["results"][0]["id"] == added["id"]
        assert "serves a client without a key as 'tester'" in other
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert 'tandem_http_responses_total{route="/mcp",status="200"}' in metrics
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)
    assert not (home / discovery.FILE).exists()

    async def alone():
        async with over_stdio(home) as s:
            recent = await call(s, "memory_recent")
            found = await call(s, "memory_search", query="printer toner")
        return recent, found

    recent, found = asyncio.run(alone())
    assert [n["id"] for n in recent["notes"]] == [added["id"]]
    assert found["results"][0]["id"] == added["id"]
