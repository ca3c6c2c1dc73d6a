"""`/mcp` on the real app: behind the same keys and browser rules as `/v1`, its limits (sizes
bounded, a slow search off the event loop, a client gone mid-call loses nothing), and
memory shared both ways with the sessions the engine serves."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from server.mcp.http import MAX_BODY_BYTES
from server.mcp.tools import READ_CHARS, SNIPPET_CHARS
from tests.mcp_clients import (  # noqa: F401 (keyed: the module's app, keys on)
    TESTER_KEY,
    call,
    empty_stores,
    keyed,
    over_http,
    refusal,
)

WIRE = {"Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18"}


def rpc(method: str, params: dict, request_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def remember_call(title: str, body: str) -> dict:
    return rpc("tools/call", {"name": "memory_remember",
                              "arguments": {"title": title, "body": body}})


def post(server, body, key: str | None = TESTER_KEY, timeout: float = 60, **headers):
    sent = {**WIRE, **({"Authorization": f"Bearer {key}"} if key else {}), **headers}
    return httpx.post(f"{server.base_url}/mcp", json=body, headers=sent, timeout=timeout)


@pytest.fixture(autouse=True)
def _empty(keyed):  # noqa: F811
    empty_stores(keyed)


def messages(exc: BaseException) -> str:
    """The messages of a client's failure and of the errors its task groups hold."""
    return " ".join([str(exc), *(messages(e) for e in getattr(exc, "exceptions", ()))])


def test_a_key_is_needed_and_names_the_user(keyed):  # noqa: F811
    body = remember_call("Door code", "The side door opens with the blue badge only.")
    assert post(keyed, body, key=None).status_code == 401
    assert post(keyed, body, key="not-a-key").status_code == 401
    assert "invalid_api_key" in post(keyed, body, key="not-a-key").text

    async def without_a_key():
        async with over_http(keyed.base_url) as session:
            await session.list_tools()

    with pytest.raises(Exception) as refused:
        asyncio.run(without_a_key())
    assert "error response" in messages(refused.value)  # the SDK's word for the 401
    assert keyed.app.state.tandem.memory.store("tester").list() == []

    answered = post(keyed, body, key=keyed.keys["bob"])  # the key names the user
    assert answered.status_code == 200 and '"isError":false' in answered.text.replace(" ", "")
    assert [n.title for n in keyed.app.state.tandem.memory.store("bob").list()] == ["Door code"]
    assert keyed.app.state.tandem.memory.store("tester").list() == []


def test_a_web_page_is_refused_by_origin_host_and_body_type(keyed):  # noqa: F811
    body = remember_call("Planted", "A page tried to write this into the user's memory.")
    page = post(keyed, body, Origin="https://evil.example")
    rebound = post(keyed, body, Host="evil.example:8000")
    form = httpx.post(f"{keyed.base_url}/mcp", content=b'{"jsonrpc": "2.0"}', headers={
        **WIRE, "Authorization": f"Bearer {TESTER_KEY}", "Content-Type": "text/plain"})
    assert (page.status_code, rebound.status_code, form.status_code) == (403, 421, 415)
    assert "origin_not_allowed" in page.text and "host_not_allowed" in rebound.text

    async def from_a_page():
        async with over_http(keyed.base_url, TESTER_KEY, {"Origin": "https://evil.example"}) \
                as session:
            await session.list_tools()

    with pytest.raises(Exception) as refused:
        asyncio.run(from_a_page())
    assert "error response" in messages(refused.value)  # the SDK's word for the 403
    assert keyed.app.state.tandem.memory.store("tester").list() == []


