"""The Memory screen's routes over HTTP, as a script would call them: the notes tree and
list, a note's file, history and uses, the user's curation, the journal, the settings,
export and the user's delete, a session's next prompt (Context), the layers and the bench.
Every test runs on the real app and engine (scripted tiny model)."""

from __future__ import annotations

import io
import zipfile

import pytest

from tests.inprocess import WITH_INDEX, InProcessApp, eventually

USER = "tester"
NOTES = "/v1/conductor/memory/notes"


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path, memory_mode="on")


def add(app: InProcessApp, title: str, body: str, kind: str = "reference",
        scope: str = "user", **where) -> str:
    result = app.memory.store(USER).add(title=title, body=body, kind=kind, scope=scope,
                                        source="route", has_user_message=True, **where)
    assert result.ok, result.reason
    return result.note.id


def test_the_list_pages_a_scope_with_each_notes_uses_and_search_scores(app):
    ids = [add(app, f"Fact number {i} about kettles", f"Kettle fact {i}: water boils at "
               f"{90 + i} degrees on the hill.") for i in range(7)]
    add(app, "Deploy with make release", "Run make release from the root; tags by CI only.",
        kind="runbook", scope="project", project="/work/demo")
    app.memory.store(USER).record_injection(ids[:2], "req-1")

    tree = app.request("GET", "/v1/conductor/memory/tree").json()
    branches = {(b["scope"], b["key"]): b["live"] for b in tree["data"]}
    assert branches[("user", None)] == 7 and branches[("project", "demo-111b1182")] == 1
    assert "rule" in tree["kinds"] and USER in tree["users"]

    first = app.request("GET", NOTES, params={"scope": "user", "limit": 5}).json()
    second = app.request("GET", NOTES, params={"scope": "user", "limit": 5, "offset": 5}).json()
    assert first["total"] == second["total"] == 7
    assert len(first["data"]) == 5 and len(second["data"]) == 2
    seen = [n["id"] for n in first["data"] + second["data"]]
    assert sorted(seen) == sorted(ids)
    uses = {n["id"]: n["uses_7d"] for n in first["data"] + second["data"]}
    assert uses[ids[0]] == uses[ids[1]] == 1 and uses[ids[2]] == 0

    found = app.request("GET", NOTES, params={"q": "release tags"}).json()["data"]
    assert found[0]["title"] == "Deploy with make release" and found[0]["score"] > 0
    kettles = app.request("GET", NOTES, params={"q": "kettle", "limit": 5}).json()
    assert len(kettles["data"]) == 5 and kettles["has_more"]  # seven notes match
    rest = app.request("GET", NOTES, params={"q": "kettle", "limit": 5, "offset": 5}).json()
    assert len(rest["data"]) == 2 and not rest["has_more"]
    assert not ({n["id"] for n in rest["data"]} & {n["id"] for n in kettles["data"]})
    assert first["has_more"] and not second["has_more"]
    project = app.request("GET", NOTES, params={"scope": "project",
                                               "project": "demo-111b1182"}).json()
    assert [n["kind"] for n in project["data"]] == ["runbook"]


@pytest.mark.parametrize("params", [{"scope": "team"}, {"state": "gone"}, {"limit": 0},
                                    {"limit": 500}, {"offset": -1}, {"kind": "poem"}])
