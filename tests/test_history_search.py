"""The history layer is searchable: the continuous conversation's turns are indexed as
chunks that carry their speaker, their time and a line of the other side, and are found
through the memory route, the admin route, the CLI and the engine's `memory_search`,
and read back by `memory_read`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from conductor.layers.turn_format import Part, Turn, TurnMessage
from conductor.search.chunks import split_markdown
from conductor.search.turn_text import render_turn, turn_markdown
from server.cli.main import main
from tests.inprocess import InProcessApp, eventually

CONTINUOUS = {"conversation": "continuous"}
PARKED = ("I left the car on level 3 of the Harbour Street garage, bay F12.",
          "Noted: level 3, bay F12, Harbour Street.")


def turn(seq: int, said: str, answered: str, offset: int = 0) -> Turn:
    return Turn(seq, datetime(2026, 12, 1, 13, 5, tzinfo=UTC), offset,
                (TurnMessage("user", (Part("text", said),)),
                 TurnMessage("assistant", (Part("text", answered),))))


def test_a_turn_reads_as_a_section_a_speaker_with_its_time_and_the_other_side():
    text = render_turn(turn(12, *PARKED, offset=60))
    assert text.startswith("# Turn 12, Tuesday 1 December 2026, 14:05\n"), "the user's local time"
    chunks = split_markdown(text)
    assert [c.section for c in chunks] == ["Turn 12, Tuesday 1 December 2026, 14:05 > user",
                                           "Turn 12, Tuesday 1 December 2026, 14:05 > assistant"]
    assert PARKED[0] in chunks[0].text and "(answered: Noted: level 3" in chunks[0].text
    assert chunks[1].text.endswith(f"(in reply to: {PARKED[0]})")


def test_a_heading_inside_a_message_stays_in_its_section():
    chunks = split_markdown(render_turn(turn(3, "# Not a heading\nplease", "## nor this")))
    assert len(chunks) == 2 and "\\# Not a heading" in chunks[0].text


def test_a_file_that_is_not_a_turn_has_nothing_to_index():
    assert turn_markdown("{ not json") == "" and turn_markdown(json.dumps({"x": 1})) == ""


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path, memory_changes=CONTINUOUS)


def converse(app: InProcessApp, message: str, script) -> str:
    content, _, response = app.converse(message, script)
    return response.headers["x-tandem-memory-token"]


def synced(app: InProcessApp, served, turns: int) -> None:
    """The index synced once the turns' files are down (written in a worker thread)."""
    folder = app.memory.layers("tester").files.turns_dir
    eventually(lambda: len(list(folder.rglob("*.json"))) == turns)
    search = app.app.state.tandem.search

    def ticked() -> bool:
        # the sync waits while a client request runs on the shared engine (an earlier
        # test's answer still ending): tick until it has run; a turn marked after its
        # file was read is synced again, which is fine
        served.run(search.tick())
        return search.index("tester").count() > 0
    eventually(ticked, timeout=60)


def test_a_question_finds_the_turn_that_answers_it_by_route_and_cli(app, served, tmp_path,
                                                                      capsys):
    converse(app, *PARKED)
    token = converse(app, "My dentist moved the check-up to Thursday at nine.",
                     "Thursday 09:00, the dentist.")
    assert "tester" in app.app.state.tandem.search.stale, "a written turn marks the index"
    synced(app, served, 2)
    found = app.request("GET", "/v1/memory/search", headers={"X-Tandem-Memory-Token": token},
                        params={"q": "where did I park the car", "collection": "history"})
    assert found.status_code == 200, found.text
    top = found.json()["data"][0]
    assert top["collection"] == "history" and "bay F12" in top["text"]
    assert top["section"].startswith("Turn 1, ")
    admin = app.request("GET", "/v1/conductor/memory/search",
                        params={"q": "when is the dentist", "collection": "history"}).json()
    assert "Thursday" in admin["data"][0]["text"]
    app.app.state.tandem.search.index("tester").close()  # the CLI opens the index itself
    assert main(["memory", "search", "garage bay", "--collection", "history", "--json",
                 "--home", str(tmp_path), "--user", "tester"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["source"] == "history" and "F12" in hits[0]["text"]


def latest_record_text(app: InProcessApp) -> str:
    session = app.memory.sessions_of("tester")[0]  # the one conversation
    record = app.memory.latest_record("tester", session)
    return app.app.state.tandem.engine.tokenizer.decode(list(record.ids))


def tool_response(text: str) -> str:
    return text.split("<tool_response>")[-1].split("</tool_response>")[0]


def test_the_model_searches_the_history_and_reads_the_turn_back(app, served):
    converse(app, *PARKED)
    synced(app, served, 1)
    search = json.dumps({"name": "memory_search",
                         "arguments": {"query": "parking garage", "collection": "history"}})
    converse(app, "Where was the car again?", [f"<tool_call>\n{search}\n</tool_call>",
                                               "Level 3."])
    found = tool_response(latest_record_text(app))
    assert "bay F12" in found
    line = next(line for line in found.splitlines() if ". history/" in line)
    ref = line.split(". ", 1)[1].rsplit(" (score", 1)[0]  # <source>/<path>#<section>
    assert "#Turn 1, " in ref
    read = json.dumps({"name": "memory_read", "arguments": {"ref": ref}})
    converse(app, "Read me that turn.", [f"<tool_call>\n{read}\n</tool_call>", "Done."])
    shown = tool_response(latest_record_text(app))
    assert "# Turn 1, " in shown and PARKED[0] in shown