def test_sizes_are_bounded(keyed, tmp_path):  # noqa: F811
    big = post(keyed, remember_call("Big", "word " * 60_000))  # 300 KB
    assert big.status_code == 413 and MAX_BODY_BYTES == 256 * 1024  # as docs/memory/mcp.md says
    store = keyed.app.state.tandem.memory.store("tester")
    for n in range(30):
        assert store.add(title=f"Walrus herd {n}", body=f"Walrus herd {n} grazes " + "near "
                         * 150 + "the shore.", kind="reference", scope="user",
                         source="cli").ok
    keyed.app.state.tandem.memory.on_change("tester")  # as the server's own writes do
    layers = keyed.app.state.tandem.memory.layers("tester")
    layers.ensure()
    (layers.files.semantic_dir / "facts.md").write_text(
        "# Facts\n\n" + "".join(f"## Fact {n}\n\n" + "walrus lore " * 40 + "\n\n"
                                for n in range(100)))

    async def scenario():
        async with over_http(keyed.base_url, TESTER_KEY) as s:
            found = await call(s, "memory_search", query="walrus herd grazes", limit=20)
            too_many = await refusal(s, "memory_search", query="walrus", limit=21)
            long_file = await call(s, "memory_read", ref="semantic/facts.md")
            recent = await call(s, "memory_recent", limit=50)
        return found, too_many, long_file, recent

    found, too_many, long_file, recent = asyncio.run(scenario())
    assert 0 < len(found["results"]) <= 20
    assert all(len(r["snippet"]) <= SNIPPET_CHARS for r in found["results"])
    assert "limit" in too_many and "20" in too_many
    assert len(long_file) <= READ_CHARS + 200 and f"[cut at {READ_CHARS} characters" in long_file
    assert len(recent["notes"]) == 30 and all("body" not in n for n in recent["notes"])


def test_a_slow_search_never_holds_the_event_loop(keyed, monkeypatch):  # noqa: F811
    index = keyed.app.state.tandem.search.index("tester")
    index.sync()
    searched = index.search

    def slow_search(*args, **kwargs):
        time.sleep(3)  # as a search of a big library on a busy machine
        return searched(*args, **kwargs)

    monkeypatch.setattr(index, "search", slow_search)
    answers: list = []
    thread = threading.Thread(target=lambda: answers.append(post(keyed, rpc(
        "tools/call", {"name": "memory_search", "arguments": {"query": "walrus"}}))))
    started = time.monotonic()
    thread.start()
    time.sleep(0.5)
    waits = []
    for _ in range(5):
        asked = time.monotonic()
        assert httpx.get(f"{keyed.base_url}/healthz", timeout=10).status_code == 200
        waits.append(time.monotonic() - asked)
        time.sleep(0.2)
    thread.join(60)
    assert answers and answers[0].status_code == 200 and time.monotonic() - started >= 3
    assert max(waits) < 0.5, waits


def test_a_client_gone_mid_call_loses_nothing(keyed, monkeypatch):  # noqa: F811
    store = keyed.app.state.tandem.memory.store("tester")
    added = store.add
    writing = threading.Event()

    def slow_add(**fields):
        writing.set()
        time.sleep(2)  # the client gives up meanwhile
        return added(**fields)

    monkeypatch.setattr(store, "add", slow_add)
    told = index_told(keyed, monkeypatch)
    try:
        with pytest.raises(httpx.ReadTimeout):
            post(keyed, remember_call("Boiler service", "The boiler is serviced each "
                                      "October by the firm on Mill Lane."), timeout=0.5)
        assert writing.is_set()
        deadline = time.monotonic() + 30
        while not store.list() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [n.title for n in store.list()] == ["Boiler service"]
        note_id = store.list()[0].id
        while time.monotonic() < deadline and not journaled(store, note_id):
            time.sleep(0.1)  # the journal line follows the note's file
        assert journaled(store, note_id) == [("add", True, "mcp")]
        while not told() and time.monotonic() < deadline:
            time.sleep(0.1)  # told on the server's loop once the write's thread returns
        assert told() == ["tester"]  # the search index was told, though no one listened
        assert found_by_search(keyed, "when is the boiler serviced") == ["Boiler service"]
    finally:
        monkeypatch.undo()


def index_told(server, monkeypatch) -> Callable[[], list[str]]:
    """The users the search index is told of from now on (`MemoryServices.on_change`, which
    every write path calls and which marks the user's index for a sync)."""
    memory = server.app.state.tandem.memory
    told: list[str] = []
    tell = memory.on_change

    def recorded(user):
        told.append(user)
        tell(user)

    monkeypatch.setattr(memory, "on_change", recorded)
    return lambda: list(told)


def journaled(store, note_id: str) -> list[tuple]:
    return [(e["op"], e["ok"], e.get("source")) for e in store.journal.entries()
            if e.get("id") == note_id]


