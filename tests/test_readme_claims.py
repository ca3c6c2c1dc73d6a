"""Claims of the user docs (README.md, docs/) that had no test of their own (issue 20),
on the real app and engine."""

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
    record = app.memory.latest_record("tester", session)
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
    ask = user("which port does the alpha service listen on?")  # it matches the note
    app.chat(ask, "That one.", headers={"X-Tandem-Session": "p-a",
                                        "X-Tandem-Project": "/work/alpha"})
    app.chat(ask, "That one.", headers={"X-Tandem-Session": "p-b",
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
    record = app.memory.latest_record("tester", session)
    tokenizer = app.app.state.tandem.engine.tokenizer
    text = tokenizer.decode(list(record.ids))
    prompt = text[: text.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")]
    answer = text[len(prompt):]
    # Thinking off: the template closes an empty think block for the model.
    assert answer.startswith("<think>\n\n</think>\n\n") != thinking


def test_the_writer_idle_wait_and_the_nightly_hour_come_from_the_environment(
        monkeypatch, tmp_path):
    from conductor.memory.services import MemoryServices
    from conductor.memory.settings import MemorySettings

    monkeypatch.setenv("TANDEM_WRITER_IDLE_S", "7.5")
    monkeypatch.setenv("TANDEM_NIGHTLY_HOUR", "5")
    services = MemoryServices(tmp_path)
    assert services.idle.triggers.idle_s == 7.5
    assert MemorySettings().nightly_hour == 5
    monkeypatch.delenv("TANDEM_WRITER_IDLE_S")
    monkeypatch.delenv("TANDEM_NIGHTLY_HOUR")
    assert MemoryServices(tmp_path).idle.triggers.idle_s == 180.0
    assert MemorySettings().nightly_hour == 3


def test_a_project_scoped_block_is_filed_under_the_headers_project(app):
    from conductor.storage.paths import project_key

    title = "bazel is the build tool here"
    block = BLOCK.format(title=title).replace('scope="user"', 'scope="project"')
    content, _, _ = app.chat(user("How do we build?"), "With bazel. " + block,
                             headers={"X-Tandem-Session": "pw-alpha",
                                      "X-Tandem-Project": "/work/alpha"})
    assert content.endswith(f"› remembered: {title}")
    (note,) = app.memory.store("tester").list()
    key, absolute = project_key("/work/alpha")
    assert (note.scope, note.project, note.project_path) == ("project", key, absolute)
    # The file lands in the project's own folder of the memory tree.
    assert note.path.parent == app.memory.root / "notes" / "tester" / "projects" / key
    assert note.path.exists()
    for session, project in (("pw-alpha-2", "/work/alpha"), ("pw-beta", "/work/beta"),
                             ("pw-none", None)):
        headers = {"X-Tandem-Session": session} | (
            {"X-Tandem-Project": project} if project else {})
        app.chat(user("Which build tool is used here?"), "Let me see.", headers=headers)
    assert title in prompt_of(app, "pw-alpha-2")[0]  # the project's next session has it
    assert title not in prompt_of(app, "pw-beta")[0]  # another project's has not
    assert title not in prompt_of(app, "pw-none")[0]  # nor a session of no project


NIGHTLY_HOUR = 5


def start_at_nightly_hour_less(monkeypatch, lead_s: float) -> float:
    """Moves the wall clock the nightly scheduler reads (`conductor.cognition.nightly.datetime`) so
    that it reads NIGHTLY_HOUR:00 local in `lead_s` seconds; returns that moment on the
    monotonic clock. (The app offers no clock of its own for its nightly loop.)"""
    import time
    from datetime import datetime, timedelta

    import conductor.cognition.nightly

    real = datetime.now()
    hour_at = time.monotonic() + lead_s
    offset = (real.replace(hour=NIGHTLY_HOUR, minute=0, second=0, microsecond=0)
              - timedelta(seconds=lead_s) - real)

    class Shifted(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + offset

    monkeypatch.setattr(conductor.cognition.nightly, "datetime", Shifted)
    return hour_at


def nightly_runs(memory_root) -> int:
    journal = memory_root / "journal.jsonl"
    if not journal.exists():
        return 0
    return journal.read_text().count('"op": "nightly"')


def serve_without_an_engine(monkeypatch, tmp_path, hour: int):
    """The real app and its lifespan, the engine's load replaced by nothing: the nightly
    loop needs no engine."""
    import server.app
    from conductor.memory.settings import MemorySettings
    from engine.profiles import load_profile

    async def no_engine(*_args) -> None:
        return None

    monkeypatch.setattr(server.app, "_load_engine", no_engine)
    app = server.app.create_app(load_profile("tiny"), tmp_path, memory_settings=MemorySettings(
        user_name="tester", nightly_hour=hour))
    memory = app.state.tandem.memory
    assert memory.store("tester").add(title="tea over coffee", body="The user drinks tea.",
                                      kind="reference", scope="user", source="cli").ok
    return app, memory


async def watch_for_nightly(app, memory_root, seconds: float) -> float | None:
    """Runs the app's lifespan for up to `seconds`; when the first nightly run was seen
    (monotonic), or None."""
    import asyncio
    import time

    deadline = time.monotonic() + seconds
    async with app.router.lifespan_context(app):
        while time.monotonic() < deadline:
            if nightly_runs(memory_root):
                return time.monotonic()
            await asyncio.sleep(0.02)
    return None


def test_the_server_runs_the_nightly_job_when_the_clock_reaches_the_configured_hour(
        monkeypatch, tmp_path):
    import asyncio

    app, memory = serve_without_an_engine(monkeypatch, tmp_path, NIGHTLY_HOUR)
    index_md = memory.root / "notes" / "tester" / "INDEX.md"
    assert not index_md.exists() and nightly_runs(memory.root) == 0
    hour_at = start_at_nightly_hour_less(monkeypatch, lead_s=1.5)
    seen_at = asyncio.run(watch_for_nightly(app, memory.root, seconds=30))
    assert seen_at is not None, "the server ran no nightly job at its hour"
    assert seen_at >= hour_at - 0.05, f"ran {hour_at - seen_at:.2f} s before the hour"
    assert "tea over coffee" in index_md.read_text()  # the nightly job's own work
    assert nightly_runs(memory.root) == 1  # once, not again at once


def test_the_server_runs_no_nightly_job_when_the_clock_reaches_another_hour(
        monkeypatch, tmp_path):
    import asyncio

    app, memory = serve_without_an_engine(monkeypatch, tmp_path, NIGHTLY_HOUR + 1)
    start_at_nightly_hour_less(monkeypatch, lead_s=0.5)  # NIGHTLY_HOUR passes, not its own
    assert asyncio.run(watch_for_nightly(app, memory.root, seconds=2.5)) is None
