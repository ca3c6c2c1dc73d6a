"""A restart keeps the memory state a user relies on: the session's token (a script
holding one is not locked out, and the card that holds it does not change), the notes
already injected, and the ledger's records, so an open conversation's next turn starts
with its last prompt's exact ids: its hidden notes where they went in.

The restart is two apps on one home over the session's engine: the first app's ledger
saver stops as its lifespan's end stops it, the second app loads what was saved. The
engine (and so its prefix cache) stays up, so a prompt re-rendered after the restart
rather than replayed shows as the cache miss it would be on any engine.
"""

from __future__ import annotations

import asyncio
import uuid

from conductor.ledger.files import LedgerFiles
from server.turn.memory import TOKEN_HEADER
from tests.inprocess import InProcessApp

QUESTION = "how do the friday deploys go out after the review"


def test_a_restart_keeps_the_session_token_the_injected_notes_and_the_ledger(
        template_served, tmp_path, tiny_profile):
    served = template_served  # once a chat template
    home = tmp_path / "home"
    first = InProcessApp(served, home)
    note = first.memory.store("tester").add(
        title="Friday deploys", body="Friday deploys go out after the review, before 16:00.",
        kind="runbook", scope="user")
    assert note.ok
    session = f"restart-{uuid.uuid4().hex[:8]}"
    headers = {"X-Tandem-Session": session}
    messages = [{"role": "user", "content": QUESTION}]
    answer, _, _ = first.chat(messages, "After the review.", headers=headers)
    record = first.memory.latest_record("tester", session)
    injected = [s for s in record.spans if s.kind == "notes"]
    assert injected and note.note.id in injected[0].note_ids, "the note went in"
    token = first.memory.token_for("tester", session)
    first.memory.save_now()  # what the end of the app's lifespan does

    second = InProcessApp(served, home)  # the restart
    again = second.memory.latest_record("tester", session)
    assert again is not None, "the record is back"
    assert list(again.ids) == list(record.ids) and again.spans == record.spans
    assert second.memory.token_for("tester", session) == token, "the card stays the same"
    found = second.request("GET", f"/v1/memory/{note.note.id}", headers={TOKEN_HEADER: token})
    assert found.status_code == 200, "a script holding the token is not locked out"

    follow_up = [*messages, {"role": "assistant", "content": answer},
                 {"role": "user", "content": "and on a bank holiday?"}]
    _, usage, _ = second.chat(follow_up, "Monday then.", headers=headers)
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    # replayed: the new prompt opens with the last prompt and answer, ids for ids
    assert cached >= len(record.ids) - tiny_profile.block_size
    latest = second.memory.latest_record("tester", session)
    assert list(latest.ids[: len(record.ids)]) == list(record.ids)
    assert [s for s in latest.spans if s.kind == "notes"][0] == injected[0], (
        "the note is where it went in, not injected a second time")


def test_a_restart_on_another_chat_template_renders_each_conversation_afresh_once(
        served, _template_apps, tmp_path, caplog):
    """The ledger's files carry the fingerprint of the model, tokenizer and template that
    made them: after a restart on another template the next turn is rendered with that
    template (its ids would be another template's), once, and the log says so."""
    import logging

    home = tmp_path / "home"
    first = InProcessApp(_template_apps("qwen3"), home)
    messages = [{"role": "user", "content": QUESTION}]
    session = {"X-Tandem-Session": "moved"}
    answer, _, _ = first.chat(messages, "After the review.", headers=session)
    first.memory.save_now()
    with caplog.at_level(logging.INFO, logger="tandem.server"):
        second = InProcessApp(served, home)  # the embedded template on the same home
    assert "ledger: 1 saved records were made under another model" in caplog.text
    follow = [*messages, {"role": "assistant", "content": answer},
              {"role": "user", "content": "and on a bank holiday?"}]
    _, usage, _ = second.chat(follow, "Monday then.", headers=session)
    record = second.memory.latest_record("tester", "moved")
    assert record.fingerprint == served.app.state.tandem.engine.fingerprint
    assert [s.kind for s in record.spans].count("shared") == 1  # rendered afresh: the card
    third = [*follow, {"role": "assistant", "content": "Monday then."},
             {"role": "user", "content": "thanks"}]
    _, again, _ = second.chat(third, "Welcome.", headers=session)
    floor = usage["prompt_tokens"] + usage["completion_tokens"] - 32
    assert again["prompt_tokens_details"]["cached_tokens"] >= floor  # once, then replayed


