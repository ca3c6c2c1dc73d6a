"""The layer files on their own: history turns, their format and quarantine, the replay
window, the time line, working memory and the core templates."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from conductor.layers.conversation import (
    WindowBounds,
    replay_window,
    system_text,
    time_line,
)
from conductor.layers.core import CORE_FILES, ensure_core, read_core
from conductor.layers.history import HistoryStore
from conductor.layers.paths import LayerFiles
from conductor.layers.sections import Entry, entry_id
from conductor.layers.state import ConversationState, read_state, write_state
from conductor.layers.turn_format import (
    SCHEMA_VERSION,
    Part,
    Turn,
    TurnFormatError,
    TurnMessage,
    parse_turn,
)
from conductor.layers.working import SECTIONS, parse_working_memory, render_working_memory

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def turn(seq: int, user: str = "hello", answer: str = "hi", at: datetime = T0) -> Turn:
    return Turn(seq, at, 60, (TurnMessage("user", (Part("text", user),)),
                              TurnMessage("assistant", (Part("text", answer),))))


@pytest.fixture
def files(tmp_path) -> LayerFiles:
    return LayerFiles(tmp_path, "ada")


def test_a_turn_round_trips_through_its_json_with_every_part_type():
    parts = (Part("reasoning", "think"), Part("text", "answer"),
             Part("tool_call", name="f", arguments='{"a": 1}', call_id="c1"),
             Part("status", "\n\n› remembered: x"))
    original = Turn(7, T0, -300, (
        TurnMessage("user", (Part("text", "q"), Part("hidden", kind="notes", note_ids=("n1",)))),
        TurnMessage("assistant", parts),
        TurnMessage("tool", (Part("tool_result", "42", call_id="c1"),))), interrupted=True)
    again = parse_turn(json.loads(json.dumps(original.to_json())))
    assert again == original
    assert again.messages[1].shown() == "answer\n\n› remembered: x"
    assert again.messages[1].text() == "answer"


def test_a_schema_1_turn_is_upgraded_on_read():
    old = {"schema_version": 1, "seq": 3, "time": "2026-01-02T03:04:05Z",
           "user": "old question", "assistant": "old answer"}
    upgraded = parse_turn(old)
    assert upgraded.schema_version == 1 and upgraded.to_json()["schema_version"] == SCHEMA_VERSION
    assert upgraded.user_text == "old question"
    assert upgraded.messages[1].shown() == "old answer"


@pytest.mark.parametrize("raw", [
    [], {"seq": 1}, {"schema_version": "2"}, {"schema_version": 2, "seq": "x"},
    {"schema_version": 2, "seq": 1, "time": "yesterday", "messages": []},
    {"schema_version": 2, "seq": 1, "time": "2026-01-01T00:00:00Z", "messages": [{"role": "x"}]},
    {"schema_version": 2, "seq": 1, "time": "2026-01-01T00:00:00Z",
     "messages": [{"role": "user", "parts": [{"type": "tool_call", "name": "f"}]}]},
], ids=["list", "no-version", "string-version", "bad-seq", "bad-time", "bad-role",
        "call-without-arguments"])
def test_a_malformed_turn_is_refused_with_a_reason(raw):
    with pytest.raises(TurnFormatError):
        parse_turn(raw)


def test_turns_are_files_by_utc_day_and_numbering_continues_in_a_new_store(files):
    store = HistoryStore(files)
    store.append(lambda seq: turn(seq))
    store.append(lambda seq: turn(seq, at=T0 + timedelta(days=1)))
    assert (files.turns_dir / "2026/11/30/00000001.json").is_file()
    assert (files.turns_dir / "2026/12/01/00000002.json").is_file()
    again = HistoryStore(files)  # a restart
    assert again.last_seq == 2
    assert again.append(lambda seq: turn(seq)).seq == 3
    assert [t.seq for t in again.turns_after(1)] == [2, 3]


def test_a_reserved_turn_is_readable_before_its_file_is_written(files):
    store = HistoryStore(files)
    reserved = store.reserve(lambda seq: turn(seq, "soon"))
    assert not list(files.user_dir.rglob("*.json"))
    assert store.turns_after(0) == [reserved] and store.last_seq == 1
    store.write(reserved)
    assert HistoryStore(files).read(1) == reserved


def test_an_unreadable_turn_is_quarantined_and_reported_never_lost(files):
    store = HistoryStore(files)
    store.append(lambda seq: turn(seq, "kept"))
    bad = files.turns_dir / "2026/11/30/00000002.json"
    bad.write_text("{not json")
    stray = files.turns_dir / "2026/11/30/notes.txt"
    stray.write_text("someone's file")
    reports: list[tuple[str, str]] = []
    again = HistoryStore(files, on_quarantine=lambda name, why: reports.append((name, why)))
    assert [t.user_text for t in again.turns_after(0)] == ["kept"]
    assert not bad.exists() and not stray.exists()
    assert (files.quarantine_dir / "2026/11/30/00000002.json").read_text() == "{not json"
    assert (files.quarantine_dir / "2026/11/30/notes.txt").read_text() == "someone's file"
    assert sorted(name for name, _ in reports) == ["2026/11/30/00000002.json",
                                                  "2026/11/30/notes.txt"]
    assert again.quarantined() == ["2026/11/30/00000002.json", "2026/11/30/notes.txt"]
    assert again.append(lambda seq: turn(seq)).seq == 2  # the number is free again


def test_a_turn_of_a_newer_schema_is_left_in_place_and_not_loaded(files):
    future = files.turns_dir / "2026/11/30/00000001.json"
    future.parent.mkdir(parents=True)
    future.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "seq": 1}))
    reports = []
    store = HistoryStore(files, on_quarantine=lambda name, why: reports.append(why))
    assert store.turns_after(0) == []
    assert future.exists() and "newer" in reports[0]


def test_history_pages_backwards_from_a_turn(files):
    store = HistoryStore(files)
    for _ in range(5):
        store.append(lambda seq: turn(seq, f"m{seq}"))
    assert [t.seq for t in store.page(None, 2)] == [4, 5]
    assert [t.seq for t in store.page(4, 2)] == [2, 3]
    assert [t.seq for t in store.page(2, 10)] == [1]


def test_the_replay_window_keeps_every_turn_while_within_its_bounds():
    turns = [turn(i) for i in range(1, 5)]
    window, state = replay_window(turns, ConversationState(), WindowBounds(4, 1000), len)
    assert window == turns and state == ConversationState()


def test_an_outgrown_window_drops_the_oldest_to_half_its_turn_bound_and_stays_there():
    turns = [turn(i) for i in range(1, 6)]
    window, state = replay_window(turns, ConversationState(), WindowBounds(4, 10_000), len)
    assert [t.seq for t in window] == [4, 5] and state.replay_from_seq == 4
    more = [*turns, turn(6)]  # the next message: no move, the prefix stays the same
    window, again = replay_window(more, state, WindowBounds(4, 10_000), len)
    assert [t.seq for t in window] == [4, 5, 6] and again == state


def test_an_outgrown_window_drops_the_oldest_to_half_its_token_bound():
    turns = [turn(i, "x" * 40, "y" * 40) for i in range(1, 5)]  # 80 "tokens" each (len)
    window, state = replay_window(turns, ConversationState(), WindowBounds(100, 300), len)
    assert [t.seq for t in window] == [4] and state.replay_from_seq == 4


def test_the_window_starts_after_the_consolidation_checkpoint():
    turns = [turn(i) for i in range(1, 6)]
    window, _ = replay_window(turns, ConversationState(checkpoint_seq=3), WindowBounds(9, 999),
                              len)
    assert [t.seq for t in window] == [4, 5]


def test_the_state_survives_a_restart_and_a_damaged_state_file_reads_as_new(files):
    write_state(files, ConversationState(2, 5))
    assert read_state(files) == ConversationState(2, 5)
    (files.state_dir / "conversation.json").write_text("{")
    assert read_state(files) == ConversationState()


@pytest.mark.parametrize("gap, said", [
    (timedelta(seconds=20), "Less than a minute since"),
    (timedelta(minutes=1), "1 minute since"),
    (timedelta(hours=2, minutes=5), "2 hours 5 minutes since"),
    (timedelta(days=3, hours=1, minutes=9), "3 days 1 hour since"),
])
def test_the_time_line_says_the_local_time_and_the_gap(gap, said):
    line = time_line(T0, 60, T0 - gap)
    assert line.startswith("Local time: Monday 30 November 2026, 10:00 (UTC+01:00).")
    assert said in line


def test_the_first_messages_time_line_says_so_and_negative_offsets_show():
    line = time_line(T0, -330, None)
    assert "03:30 (UTC-05:30)" in line and "first message" in line


def test_working_memory_has_its_fixed_sections_in_order_and_parses_back():
    task = Entry("w-00aa11", "ship the layers")
    text = render_working_memory({"Active Tasks": [task], "Other": [Entry("w-ffffff", "lost")]})
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == list(SECTIONS)
    parsed = parse_working_memory(text + "\n## Notes of mine\n- not a section\n")
    assert parsed["Active Tasks"] == [task]
    assert all(not v for k, v in parsed.items() if k != "Active Tasks")


def test_an_entry_keeps_its_id_through_a_rewrite_and_a_hand_written_bullet_gets_one():
    text = "# Working memory\n\n## Open Threads\n- [w-00aa11] first words\n- by hand\n"
    parsed = parse_working_memory(text)["Open Threads"]
    assert parsed[0] == Entry("w-00aa11", "first words")
    assert parsed[1].id == entry_id("w", "Open Threads", "by hand")
    again = parse_working_memory(render_working_memory({"Open Threads": parsed}))
    assert again["Open Threads"] == parsed


def test_core_files_come_from_templates_once_and_an_operators_change_stands(files):
    assert ensure_core(files)
    (files.core_dir / "AGENT.md").write_text("# Agent\n\nAnswer in haiku.\n")
    (files.core_dir / "USER.md").unlink()
    assert not ensure_core(files)
    core = {f.name: f.text for f in read_core(files)}
    assert core["AGENT.md"] == "# Agent\n\nAnswer in haiku.\n" and core["USER.md"] == ""
    assert not (files.core_dir / "USER.md").exists()
    text = system_text(read_core(files))
    assert [text.index(f"## {name}") for name in CORE_FILES] == sorted(
        text.index(f"## {name}") for name in CORE_FILES)
    assert "Answer in haiku." in text


def test_a_user_name_that_could_leave_the_layers_folder_is_refused(tmp_path):
    with pytest.raises(ValueError):
        LayerFiles(tmp_path, "../etc")
