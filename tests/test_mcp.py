"""Memory over MCP, driven by the MCP SDK's own client over both transports: `/mcp` on a
real app (the session's engine, API keys on) and `tandem mcp` spawned over stdio on a
memory folder with no server. The same tools, the same answers, the same refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import pytest
from mcp import ClientSession

from conductor.notes import NoteStore
from tests.mcp_clients import (  # noqa: F401 (keyed: the module's app, keys on)
    call,
    empty_stores,
    keyed,
    over_http,
    over_stdio,
    refusal,
)

TOOLS = {"memory_search", "memory_read", "memory_remember", "memory_update",
         "memory_forget", "memory_recent"}
FACT = "The staging database listens on port 6543, not the usual 5432."


@dataclass
class Side:
    """One transport: a session as `user` (in `project`), and the user's store on disk."""

    name: str
    session: Callable[..., AbstractAsyncContextManager[ClientSession]]
    store: Callable[[str], NoteStore]
    # Told of notes a test writes to the store itself, as every write path of the server
    # tells its search index (a stdio server sees the journal grow on its own).
    written: Callable[[str], None] = lambda user: None


@pytest.fixture(params=["http", "stdio"])
def side(request, tmp_path) -> Side:
    if request.param == "http":
        server = request.getfixturevalue("keyed")
        memory = server.app.state.tandem.memory
        empty_stores(server)  # the module's app: each test from an empty memory

        def session(user: str = "tester", project: str | None = None):
            headers = {"X-Tandem-Project": project} if project else {}
            return over_http(server.base_url, server.keys[user], headers)

        return Side("http", session, memory.store, memory.on_change)

    def local(user: str = "tester", project: str | None = None):
        return over_stdio(tmp_path, user, project)

    return Side("stdio", local, lambda user: NoteStore(tmp_path / "memory", user))


def test_the_tools_and_the_core_files_are_listed(side):
    async def scenario():
        async with side.session() as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            resources = [str(r.uri) for r in (await session.list_resources()).resources]
        return tools, resources

    tools, resources = asyncio.run(scenario())
    assert set(tools) == TOOLS
    assert tools["memory_remember"].input_schema["required"] == ["title"]
    assert tools["memory_search"].input_schema["properties"]["limit"]["maximum"] == 20
    assert tools["memory_remember"].input_schema["properties"]["body"]["maxLength"] == 8000
    assert tools["memory_search"].annotations.read_only_hint is True
    assert resources == [f"tandem://core/{n}" for n in ("AGENT.md", "USER.md", "SOUL.md")]


def test_each_tool_does_its_work_through_the_stores_rules(side):
    async def scenario():
        async with side.session() as s:
            added = await call(s, "memory_remember", title="Staging database port",
                               body=FACT, tags=["staging", "postgres"])
            again = await call(s, "memory_remember", title="Staging database port",
                               body=FACT, tags=["staging", "postgres"])  # dedupe revises
            recent = await call(s, "memory_recent")
            found = await call(s, "memory_search", query="which port does staging use?")
            by_id = await call(s, "memory_read", ref=added["id"])
            by_ref = await call(s, "memory_read", ref=found["results"][0]["ref"])
            updated = await call(s, "memory_update", id=added["id"], reason="it moved",
                                 body="The staging database moved to port 6544 in May.")
            after = await call(s, "memory_read", ref=added["id"])
            gone = await call(s, "memory_forget", id=added["id"], reason="staging is shut")
            empty = await call(s, "memory_recent")
            core = (await s.read_resource("tandem://core/SOUL.md")).contents[0].text
        return added, again, recent, found, by_id, by_ref, updated, after, gone, empty, core

    (added, again, recent, found, by_id, by_ref, updated, after, gone, empty,
     core) = asyncio.run(scenario())
    assert added["ok"] and added["scope"] == "user" and added["status"] == "provisional"
    assert again["id"] == added["id"] and again["revised_existing"] is True
    assert [n["id"] for n in recent["notes"]] == [added["id"]]
    assert recent["notes"][0]["tags"] == ["staging", "postgres"]
    assert found["results"][0]["id"] == added["id"] and "6543" in found["results"][0]["snippet"]
    assert "6543" in by_id and "Staging database port" in by_id and "6543" in by_ref
    assert updated["op"] == "update" and "6544" in after
    assert gone["status"] == "archived" and empty == {"notes": []}
    assert core.startswith("# Soul")

    store = side.store("tester")
    note = store.get(added["id"])
    assert note.archived and note.source == "mcp" and "6544" in note.body
    assert note.revision >= 2  # the update's earlier text is kept as a revision
    assert [n for n, _ in store.revisions(added["id"])] == list(range(1, note.revision))
    ops = [(e["op"], e["ok"], e.get("source")) for e in store.journal.entries()
           if e.get("id") == added["id"]]
    assert ("add", True, "mcp") in ops and ("update", True, "mcp") in ops
    assert ("archive", True, "mcp") in ops
    journal = store.journal.path.read_text()
    assert "Staging database" not in journal and "6543" not in journal  # no content