def test_a_bad_list_query_is_a_400_that_names_it(app, params):
    response = app.request("GET", NOTES, params=params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_value"


def test_an_edit_lands_as_a_ratified_revision_with_its_diff_in_the_history(app):
    note_id = add(app, "Kettle rule", "Boil water before tea.", kind="rule")
    edited = app.request("PATCH", f"{NOTES}/{note_id}", json={
        "body": "Boil water, then wait a minute before green tea."})
    assert edited.status_code == 200 and edited.json()["note"]["status"] == "ratified"
    detail = app.request("GET", f"{NOTES}/{note_id}").json()
    assert detail["revision"] == 2 and "wait a minute" in detail["file"]
    [change] = detail["history"]
    assert (change["from"], change["to"]) == (1, 2)
    assert "-Boil water before tea." in change["diff"]
    assert "+Boil water, then wait a minute before green tea." in change["diff"]
    assert detail["changelog"][-1]["what"] == "edit"


def test_ratify_pin_archive_and_delete_are_the_stores_own_writes_with_its_refusals(app):
    rule = add(app, "Answer in English", "Always answer in English.", kind="rule")
    fact = add(app, "The office is on floor 3", "Room 301, left of the lift.")
    refused = app.request("POST", f"{NOTES}/{rule}/pin", json={})
    assert refused.status_code == 409 and "not_ratified" in refused.json()["error"]["code"]
    assert app.request("POST", f"{NOTES}/{rule}/ratify", json={}).json()["note"]["status"] \
        == "ratified"
    assert app.request("POST", f"{NOTES}/{rule}/pin", json={}).json()["note"]["pinned"]
    assert app.request("POST", f"{NOTES}/{fact}/pin", json={}).status_code == 409
    assert app.request("POST", f"{NOTES}/{rule}/reject", json={}).status_code == 409
    assert app.request("POST", f"{NOTES}/{fact}/archive", json={"reason": "moved"}).json()[
        "note"]["archived"]
    archived = app.request("GET", NOTES, params={"state": "archived"}).json()["data"]
    assert [n["id"] for n in archived] == [fact]
    assert app.request("DELETE", f"{NOTES}/{fact}").status_code == 200
    assert app.request("GET", f"{NOTES}/{fact}").status_code == 404
    assert app.request("POST", f"{NOTES}/{rule}/explode", json={}).status_code == 404
    assert app.request("DELETE", f"{NOTES}/nosuchnote").status_code == 404
    ops = [(e["op"], e["ok"]) for e in app.request(
        "GET", "/v1/conductor/memory/journal").json()["data"]]
    assert ops[:4] == [("delete", False), ("delete", True), ("user_archive", True),
                       ("reject", False)]
    refusals = app.request("GET", "/v1/conductor/memory/journal",
                           params={"refused": "true"}).json()["data"]
    assert {e["reason"] for e in refusals} == {"not_ratified", "not_a_rule",
                                               "already_ratified", "not_found"}
    # the journal holds ids and codes: no title, no body
    assert "English" not in str(refusals) and "floor" not in str(ops)


def test_the_journal_asked_for_one_user_shows_that_users_entries_only(app):
    """The journal file holds every user's entries: `?user=` (default: the engine's own)
    must show that user's alone, the entries the turn writes (memory off) included."""
    mine = add(app, "Tea at four", "The team has tea at four.")
    theirs = app.memory.store("other").add(title="Bins go out on Tuesday", kind="reference",
                                           body="Green bin on Tuesday.", scope="user",
                                           source="route", has_user_message=True)
    app.chat([{"role": "user", "content": "hi"}], script="Hi.",
             headers={"X-Tandem-Memory": "off"})
    journal = "/v1/conductor/memory/journal"
    eventually(lambda: "memory_off" in {  # journaled after the answer, in a worker thread
        e["op"] for e in app.request("GET", journal).json()["data"]})
    own = app.request("GET", journal).json()
    other = app.request("GET", journal, params={"user": "Other"}).json()
    assert own["user"] == USER and other["user"] == "other"
    assert {e["user"] for e in own["data"]} == {USER}
    assert {e["user"] for e in other["data"]} == {"other"}
    assert mine in {e.get("id") for e in own["data"]}
    assert [e.get("id") for e in other["data"]] == [theirs.note.id]
    assert app.request("GET", journal, params={"user": "nobody"}).json()["data"] == []


def test_a_note_lists_the_requests_it_went_into(app):
    note_id = add(app, "Kettles boil at 100 degrees", "At sea level a kettle boils at 100.")
    _, _, response = app.chat([{"role": "user", "content": "when does my kettle boil?"}],
                              script="It boils at 100.")
    request_id = response.json()["id"]

    def listed() -> bool:  # the uses are journaled after the answer, in a worker thread
        detail = app.request("GET", f"{NOTES}/{note_id}").json()
        return request_id in [r["request_id"] for r in detail["requests"]] \
            and detail["usage"]["total"] >= 1

    eventually(listed)


def test_the_settings_switch_memory_off_for_this_run_and_back(app):
    settings = app.request("GET", "/v1/conductor/memory/settings").json()
    assert settings["memory_mode"] == "on"
    changed = app.request("PUT", "/v1/conductor/memory/settings", json={
        "memory_mode": "off", "writer_mode": "shadow"}).json()
    assert (changed["memory_mode"], changed["writer_mode"]) == ("off", "shadow")
    _, _, off = app.chat([{"role": "user", "content": "hello"}], script="hi")
    assert "x-tandem-memory-token" not in off.headers
    app.request("PUT", "/v1/conductor/memory/settings", json={"memory_mode": "on"})
    _, _, on = app.chat([{"role": "user", "content": "hello again"}], script="hi")
    assert "x-tandem-memory-token" in on.headers
    bad = app.request("PUT", "/v1/conductor/memory/settings", json={"memory_mode": "loud"})
    assert bad.status_code == 400


def test_export_is_a_zip_of_the_users_notes_and_delete_needs_the_name_typed_back(app):
    note_id = add(app, "Garden gate code", "The gate opens with the blue fob.")
    app.chat([{"role": "user", "content": "where is the gate?"}], script="By the shed.")
    exported = app.request("GET", "/v1/conductor/memory/export")
    assert exported.headers["content-type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(exported.content)).namelist()
    assert any(name.endswith(f"--{note_id}.md") for name in names)

    wrong = app.request("POST", "/v1/conductor/memory/delete-user",
                        json={"user": USER, "confirm": "someone"})
    assert wrong.status_code == 400 and app.memory.store(USER).get(note_id) is not None
    assert app.memory.records(USER)
    done = app.request("POST", "/v1/conductor/memory/delete-user",
                       json={"user": USER, "confirm": "Tester"}).json()
    assert done["notes_deleted"] == 1 and done["records_dropped"] >= 1
    assert app.memory.store(USER).get(note_id) is None
    assert not app.memory.records(USER)  # no replay brings the note back


def test_the_context_of_a_session_is_its_next_prompt_part_by_part(template_served, tmp_path,
                                                                  tokenizer):
    app = InProcessApp(template_served, tmp_path, memory_changes=WITH_INDEX)
    add(app, "Kettles boil at 100 degrees", "At sea level a kettle boils at 100.")
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "when does my kettle boil?"}]
    headers = {"X-Tandem-Session": "kitchen"}
    answer, _, _ = app.chat(messages, script="At 100.", headers=headers)
    app.chat([*messages, {"role": "assistant", "content": answer},
              {"role": "user", "content": "and on a hill?"}], script="Lower.", headers=headers)

    sessions = app.request("GET", "/v1/conductor/memory/sessions").json()["data"]
    assert [s["session"] for s in sessions] == ["kitchen"]
    context = app.request("GET", "/v1/conductor/memory/context",
                          params={"session": "kitchen"}).json()
    record = app.memory.latest_record(USER, "kitchen")
    names = [p["name"] for p in context["parts"]]
    assert names[0] == "system prompt and tools" and "shared context" in names
    assert "replayed turns" in names and "matched notes" in names
    assert sum(p["tokens"] for p in context["parts"]) == context["tokens"] == len(record.ids)
    shared = next(p for p in context["parts"] if p["name"] == "shared context")
    assert "Kettles boil at 100 degrees" in shared["text"]
    assert "You are terse." in context["parts"][0]["text"]
    assert 0 < context["cached_tokens"] <= context["tokens"]
    assert all(p["cached_tokens"] <= p["tokens"] for p in context["parts"])
    missing = app.request("GET", "/v1/conductor/memory/context", params={"session": "nope"})
    assert missing.status_code == 404


