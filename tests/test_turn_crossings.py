"""How often a real chat request crosses between the server and memory, counted.

A turn's calls into memory are flat, as vLLM's scheduler is called (`schedule()`, then
`update_from_output()`): `begin_turn` hands the server what its layout reads of memory,
the server lays the prompt out and asks for the hidden parts, `admit_turn` acts on the
layout that stands, `record_turn` records the answer. Memory never calls back into the
server: no layout callback, no property of the server's layout, no server metrics.

Counted with a profile hook on the request's own calls (a context variable set for the
request alone, so the served app's idle loops on the same event loop do not count): a
crossing is a call from a server module into a conductor module, or back."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.inprocess import InProcessApp

REPO = str(Path(__file__).resolve().parents[1]) + "/"
_COUNTING: contextvars.ContextVar[Counter | None] = contextvars.ContextVar(
    "tandem_turn_crossings", default=None)


def _part(filename: str) -> str | None:
    if not filename.startswith(REPO):
        return None
    top = filename[len(REPO):].split("/", 1)[0]
    return top if top in ("server", "conductor", "engine") else None


class Crossings:
    """A profile hook counting (caller's part, callee's part, callee) for each call that
    crosses between server/ and conductor/ while a request's counter is set."""

    def __init__(self) -> None:
        self.done = False

    def hook(self, frame, event: str, _arg) -> None:
        if event != "call":
            return
        counter = _COUNTING.get()
        if counter is None:
            if self.done:  # the test is over: each hooked thread takes its hook off
                sys.setprofile(None)
            return
        callee = _part(frame.f_code.co_filename)
        if callee is None:
            return
        caller_frame = frame.f_back
        while caller_frame is not None and _part(caller_frame.f_code.co_filename) is None:
            caller_frame = caller_frame.f_back  # through the library frames between
        if caller_frame is None:
            return
        caller = _part(caller_frame.f_code.co_filename)
        if {caller, callee} == {"server", "conductor"}:
            name = f"{frame.f_code.co_filename[len(REPO):]}:{frame.f_code.co_name}"
            counter[(caller, callee, name)] += 1


async def _counted(app: InProcessApp, path: str, body: dict) -> tuple[httpx.Response, Counter]:
    counter: Counter = Counter()
    token = _COUNTING.set(counter)  # the request's tasks and worker threads copy it
    try:
        transport = httpx.ASGITransport(app=app.app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                     timeout=120) as client:
            response = await client.post(path, json=body)
            await response.aread()
    finally:
        _COUNTING.reset(token)
    await asyncio.sleep(0.2)  # the answer's recording, when it runs after the last byte
    return response, counter


def count_crossings(served, app: InProcessApp, path: str, body: dict) -> Counter:
    """The crossings of one request on the session's engine: the hook on the event loop's
    thread and on a fresh default executor's (whose threads start hooked)."""
    crossings = Crossings()
    loop = served.loop
    threading.setprofile(crossings.hook)
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="crossings")
    before = loop._default_executor  # put back after: the session's other tests use it

    async def hook_the_loop() -> None:
        sys.setprofile(crossings.hook)
        loop.set_default_executor(executor)
    try:
        served.run(hook_the_loop())
        response, counter = served.run(_counted(app, path, body))
    finally:
        threading.setprofile(None)
        crossings.done = True

        async def unhook_the_loop() -> None:
            sys.setprofile(None)
            loop._default_executor = before

        # put back on the loop before this executor shuts: a later to_thread must not
        # meet a shut executor ("cannot schedule new futures after shutdown")
        served.run(unhook_the_loop())
        executor.shutdown(wait=True)
    assert response.status_code == 200, response.text
    return counter


# A turn's door calls: its three, the hiding decision once for the layout that fits, and
# the store the answer's held-back memory blocks are written to (answering/answer.py), and
# for a client that names no session the conversation's id (derived_session).
FLAT = Counter(begin_turn=1, hidden=1, admit_turn=1, record_turn=1, store=1,
               derived_session=1)
# The held-back block parser (conductor/writing/blocks.py), fed each chunk of the answer.
PARSER = "conductor/writing/blocks.py"


def _door_calls(counter: Counter) -> Counter:
    """Calls from the server into memory's front door (MemoryServices), by method."""
    return Counter({name.rsplit(":", 1)[1]: n for (caller, _, name), n in counter.items()
                    if caller == "server" and name.startswith("conductor/memory/services.py")})


def _calls_back(counter: Counter) -> dict[str, int]:
    return {name: n for (caller, _, name), n in counter.items() if caller == "conductor"}


def test_a_plain_chat_turn_calls_the_door_flat_and_memory_never_calls_the_server(served,
                                                                                tmp_path):
    app = InProcessApp(served, tmp_path)
    body = {"model": "tiny", "script": "It builds.",
            "messages": [{"role": "user", "content": "what does the build script do?"}]}
    first = count_crossings(served, app, "/v1/chat/completions", body)
    assert _calls_back(first) == {}
    assert _door_calls(first) == FLAT
    # the next turn replays the first's record: the same flat calls
    body["messages"] += [{"role": "assistant", "content": "It builds."},
                         {"role": "user", "content": "and then?"}]
    second = count_crossings(served, app, "/v1/chat/completions", body)
    assert _calls_back(second) == {}
    assert _door_calls(second) == FLAT
    # the rest, door or not, is a few calls a turn (who the request is for, the ledger's
    # message type), not one a layout step; the block parser's, one a chunk, apart
    others = {name: n for (_, _, name), n in second.items()
              if not name.startswith(("conductor/memory/services.py", PARSER))}
    assert sum(others.values()) <= 16, sorted(others.items())
