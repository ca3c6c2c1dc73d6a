"""A note corrected elsewhere reaches the open conversations that hold it (real engine,
scripted answers, each test once a chat template): the next turn carries the new text (or
"archived: <title>") hidden after its new message, once, and the replayed prompt before it
stays as it was, served from the prefix cache."""

from __future__ import annotations

import uuid

import pytest

from tests.inprocess import InProcessApp


@pytest.fixture
def app(template_app) -> InProcessApp:
    return template_app


class Chat:
    def __init__(self, app: InProcessApp) -> None:
        self.app = app
        self.session = f"fix-{uuid.uuid4().hex[:8]}"
        self.history: list[dict] = []
        self.previous: dict | None = None

    def turn(self, question: str, answer: str, block_size: int) -> dict:
        self.history.append({"role": "user", "content": question})
        content, usage, _ = self.app.chat(self.history, answer,
                                          headers={"X-Tandem-Session": self.session})
        self.history.append({"role": "assistant", "content": content})
        if self.previous is not None:  # the replay stays: every earlier id in place
            floor = (self.previous["prompt_tokens"] + self.previous["completion_tokens"]
                     - block_size)
            assert usage["prompt_tokens_details"]["cached_tokens"] >= floor, usage
        self.previous = usage
        return usage

    def record(self):
        return self.app.memory.latest_record("tester", self.session)

    def corrections(self) -> list:
        return [s for s in self.record().spans if s.kind == "correction"]

    def text(self) -> str:
        return self.app.app.state.tandem.engine.tokenizer.decode(list(self.record().ids))


def test_an_updated_then_archived_note_reaches_the_open_conversation_once_each(
        app, tiny_profile):
    block = tiny_profile.block_size
    tag = uuid.uuid4().hex[:6]
    store = app.memory.store("tester")
    added = store.add(title=f"release steps {tag}", body=f"release {tag} with make release "
                      "from the main branch", kind="runbook", scope="user", source="cli",
                      has_user_message=True)
    note = added.note.id
    chat = Chat(app)
    chat.turn(f"How do the release steps {tag} go from the main branch?", "Make release.",
              block)
    assert note in {i for s in chat.record().spans if s.kind == "notes" for i in s.note_ids}

    assert store.edit(note, body=f"release {tag} with make ship from the release branch").ok
    chat.turn("Thanks, anything else?", "No.", block)
    (fix,) = chat.corrections()
    assert fix.note_ids == (note,) and "make ship from the release branch" in chat.text()
    chat.turn("Good.", "Ok.", block)
    assert len(chat.corrections()) == 1  # once

    assert store.user_archive(note).ok
    chat.turn("One more thing?", "Yes.", block)
    assert len(chat.corrections()) == 2 and f"archived: release steps {tag}" in chat.text()
    chat.turn("Done.", "Bye.", block)
    assert len(chat.corrections()) == 2


def test_an_unchanged_note_sends_no_update(app, tiny_profile):
    tag = uuid.uuid4().hex[:6]
    app.memory.store("tester").add(
        title=f"backup window {tag}", body=f"backups {tag} run nightly at two",
        kind="reference", scope="user", source="cli", has_user_message=True)
    chat = Chat(app)
    chat.turn(f"When does the backup window {tag} run nightly?", "At two.",
              tiny_profile.block_size)
    for n in range(2):
        chat.turn(f"And {n}?", "Same.", tiny_profile.block_size)
    assert chat.corrections() == []
