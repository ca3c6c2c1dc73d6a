"""A replica's memory on the real app and engine (docs/serving/replicas.md), without
the replicas lane's cluster: the lease's calls never hold the server's event loop. The
coordination service here is a stand-in for etcd's v3 gateway on loopback that answers
each call after a delay (a slow or distant etcd); the lane runs the real one."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from conductor.memory.etcd_leases import EtcdLeases
from conductor.memory.lease import LeaseKeeper
from tests.inprocess import InProcessApp

CALL_DELAY_S = 1.0  # each gateway call; taking a lease is two (grant, then the txn)
BLOCK = ('Noted. <tandem_memory op="add" scope="user" kind="reference">\ntitle: deploy '
         'day\n\nWe deploy on Tuesdays.\n</tandem_memory>')


class SlowEtcd(BaseHTTPRequestHandler):
    """etcd's v3 JSON gateway as EtcdLeases calls it, every lease granted, each call
    answered after CALL_DELAY_S."""

    revision = 0
    calls: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(CALL_DELAY_S)
        path = self.path.removeprefix("/v3/")
        SlowEtcd.calls.append(path)
        SlowEtcd.revision += 1
        answer = {"lease/grant": {"ID": str(SlowEtcd.revision), "TTL": "30"},
                  "kv/txn": {"succeeded": True,
                             "header": {"revision": str(SlowEtcd.revision)}},
                  "lease/keepalive": {"result": {"TTL": "30"}}}.get(path, {})
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def slow_etcd() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowEtcd)
    SlowEtcd.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_blocks_lease_is_taken_off_the_event_loop(served, tmp_path, slow_etcd):
    """A model's memory block is written on the loop as the answer streams; the lease it
    needs (two calls to a slow etcd, 2 s) is taken in a worker thread before the
    answer starts, so a ticker on the same loop never waits past 0.8 s, and the note is
    written under the lease's token. Before: the loop stood still for both calls."""
    app = InProcessApp(served, tmp_path)
    app.memory.leases = LeaseKeeper(EtcdLeases(slow_etcd), "replica-a", ttl_s=30, idle_s=60)

    async def go() -> tuple[httpx.Response, float]:
        gaps: list[float] = []
        running = True

        async def tick() -> None:
            last = time.perf_counter()
            while running:
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                     timeout=120) as client:
            answer = await client.post("/v1/chat/completions", json={
                "model": "tiny", "script": BLOCK, "stream": True,
                "messages": [{"role": "user", "content": "We deploy on Tuesdays."}]})
        running = False
        await ticker
        return answer, max(gaps)

    answer, longest = served.run(go())
    assert answer.status_code == 200, answer.text
    assert "› remembered: deploy day" in answer.text
    assert SlowEtcd.calls[:2] == ["lease/grant", "kv/txn"]
    assert longest < 0.8, f"the event loop stood still {longest:.2f} s"
    (note,) = app.memory.store("tester").list()
    assert note.title == "deploy day"
    entries = [json.loads(line) for line in (tmp_path / "memory" / "journal.jsonl")
               .read_text().splitlines()]
    assert [e.get("fence") for e in entries if e.get("op") == "add"] == [2]