def test_the_layers_show_entries_with_their_flags_and_the_history_by_day(app):
    app.converse("first message", "first answer")
    files = app.memory.layers(USER).files
    files.working_memory.write_text("# Working memory\n\n## Active Tasks\n"
                                    "- [w-abc123] ship the screen\n"
                                    "- [w-abc124] unverified: the bench is green\n")
    layers = app.request("GET", "/v1/conductor/memory/layers").json()
    entries = {e["id"]: e for e in layers["entries"]}
    assert entries["w-abc123"]["text"] == "ship the screen"
    assert entries["w-abc124"]["unverified"] and not entries["w-abc123"]["unverified"]
    eventually(lambda: app.request("GET", "/v1/conductor/memory/layers").json()[
        "history_days"])
    [day] = app.request("GET", "/v1/conductor/memory/layers").json()["history_days"]
    assert day["turns"] == 1 and day["first_seq"] == 1


def test_the_bench_route_gives_each_runs_summary_and_plots_and_nothing_else(app):
    runs = app.request("GET", "/v1/conductor/bench").json()["data"]
    ledger = next(r for r in runs if r["name"] == "ledger/full")
    assert ledger["plots"] and "misses" in ledger["summary"]
    plot = app.request("GET", f"/v1/conductor/bench/{ledger['plots'][0]}")
    assert plot.status_code == 200 and plot.content.startswith(b"\x89PNG")
    for path in ("../../pyproject.toml", "ledger/../../../README.md", "nope.png"):
        assert app.request("GET", f"/v1/conductor/bench/{path}").status_code == 404