def test_refusals_are_tool_errors_that_say_what_to_do(side):
    async def scenario():
        async with side.session() as s:
            secret = await refusal(s, "memory_remember", title="aws access",
                                   body="aws_secret_access_key = "
                                        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
            rule = await refusal(s, "memory_remember", title="Always tabs", kind="rule",
                                 body="The user wants tabs, never spaces, in every file.")
            project = await refusal(s, "memory_remember", title="Alpha build",
                                    scope="project", body="Alpha builds with make.")
            long_title = await refusal(s, "memory_remember", title="t" * 121)
            no_note = await refusal(s, "memory_update", id="0123456789", body="x")
            bad_id = await refusal(s, "memory_forget", id="../../etc", reason="x")
            no_reason = await refusal(s, "memory_forget", id="0123456789")
            blank = await refusal(s, "memory_search", query="   ")
            collection = await refusal(s, "memory_search", query="x", collection="mail")
            too_many = await refusal(s, "memory_recent", limit=500)
            no_ref = await refusal(s, "memory_read", ref="notes/../../keys.json")
        return (secret, rule, project, long_title, no_note, bad_id, no_reason, blank,
                collection, too_many, no_ref)

    (secret, rule, project, long_title, no_note, bad_id, no_reason, blank, collection,
     too_many, no_ref) = asyncio.run(scenario())
    assert "refused (secret)" in secret and "leave the secret out" in secret
    assert "wJalrXUtnFEMI" not in secret
    assert "rule_needs_user_message" in rule and "tandem notes add" in rule
    assert "project_required" in project and 'scope "user"' in project
    assert "title" in long_title and "120" in long_title
    assert "no such note" in no_note and "memory_search" in no_note
    assert "id" in bad_id and "pattern" in bad_id
    assert "reason" in no_reason and "required" in no_reason.lower()
    assert "query is empty" in blank
    assert "collection" in collection and "notes" in collection
    assert "limit" in too_many and "50" in too_many
    assert "no memory file" in no_ref
    assert side.store("tester").list() == []  # nothing refused was written
    refused = [e for e in side.store("tester").journal.entries() if not e["ok"]]
    assert {e.get("reason") for e in refused} >= {"secret", "rule_needs_user_message"}


def test_another_users_or_projects_notes_are_out_of_reach(side):
    def note(user: str, title: str, **where) -> str:
        result = side.store(user).add(title=title, body=f"The walrus fact about {title}.",
                                      kind="reference", source="cli", **where)
        assert result.ok, result.reason
        return result.note.id

    mine = {note("tester", "walrus mine", scope="user"),
            note("tester", "walrus alpha", scope="project", project="/w/alpha")}
    theirs = {"bob": note("bob", "walrus of bob", scope="user"),
              "beta": note("tester", "walrus beta", scope="project", project="/w/beta"),
              "session": note("tester", "walrus session", scope="session", session="s-1")}
    archived = note("tester", "walrus archived", scope="user")
    assert side.store("tester").archive(archived, "old", source="cli").ok
    theirs["archived"] = archived
    side.written("tester")

    async def scenario():
        async with side.session("tester", project="/w/alpha") as s:
            found = await call(s, "memory_search", query="walrus fact", limit=20)
            recent = await call(s, "memory_recent", limit=50)
            tries = [await refusal(s, tool, **args) for hidden in theirs.values()
                     for tool, args in (("memory_read", {"ref": hidden}),
                                        ("memory_update", {"id": hidden, "body": "mine"}),
                                        ("memory_forget", {"id": hidden, "reason": "x"}))]
        async with side.session("bob") as s:
            bobs = await call(s, "memory_recent", limit=50)
        return found, recent, tries, bobs

    found, recent, tries, bobs = asyncio.run(scenario())
    assert {r["id"] for r in found["results"] if "id" in r} == mine
    assert {n["id"] for n in recent["notes"]} == mine
    assert all("no such note" in t or "no note" in t for t in tries), tries
    assert [n["id"] for n in bobs["notes"]] == [theirs["bob"]]
    assert side.store("bob").get(theirs["bob"]).body == "The walrus fact about walrus of bob."


def test_a_title_only_note_is_found_and_every_score_says_how_well(side):
    """Issue 68: a note remembered by its title alone was never found, and a found one's
    score read 0.0 (a lone hit's fused z-score)."""
    title = "The boiler room key hangs behind the Ferrowind poster."

    async def scenario():
        async with side.session() as s:
            added = await call(s, "memory_remember", title=title)
            # the notes alone: the module's app keeps other tests' layer files
            alone = await call(s, "memory_search", query="Ferrowind", collection="notes")
            await call(s, "memory_remember", title="Staging database port", body=FACT)
            await call(s, "memory_remember", title="Boiler service",
                       body="The boiler is serviced each October by the firm on Mill Lane.")
            several = await call(s, "memory_search", query="where is the boiler room key",
                                 collection="notes")
        return added, alone, several

    added, alone, several = asyncio.run(scenario())
    assert [r["id"] for r in alone["results"]] == [added["id"]]
    assert alone["results"][0]["snippet"] == title and alone["results"][0]["score"] > 0
    assert several["results"][0]["id"] == added["id"] and len(several["results"]) == 3
    scores = [r["score"] for r in several["results"]]
    assert all(s > 0 for s in scores) and scores == sorted(scores, reverse=True)
    assert scores[0] > scores[-1]
