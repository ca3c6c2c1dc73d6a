"""A miss keeps what came before it (real engine, scripted answers, each test once a chat
template): when the client changes a message the ledger's record goes on past, the new
prompt starts with the record's exact ids up to that message, every hidden part before it
included, and only the messages from the change on are prefilled."""

from __future__ import annotations

import uuid

import pytest

from tests.inprocess import InProcessApp

SYSTEM = {"role": "system", "content": "You are a terse assistant for the ops team."}


@pytest.fixture
def app(template_app) -> InProcessApp:
    return template_app


class Chat:
    """One conversation with a session of its own."""

    def __init__(self, app: InProcessApp) -> None:
        self.app = app
        self.headers = {"X-Tandem-Session": f"miss-{uuid.uuid4().hex[:8]}"}
        self.history: list[dict] = [SYSTEM]

    def turn(self, question: str, answer: str, **headers) -> dict:
        self.history.append({"role": "user", "content": question})
        content, usage, _ = self.app.chat(self.history, answer,
                                          headers={**self.headers, **headers})
        self.history.append({"role": "assistant", "content": content})
        return usage

    def record(self):
        return self.app.memory.latest_record("tester", self.headers["X-Tandem-Session"])


def add_note(app: InProcessApp, title: str) -> str:
    result = app.memory.store("tester").add(
        title=title, body=f"{title}: run make release from the main branch.",
        kind="runbook", scope="user", source="cli", has_user_message=True)
    assert result.ok
    return result.note.id


def test_an_edit_of_message_5_keeps_every_hidden_part_before_it(app, tiny_profile):
    tag = uuid.uuid4().hex[:6]
    note = add_note(app, f"release steps {tag}")
    chat = Chat(app)
    chat.turn("Hello, what can you do?", "I help with ops.")
    usage = chat.turn(f"How do the release steps {tag} go?", "Run make release.")
    before_edit = chat.record()  # system, card, two turns, the release note after turn 2
    assert note in {i for s in before_edit.spans if s.kind == "notes" for i in s.note_ids}
    for n in range(3, 8):  # seven turns: the records that end at turn 2 are long gone
        chat.turn(f"Question {n} about the deploys?", f"Answer {n}.")
    edited = [*chat.history[:5], {"role": "user", "content": "Edited question 3, instead?"}]
    _, again, _ = app.chat(edited, "Edited answer.", headers=chat.headers)
    floor = usage["prompt_tokens"] + usage["completion_tokens"] - tiny_profile.block_size
    assert again["prompt_tokens_details"]["cached_tokens"] >= floor, (again, usage)
    after = chat.record()
    assert list(after.ids[: len(before_edit.ids)]) == list(before_edit.ids)  # ids for ids
    assert set(before_edit.spans) <= set(after.spans)  # the card and the note, in place
    assert [s.kind for s in after.spans].count("shared") == 1


def test_an_edit_right_after_the_system_prompt_keeps_the_card(app, tiny_profile):
    chat = Chat(app)
    chat.turn("Hello there.", "Hi.")
    chat.turn("Second question?", "Second answer.")
    first = app.memory.records("tester", chat.headers["X-Tandem-Session"])[0]
    (shared,) = [s for s in first.spans if s.kind == "shared"]
    _, usage, _ = app.chat([SYSTEM, {"role": "user", "content": "Hello, edited."}], "Hi!",
                           headers=chat.headers)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= (shared.end
                                                               - tiny_profile.block_size)
    after = chat.record()
    assert list(after.ids[: shared.end]) == list(first.ids[: shared.end])
    assert [s.kind for s in after.spans].count("shared") == 1


@pytest.mark.parametrize("mode", ["on", "shadow"])
def test_a_memory_off_request_between_turns_neither_strips_nor_leaks_memory(
        template_served, tmp_path, tiny_profile, mode):
    # in shadow mode no engine tool is offered: the off request's messages are the same
    app = InProcessApp(template_served, tmp_path, memory_mode=mode)
    chat = Chat(app)
    first = chat.turn("Hello there.", "Hi.")
    assert "shared" in [s.kind for s in chat.record().spans]
    chat.turn("A private one.", "Sure.", **{"X-Tandem-Memory": "off"})
    off = chat.record()
    tokenizer = app.app.state.tandem.engine.tokenizer
    # the card is not replayed into an off request
    assert "tandem_memory" not in tokenizer.decode(list(off.ids))
    assert off.spans == () and off.bare
    _, usage, _ = app.chat([*chat.history, {"role": "user", "content": "Back on."}], "Ok.",
                           headers=chat.headers)
    floor = first["prompt_tokens"] + first["completion_tokens"] - tiny_profile.block_size
    assert usage["prompt_tokens_details"]["cached_tokens"] >= floor
    assert [s.kind for s in chat.record().spans].count("shared") == 1  # the card is back
