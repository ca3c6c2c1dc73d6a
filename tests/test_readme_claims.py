"""README claims that had no test of their own (issue 20), on the real app and engine."""

from __future__ import annotations

import pytest

from tests.inprocess import InProcessApp

BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n\n'
         "{title} is worth keeping for later.\n</tandem_memory>")


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def add(app: InProcessApp, title: str, **where):
    result = app.memory.store("tester").add(title=title, body=f"{title}, for the record.",
                                            kind="reference", source="cli",
                                            **({"scope": "user"} | where))
    assert result.ok
    return result.note


def prompt_of(app: InProcessApp, session: str) -> tuple[str, list[str]]:
    record = app.memory.ledger.latest("tester", session)
    text = app.app.state.tandem.engine.tokenizer.decode(list(record.ids))
    return text, [s.kind for s in record.spans]


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def test_shadow_shows_the_card_and_reads_nothing_back(served, tmp_path):
    shadow = InProcessApp(served, tmp_path, memory_mode="shadow")
    add(shadow, "deploy runbook kept in shadow")
    shadow.chat(user("How do I use the deploy runbook?"), "Like this.",
                headers={"X-Tandem-Session": "shadow"})
    text, kinds = prompt_of(shadow, "shadow")
    assert "<tandem_memory" in text  # the card: shadow still writes
    assert "deploy runbook kept in shadow" not in text and "notes" not in kinds


def test_the_read_header_reads_notes_and_drops_blocks(app):
    add(app, "deploy runbook for readers")
    content, _, _ = app.chat(user("Where is the deploy runbook for readers?"),
                             "Here. " + BLOCK.format(title="written while reading"),
                             headers={"X-Tandem-Session": "read", "X-Tandem-Memory": "read"})
    text, kinds = prompt_of(app, "read")
    assert "deploy runbook for readers" in text and "notes" in kinds  # index and matches
    assert "<tandem_memory op=" not in text.split("<|im_start|>assistant")[0]  # no card
    assert "tandem_memory" not in content and "› remembered" not in content  # dropped
    assert [n.title for n in app.memory.store("tester").list()] == ["deploy runbook for readers"]


def test_x_tandem_user_from_an_untrusted_address_is_ignored(app):
    app.chat(user("Remember this."), "Ok. " + BLOCK.format(title="from loopback"),
             headers={"X-Tandem-User": "mallory", "X-Tandem-Session": "who"})
    assert [n.title for n in app.memory.store("tester").list()] == ["from loopback"]
    assert app.memory.store("mallory").list() == []


def test_x_tandem_project_scopes_notes(app):
    add(app, "alpha service port", scope="project", project="/work/alpha")
    app.chat(user("hi"), "Hi.", headers={"X-Tandem-Session": "p-a",
                                         "X-Tandem-Project": "/work/alpha"})
    app.chat(user("hi"), "Hi.", headers={"X-Tandem-Session": "p-b",
                                         "X-Tandem-Project": "/work/beta"})
    assert "alpha service port" in prompt_of(app, "p-a")[0]
    assert "alpha service port" not in prompt_of(app, "p-b")[0]


def test_memory_routes_answer_403_without_a_token(app):
    note = add(app, "a note behind a token")
    assert app.request("GET", f"/v1/memory/{note.id}").status_code == 403
    assert app.request("POST", "/v1/memory", json={
        "op": "add", "scope": "user", "kind": "reference", "title": "x"}).status_code == 403
    assert app.request("GET", "/v1/memory/search", params={"q": "note"}).status_code == 403


def test_admin_routes_refuse_remote_writes(served, tmp_path):
    remote = InProcessApp(served, tmp_path, client_host="192.0.2.9")
    assert remote.request("PUT", "/v1/conductor/writer", json={"mode": "on"}).status_code == 403
    assert remote.request("POST", "/v1/conductor/writer/run",
                          json={"session": "s"}).status_code == 403


@pytest.mark.parametrize("thinking", [True, False])
def test_enable_thinking_changes_the_prompt(app, thinking):
    session = f"think-{thinking}"
    app.chat(user("hi"), "Hi.", headers={"X-Tandem-Session": session},
             chat_template_kwargs={"enable_thinking": thinking})
    record = app.memory.ledger.latest("tester", session)
    tokenizer = app.app.state.tandem.engine.tokenizer
    text = tokenizer.decode(list(record.ids))
    prompt = text[: text.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")]
    answer = text[len(prompt):]
    # Thinking off: the template closes an empty think block for the model.
    assert answer.startswith("<think>\n\n</think>\n\n") != thinking


def test_the_writer_idle_wait_and_the_nightly_hour_come_from_the_environment(
        monkeypatch, tmp_path):
    from server.memory import MemoryServices, MemorySettings

    monkeypatch.setenv("TANDEM_WRITER_IDLE_S", "7.5")
    monkeypatch.setenv("TANDEM_NIGHTLY_HOUR", "5")
    services = MemoryServices(tmp_path)
    assert services.triggers.idle_s == 7.5
    assert MemorySettings().nightly_hour == 5
    monkeypatch.delenv("TANDEM_WRITER_IDLE_S")
    monkeypatch.delenv("TANDEM_NIGHTLY_HOUR")
    assert MemoryServices(tmp_path).triggers.idle_s == 180.0
    assert MemorySettings().nightly_hour == 3