def found_by_search(server, query: str) -> list[str]:
    """The titles a memory_search over /mcp finds, as `tester`, a moment after a write."""
    async def search():
        async with over_http(server.base_url, TESTER_KEY) as s:
            return await call(s, "memory_search", query=query)

    time.sleep(0.5)  # the write's task tells the index just after the store's write
    store = server.app.state.tandem.memory.store("tester")
    ids = [r.get("id") for r in asyncio.run(search())["results"]]
    return [store.get(i).title for i in ids if i and store.get(i) is not None]


def test_a_call_cancelled_mid_write_still_finishes_it(keyed, monkeypatch):  # noqa: F811
    """As the stdio transport's shutdown or a client's cancel ends a call: the note is
    written whole and the search index told, though nobody waits for the answer."""
    from server.mcp.access import ServedMemory
    from server.mcp.tools import Caller, MemoryTools

    memory, search = keyed.app.state.tandem.memory, keyed.app.state.tandem.search
    store = memory.store("tester")
    added = store.add
    writing = threading.Event()

    def slow_add(**fields):
        writing.set()
        time.sleep(1.5)
        return added(**fields)

    monkeypatch.setattr(store, "add", slow_add)
    told = index_told(keyed, monkeypatch)
    tools = MemoryTools(ServedMemory(memory, lambda: search), lambda: Caller("tester"))

    async def cancel_mid_write():
        call = asyncio.ensure_future(tools.write(
            "add", title="Gate code", body="The yard gate opens with the code on the fob.",
            kind="reference", scope="user"))
        while not writing.is_set():
            await asyncio.sleep(0.02)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        deadline = time.monotonic() + 30  # the loop lives on, as the server's does
        while not told() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    try:
        asyncio.run(cancel_mid_write())
        assert [n.title for n in store.list()] == ["Gate code"]
        assert told() == ["tester"]  # the search index was told
        assert found_by_search(keyed, "the yard gate code") == ["Gate code"]
    finally:
        monkeypatch.undo()


def test_what_mcp_writes_a_session_sees_and_what_the_model_writes_mcp_finds(keyed):  # noqa: F811
    memory = keyed.app.state.tandem.memory

    def chat(session: str, question: str, script: str) -> dict:
        response = httpx.post(f"{keyed.base_url}/v1/chat/completions", timeout=180, headers={
            "Authorization": f"Bearer {TESTER_KEY}", "X-Tandem-Session": session}, json={
            "model": "tiny", "script": script,
            "messages": [{"role": "user", "content": question}]})
        assert response.status_code == 200, response.text
        return response.json()

    async def remember():
        async with over_http(keyed.base_url, TESTER_KEY) as s:
            return await call(s, "memory_remember", title="Walrus colony count",
                              body="The walrus colony on Svalbard counts 412 animals.")

    written = asyncio.run(remember())
    chat("mcp-sees", "How many animals are in the walrus colony?", "Quite a few.")
    record = memory.latest_record("tester", "mcp-sees")
    prompt = keyed.app.state.tandem.engine.tokenizer.decode(list(record.ids))
    assert "412 animals" in prompt and "notes" in {s.kind for s in record.spans}

    block = ('Noted. <tandem_memory op="add" scope="user" kind="reference">\n'
             "title: Kettle descaling\n\nThe office kettle is descaled every second "
             "Friday with citric acid.\n</tandem_memory>")
    answer = chat("model-writes", "Remember how we descale the kettle.", block)
    assert "› remembered: Kettle descaling" in answer["choices"][0]["message"]["content"]

    async def find():
        async with over_http(keyed.base_url, TESTER_KEY) as s:
            found = await call(s, "memory_search", query="how is the kettle descaled")
            recent = await call(s, "memory_recent")
            text = await call(s, "memory_read", ref=found["results"][0]["id"])
        return found, recent, text

    found, recent, text = asyncio.run(find())
    kettle = next(n for n in memory.store("tester").list() if n.title == "Kettle descaling")
    assert found["results"][0]["id"] == kettle.id and "citric acid" in text
    assert [n["title"] for n in recent["notes"]] == ["Kettle descaling",
                                                     "Walrus colony count"]
    assert written["id"] in {n["id"] for n in recent["notes"]}