def test_the_ledger_saver_writes_behind_and_a_stop_writes_the_last(served, tmp_path):
    app = InProcessApp(served, tmp_path / "home")
    files = LedgerFiles(app.memory.root)
    saver = app.memory._saver

    def turn(session: str) -> None:
        app.chat([{"role": "user", "content": "hello there"}], "Hi.",
                 headers={"X-Tandem-Session": session})

    async def run_for(seconds: float) -> None:  # as the app's lifespan runs it
        task = asyncio.create_task(saver.run())
        await asyncio.sleep(seconds)
        task.cancel()

    saver.interval = 0.1
    turn("behind")
    assert not files.path_for(("tester", "behind")).exists()
    served.run(run_for(0.5))
    assert files.path_for(("tester", "behind")).exists(), "written within its interval"
    assert files.path_for(("tester", "behind")).stat().st_mode & 0o777 == 0o600

    turn("last")
    assert not files.path_for(("tester", "last")).exists()
    saver.save_now()  # what the end of the app's lifespan does
    assert files.path_for(("tester", "last")).exists(), "the stop wrote the last records"


def test_the_ledger_saver_waits_while_clients_run_but_not_past_its_limit(served, tmp_path,
                                                                        monkeypatch):
    import conductor.ledger.files as ledger_files

    app = InProcessApp(served, tmp_path / "home")
    files = LedgerFiles(app.memory.root)
    saver = app.memory._saver
    saver.interval = 0.05
    saver.busy = lambda: True  # clients running all the while
    monkeypatch.setattr(ledger_files, "MAX_DEFER_S", 0.6)
    app.chat([{"role": "user", "content": "hello there"}], "Hi.",
             headers={"X-Tandem-Session": "busy"})

    async def run_for(seconds: float) -> None:
        task = asyncio.create_task(saver.run())
        await asyncio.sleep(seconds)
        task.cancel()

    served.run(run_for(0.3))
    assert not files.path_for(("tester", "busy")).exists(), "no save while clients run"
    served.run(run_for(0.9))
    assert files.path_for(("tester", "busy")).exists(), "saved once the deferral ran out"


BLOCK = ('<tandem_memory op="add" scope="user" kind="reference">\ntitle: {title}\n\n'
         "{title} is a fact worth keeping.\n</tandem_memory>")


def test_after_a_restart_a_status_line_sent_back_on_a_miss_is_still_taken_off(
        template_served, tmp_path):
    served = template_served  # once a chat template
    home = tmp_path / "home"
    first = InProcessApp(served, home)
    title = f"cache host {uuid.uuid4().hex[:6]}"
    messages = [{"role": "user", "content": "Remember the cache host."}]
    shown, _, _ = first.chat(messages, "Noted. " + BLOCK.format(title=title),
                             headers={"X-Tandem-Session": "before"})
    assert shown.endswith(f"› remembered: {title}")
    first.memory.save_now()

    second = InProcessApp(served, home)  # the restart; another session: a miss
    follow_up = [*messages, {"role": "assistant", "content": shown},
                 {"role": "user", "content": "Thanks."}]
    second.chat(follow_up, "Ok.", headers={"X-Tandem-Session": "after"})
    text = served.app.state.tandem.engine.tokenizer.decode(
        list(second.memory.latest_record("tester", "after").ids))
    assert "Noted." in text and "› remembered" not in text
