"""The prewarm's branches on the real engine (issue 58, item 3): in idle time, behind each
head it knows and its shared context, one branch per likely note (the note's matched tail,
where a new session's first message that matches it gets it), so the first new session
after a start reads its matched note from the cache rather than prefilling it."""

from __future__ import annotations

import asyncio
import uuid

from tests.inprocess import InProcessApp

NOTES = (
    ("release a new version", "To release a new version, bump pyproject.toml, tag the "
     "commit and push the tag; the pipeline publishes the wheel."),
    ("staging deploy needs the vpn", "The staging deploy needs the quayside-ops VPN "
     "profile; without it the login step hangs."),
    ("nightly export bucket", "The nightly export fails when the reports bucket is full; "
     "clear last month's folder first."),
)
OPENER = "Good morning! Starting on a fresh task today."  # matches none of them
RELEASE = "How do I release a new version of the package?"


def add_note(app: InProcessApp, title: str, body: str):
    result = app.memory.store("tester").add(title=title, body=body, kind="reference",
                                            scope="user", source="cli", has_user_message=True)
    assert result.ok, result.reason
    return result.note


def new_session(app: InProcessApp, system: str, session: str, question: str) -> dict:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    _, usage, _ = app.chat(messages, "Noted.", headers={"X-Tandem-Session": session})
    return usage


def tick(app: InProcessApp, served) -> list:
    return served.run(app.app.state.tandem.prewarm.tick())


def matched_span(app: InProcessApp, session: str):
    record = app.memory.latest_record("tester", session)
    (span,) = [s for s in record.spans if s.kind == "notes"]
    return span


def test_a_new_session_reads_its_matched_note_from_a_branch_the_prewarm_cached(
        served, tmp_path, tiny_profile):
    """After a first session, with the notes unchanged, the idle tick prefills one branch
    a note; the next new session whose opener matches one reads that note's tail from the
    cache. An app whose prewarm makes no branch (memory.prewarm_notes: 0) prefills it."""
    block = tiny_profile.block_size
    cached, ends = {}, {}
    for name, changes in (("branches", None), ("none", {"prewarm_notes": 0})):
        app = InProcessApp(served, tmp_path / name, memory_changes=changes)
        notes = [add_note(app, title, body) for title, body in NOTES]
        system = f"You help with this repository. [{uuid.uuid4().hex}]"
        new_session(app, system, f"{name}-1", OPENER)
        runs = tick(app, served)
        if name == "branches":
            assert [(r.kind, r.outcome) for r in runs] == [("note", "done")] * len(NOTES)
            assert sorted(r.note_id for r in runs) == sorted(n.id for n in notes)
            assert tick(app, served) == []  # each branch once
        else:
            assert runs == []
        usage = new_session(app, system, f"{name}-2", RELEASE)
        span = matched_span(app, f"{name}-2")
        assert span.note_ids == (notes[0].id,)
        cached[name], ends[name] = usage["prompt_tokens_details"]["cached_tokens"], span.end
    assert cached["branches"] >= ends["branches"] - block  # the note's tail came cached
    assert cached["none"] < ends["none"] - block  # without the branch it was prefilled


def test_a_note_written_or_changed_later_gets_its_branch_alone_at_the_next_tick(
        served, tmp_path):
    app = InProcessApp(served, tmp_path)
    notes = [add_note(app, title, body) for title, body in NOTES]
    new_session(app, f"System [{uuid.uuid4().hex}]", "later-1", OPENER)
    assert len(tick(app, served)) == len(NOTES)
    late = add_note(app, "the cache lives in redis", "Sessions are cached in redis db 2.")
    runs = tick(app, served)
    assert [(r.kind, r.note_id, r.outcome) for r in runs] == [("note", late.id, "done")]
    assert app.memory.store("tester").ratify(notes[1].id, via="cli").ok  # its text changes
    assert [r.note_id for r in tick(app, served)] == [notes[1].id]
    assert tick(app, served) == []


def test_a_client_request_preempts_the_branch_prefills_and_the_rest_wait_for_idle_time(
        served, tmp_path):
    app = InProcessApp(served, tmp_path)
    count = 40
    for n in range(count):
        add_note(app, f"service fact {n}", f"component {n} of the service listens on port {n}")
    system = f"System [{uuid.uuid4().hex}]"
    new_session(app, system, "busy-1", OPENER)
    prewarm = app.app.state.tandem.prewarm
    engine = app.app.state.tandem.engine
    script = "The client's answer, whole and in order."

    async def scenario():
        warming = asyncio.create_task(prewarm.tick())
        while not engine.running("background") and not warming.done():
            await asyncio.sleep(0.001)
        # the same head: a new one would be due its own branches after it
        content, _, _ = await asyncio.to_thread(
            app.chat, [{"role": "system", "content": system},
                       {"role": "user", "content": "quick question"}], script)
        return content, await warming

    content, during = served.run(scenario())
    assert content == script  # the client's answer is whole
    assert 0 < len(during) < count  # the tick stopped at the client
    assert all(r.outcome == "done" for r in during[:-1])
    assert during[-1].outcome in ("done", "preempted")  # ended at a step boundary
    after = tick(app, served)  # idle again: the rest, and a preempted one again
    done = [r.note_id for r in [*during, *after] if r.outcome == "done"]
    assert all(r.outcome == "done" for r in after)
    assert len(done) == len(set(done)) == count  # each branch prefilled once
    assert tick(app, served) == []


def test_after_a_restart_the_first_idle_tick_prewarms_the_saved_heads_and_their_branches(
        served, tmp_path, tiny_profile):
    """At start-up (issue 58, item 3): the heads come back from the saved ledger records,
    each in the group its record ran in, with no shared context cached, so the first idle
    tick after a restart prefills head + shared context and the note branches, and the
    first session after the start whose opener matches a note reads its tail from the
    cache. The restart is two apps on one home over the session's engine (as
    tests/test_restart.py): the engine's cache outlives it, the prewarm's memory does
    not."""
    block, home = tiny_profile.block_size, tmp_path / "home"
    first = InProcessApp(served, home)
    notes = [add_note(first, title, body) for title, body in NOTES]
    system = f"You help with this repository. [{uuid.uuid4().hex}]"
    new_session(first, system, "before-restart", OPENER)
    first.memory.save_now()  # what the end of the app's lifespan does

    second = InProcessApp(served, home)  # the restart
    assert [(g.user, g.project) for g in second.memory.idle.prewarm.groups()] == [("tester", None)]
    runs = tick(second, served)
    assert [(r.kind, r.outcome) for r in runs] == [("shared", "done")] + [
        ("note", "done")] * len(NOTES)
    assert sorted(r.note_id for r in runs[1:]) == sorted(n.id for n in notes)
    assert tick(second, served) == []  # each once
    usage = new_session(second, system, "after-restart", RELEASE)
    span = matched_span(second, "after-restart")
    assert span.note_ids == (notes[0].id,)
    # the note's tail came cached, from the branch the first idle tick prefilled
    assert usage["prompt_tokens_details"]["cached_tokens"] >= span.end - block