@pytest.mark.parametrize("switch", ["read", "OFF"])
def test_memory_read_only_for_the_request_refuses_every_write(keyed, switch):  # noqa: F811
    """`X-Tandem-Memory: read` (or `off`) means on /mcp what it means on the chat routes:
    nothing is written; the reads still answer."""
    store = keyed.app.state.tandem.memory.store("tester")
    kept = store.add(title="Boiler service", body="The boiler is serviced each October.",
                     kind="reference", scope="user", source="cli").note
    keyed.app.state.tandem.memory.on_change("tester")
    journal = len(list(store.journal.entries()))

    async def scenario():
        async with over_http(keyed.base_url, TESTER_KEY, {"X-Tandem-Memory": switch}) as s:
            refused = [await refusal(s, "memory_remember", title="Planted",
                                     body="Written though memory is read-only."),
                       await refusal(s, "memory_update", id=kept.id, body="Changed."),
                       await refusal(s, "memory_forget", id=kept.id, reason="gone")]
            found = await call(s, "memory_search", query="when is the boiler serviced")
            read = await call(s, "memory_read", ref=kept.id)
            recent = await call(s, "memory_recent")
        return refused, found, read, recent

    refused, found, read, recent = asyncio.run(scenario())
    for text in refused:
        assert "memory is read-only for this request" in text, text
        assert f"X-Tandem-Memory: {switch.lower()}" in text and "nothing was written" in text
    assert [n.id for n in store.list(state="all")] == [kept.id]
    assert store.get(kept.id).body == kept.body and not store.get(kept.id).archived
    assert len(list(store.journal.entries())) == journal  # not even a refusal's line
    assert found["results"][0]["id"] == kept.id and "October" in read
    assert [n["id"] for n in recent["notes"]] == [kept.id]


def test_an_unknown_memory_switch_is_a_400_as_on_the_chat_routes(keyed):  # noqa: F811
    answer = post(keyed, remember_call("Planted", "An unknown switch wrote this."),
                  **{"X-Tandem-Memory": "yes"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"] == "X-Tandem-Memory must be 'off' or 'read'"
    assert keyed.app.state.tandem.memory.store("tester").list() == []


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_only_post_is_served_and_no_stream_is_left_open(keyed, method):  # noqa: F811
    """Stateless JSON: no event stream to GET (the SDK's never ended), no session to
    DELETE; a clear 405 at once, behind the key check as every route."""
    answer = httpx.request(method, f"{keyed.base_url}/mcp", timeout=10, headers={
        **WIRE, "Authorization": f"Bearer {TESTER_KEY}"})
    assert answer.status_code == 405, answer.text
    assert answer.headers["allow"] == "POST"
    assert "POST only" in answer.json()["error"]["message"]
    assert "text/event-stream" not in answer.headers.get("content-type", "")
    assert httpx.get(f"{keyed.base_url}/mcp", timeout=10).status_code == 401  # no key


def test_the_memory_search_route_finds_a_title_only_note_with_a_score(keyed):  # noqa: F811
    title = "The boiler room key hangs behind the Ferrowind poster."

    async def remember():
        async with over_http(keyed.base_url, TESTER_KEY) as s:
            return await call(s, "memory_remember", title=title)

    added = asyncio.run(remember())
    chat = httpx.post(f"{keyed.base_url}/v1/chat/completions", timeout=180, headers={
        "Authorization": f"Bearer {TESTER_KEY}", "X-Tandem-Session": "titles"}, json={
        "model": "tiny", "script": "Noted.", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 200, chat.text
    routes = {"Authorization": f"Bearer {TESTER_KEY}",
              "X-Tandem-Memory-Token": chat.headers["x-tandem-memory-token"]}
    answer = httpx.get(f"{keyed.base_url}/v1/memory/search", timeout=60,
                       params={"q": "Ferrowind", "mode": "hybrid", "collection": "notes"},
                       headers=routes)  # the notes alone: the module's app keeps layer files
    assert answer.status_code == 200, answer.text
    hits = answer.json()["data"]
    assert len(hits) == 1 and added["id"] in hits[0]["path"]
    assert hits[0]["section"] == title and hits[0]["score"] > 0
    bm25 = httpx.get(f"{keyed.base_url}/v1/memory/search", timeout=60,
                     params={"q": "Ferrowind"}, headers=routes).json()["data"]
    assert [n["id"] for n in bm25] == [added["id"]] and bm25[0]["score"] > 0

