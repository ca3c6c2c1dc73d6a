"""A client's hint about its next message (POST /v1/memory/prefetch), on the real engine:
the notes it matches are prefilled after the conversation in idle time, and the message
finds them in the cache; the hint is the session's own, checked, and never kept."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from conductor.hidden.prefetch import HINT_MAX_CHARS, ON_NOTES, PREFETCH_KIND, PrefetchDue
from server.access.auth import Auth
from server.access.keys import KeyStore
from tests.inprocess import InProcessApp

SESSION = "X-Tandem-Session"
TOKEN = "X-Tandem-Memory-Token"
KAFKA_HINT = "how do I restart the kafka consumer on"  # a draft, its last words not typed


def add_rival(app: InProcessApp) -> None:
    """A second note a kafka restart question matches: it is prefilled after the message
    where the first is not in place."""
    assert app.memory.store("tester").add(
        title="kafka consumer lag board", body="the kafka consumer lag shows on the board",
        kind="reference", scope="user", source="cli", has_user_message=True).ok


def add_notes(app: InProcessApp, user: str = "tester") -> None:
    for title, body in (
            ("restart the kafka consumer", "kafka consumer restarts with systemctl restart "
             "consumer on the broker host"),
            ("staging database port", "the staging database listens on port 5433"),
            ("office wifi", "the office wifi password is on the fridge")):
        assert app.memory.store(user).add(title=title, body=body, kind="runbook",
                                          scope="user", source="cli",
                                          has_user_message=True).ok


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    """The default profile: no guess after a turn, hints taken."""
    default = InProcessApp(served, tmp_path)
    add_notes(default)
    return default


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def one_turn(app: InProcessApp, session: str, headers: dict | None = None
             ) -> tuple[list[dict], dict]:
    """A first turn about nothing in the notes; the history and the routes' headers."""
    headers = {SESSION: session, **(headers or {})}
    _, _, response = app.chat([user("hello there")], "Hi.", headers=headers)
    return [user("hello there"), assistant("Hi.")], {
        **headers, TOKEN: response.headers["x-tandem-memory-token"]}


def hint(app: InProcessApp, headers: dict, text: str, **body):
    return app.request("POST", "/v1/memory/prefetch", headers=headers,
                       json={"hint": text, **body})


def tick(app: InProcessApp, served):
    return served.run(app.app.state.tandem.prefetch.tick())


def record(app: InProcessApp, session: str, who: str = "tester"):
    return app.memory.latest_record(who, session)


def note_id(app: InProcessApp, title: str, who: str = "tester") -> str:
    (found,) = [n for n in app.memory.store(who).list() if n.title == title]
    return found.id


def test_a_hints_notes_are_in_the_next_turns_replayed_ids_and_cached(app, served,
                                                                     tiny_profile):
    add_rival(app)  # without the prefetched note in place, prefilled in its stead
    history, routes = one_turn(app, "draft")
    assert tick(app, served) == []  # the default profile makes no guess of its own
    accepted = hint(app, routes, KAFKA_HINT)
    assert accepted.status_code == 202 and accepted.json() == {"status": "queued"}
    (run,) = tick(app, served)
    kafka = note_id(app, "restart the kafka consumer")
    assert (run.outcome, run.hinted, run.note_ids) == ("done", True, (kafka,))
    prefetched = record(app, "draft")
    assert [s.note_ids for s in prefetched.spans if s.kind == PREFETCH_KIND] == [(kafka,)]
    assert tick(app, served) == []  # a hint is used once
    _, usage, _ = app.chat([*history, user("how do I restart the kafka consumer on staging?")],
                           "Like that.", headers={SESSION: "draft"})
    following = record(app, "draft")
    assert list(following.ids[:len(prefetched.ids)]) == list(prefetched.ids)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= len(prefetched.ids) - \
        tiny_profile.block_size
    matched = [i for s in following.spans if s.kind in ("notes", PREFETCH_KIND)
               for i in s.note_ids]
    assert matched == [kafka]  # in place: no second copy, and no other note instead


def test_a_hints_notes_go_after_the_notes_the_guess_prefetched(served, tmp_path):
    guessing = InProcessApp(served, tmp_path, memory_changes={
        "prefetch": (("notes", ON_NOTES),)})
    add_notes(guessing)
    history, routes = one_turn(guessing, "both")
    guessing.chat([*history, user("why is the queue lagging?")],
                  "The kafka consumer is behind; a consumer restart clears it.",
                  headers={SESSION: "both"})
    assert [r.hinted for r in tick(guessing, served)] == [False]
    assert hint(guessing, routes, "which port does the staging database").status_code == 202
    assert [(r.outcome, r.hinted) for r in tick(guessing, served)] == [("done", True)]
    spans = [s for s in record(guessing, "both").spans if s.kind == PREFETCH_KIND]
    assert [s.note_ids for s in spans] == [
        (note_id(guessing, "restart the kafka consumer"),),
        (note_id(guessing, "staging database port"),)]
    assert spans[0].end == spans[1].start


def test_a_hint_about_a_message_already_sent_is_dropped(app, served):
    history, routes = one_turn(app, "late")
    assert hint(app, routes, "which port does the staging database").status_code == 202
    # the message arrives before any idle moment (the user sent something else after
    # all): the hint was about it, and is spent
    app.chat([*history, user("never mind, thanks")], "Sure.", headers={SESSION: "late"})
    assert tick(app, served) == []
    assert app.memory.idle.prefetch_due.hint("tester", "late") is None


def test_a_prompt_counted_before_it_is_sent_leaves_the_hint_about_it(app, served):
    """Claude Code counts a message's tokens (/v1/messages/count_tokens) before it sends
    it: the count lays the turn out, and used to spend the hint as if it had come."""
    history, routes = one_turn(app, "counted")
    assert hint(app, routes, KAFKA_HINT).status_code == 202
    counted = app.request("POST", "/v1/messages/count_tokens", headers={SESSION: "counted"},
                          json={"model": "tiny", "messages": [
                              *history, user("how do I restart the kafka consumer?")]})
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    assert app.memory.idle.prefetch_due.hint("tester", "counted") == KAFKA_HINT


def test_a_hint_matching_nothing_new_prefetches_nothing(app, served):
    history, routes = one_turn(app, "nothing")
    assert hint(app, routes, "tell me a joke about penguins please").status_code == 202
    assert tick(app, served) == []
    assert app.memory.idle.prefetch_due.hint("tester", "nothing") is None
    # a note the conversation holds already (matched by a message) is not fetched again
    app.chat([*history, user("how do I restart the kafka consumer?")], "Like that.",
             headers={SESSION: "nothing"})
    assert [s.kind for s in record(app, "nothing").spans].count("notes") == 1
    assert hint(app, routes, KAFKA_HINT).status_code == 202
    assert tick(app, served) == []


@pytest.mark.parametrize("body, why", [
    ({"hint": "   "}, "must not be empty"),
    ({"hint": "kafka " * (HINT_MAX_CHARS // 5)}, f"at most {HINT_MAX_CHARS}"),
    ({"hint": ["kafka", "consumer"]}, "hint"),
    ({}, "hint"),
])
def test_a_bad_hint_is_a_400_with_its_reason(app, body, why):
    _, routes = one_turn(app, "bad")
    response = app.request("POST", "/v1/memory/prefetch", headers=routes, json=body)
    assert response.status_code == 400, response.text
    assert why in response.text
    assert app.memory.idle.prefetch_due.hint("tester", "bad") is None


def test_a_hint_needs_the_sessions_token_and_its_user(served, tmp_path):
    keys = KeyStore(tmp_path)
    alice, bob = keys.add("alice"), keys.add("bob")
    app = InProcessApp(served, tmp_path, auth=Auth(keys=keys))
    add_notes(app, "alice")
    _, routes = one_turn(app, "mine", {"Authorization": f"Bearer {alice}"})
    no_token = {k: v for k, v in routes.items() if k != TOKEN}
    assert hint(app, no_token, KAFKA_HINT).status_code == 403
    assert hint(app, {**routes, TOKEN: "forged"}, KAFKA_HINT).status_code == 403
    bobs = {**routes, "Authorization": f"Bearer {bob}"}  # alice's token, bob's key
    assert hint(app, bobs, KAFKA_HINT).status_code == 403
    assert hint(app, {k: v for k, v in routes.items() if k != "Authorization"},
                KAFKA_HINT).status_code == 401
    assert app.memory.idle.prefetch_due.hint("alice", "mine") is None
    assert hint(app, routes, KAFKA_HINT).status_code == 202


def test_one_users_flood_of_hints_leaves_another_users_hint_and_its_prefetch(served,
                                                                          tmp_path):
    """Each user's own slots (two here, sixteen by default): alice's hints on three
    sessions push out only her own oldest; bob's hint stays and his notes are prefetched,
    in the first turns of the idle moment."""
    keys = KeyStore(tmp_path)
    alice, bob = keys.add("alice"), keys.add("bob")
    app = InProcessApp(served, tmp_path, auth=Auth(keys=keys))
    app.memory.idle.prefetch_due = PrefetchDue(bound=2)
    add_notes(app, "bob")
    add_notes(app, "alice")
    _, bobs = one_turn(app, "his", {"Authorization": f"Bearer {bob}"})
    assert hint(app, bobs, KAFKA_HINT).status_code == 202
    for n in range(3):
        _, alices = one_turn(app, f"flood-{n}", {"Authorization": f"Bearer {alice}"})
        assert hint(app, alices, KAFKA_HINT).status_code == 202
    assert app.memory.idle.prefetch_due.hint("bob", "his") == KAFKA_HINT
    runs = tick(app, served)
    assert [(r.user, r.session) for r in runs][:2] == [("alice", "flood-2"), ("bob", "his")]
    assert sorted((r.user, r.session, r.outcome) for r in runs) == [
        ("alice", "flood-1", "done"), ("alice", "flood-2", "done"), ("bob", "his", "done")]
    assert [s.note_ids for s in record(app, "his", "bob").spans
            if s.kind == PREFETCH_KIND] == [(note_id(app, "restart the kafka consumer",
                                                     "bob"),)]


def test_a_hint_reaches_no_file_and_no_log(app, served, tmp_path, caplog):
    _, routes = one_turn(app, "quiet")
    secret_draft = "restart the kafka consumer, the zq7 password is hunter2"
    with caplog.at_level(logging.DEBUG):
        assert hint(app, routes, secret_draft).status_code == 202
        assert [r.outcome for r in tick(app, served)] == ["done"]
    assert "hunter2" not in caplog.text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"hunter2" not in path.read_bytes(), path


def test_a_profile_can_refuse_hints(served, tmp_path):
    refusing = InProcessApp(served, tmp_path, memory_changes={
        "prefetch": (("hint_notes", 0),)})
    _, routes = one_turn(refusing, "refused")
    response = hint(refusing, routes, KAFKA_HINT)
    assert response.status_code == 409 and "hint_notes" in response.text
    assert response.json()["error"]["code"] == "prefetch_off"


def test_a_shadow_profile_takes_no_hint(served, tmp_path):
    """Shadow mode reads nothing back: a hint's notes would reach the model."""
    shadow = InProcessApp(served, tmp_path, memory_mode="shadow")
    add_notes(shadow)
    _, routes = one_turn(shadow, "shadow")
    response = hint(shadow, routes, KAFKA_HINT)
    assert response.status_code == 409 and "memory.mode" in response.text
    assert tick(shadow, served) == []


def test_a_session_whose_last_turn_had_memory_off_takes_no_hint(app, served):
    """No token is handed out with memory off; a session that turned memory off after
    its first turn still holds one, and is refused."""
    history, routes = one_turn(app, "bare")
    app.chat([*history, user("hello again")], "Hi again.",
             headers={SESSION: "bare", "X-Tandem-Memory": "off"})
    assert record(app, "bare").bare
    response = hint(app, routes, KAFKA_HINT)
    assert response.status_code == 409 and "memory on" in response.text
    assert tick(app, served) == []


def test_hints_share_a_turns_token_budget_and_no_session_cap(served, tmp_path):
    """The session cap bounds the guess; a client's hints are bounded by the budget a
    turn, which every hint after one answer shares and the next answer renews."""
    small = InProcessApp(served, tmp_path, memory_changes={
        "prefetch": (("session_cap", 0), ("budget", 60))})
    add_notes(small)
    history, routes = one_turn(small, "budget")
    assert hint(small, routes, KAFKA_HINT).status_code == 202
    (run,) = tick(small, served)
    assert run.outcome == "done" and run.tokens <= 60
    staging = "which port does the staging database"
    assert hint(small, routes, staging).status_code == 202
    assert tick(small, served) == []  # the turn's budget is spent
    small.chat([*history, user("thanks, that was it")], "Good.", headers={SESSION: "budget"})
    assert hint(small, routes, staging).status_code == 202
    assert [(r.outcome, r.note_ids) for r in tick(small, served)] == [
        ("done", (note_id(small, "staging database port"),))]


def test_a_hint_sent_while_the_session_is_answered_counts_for_the_message_after(app, served):
    """The user types the next message while the answer streams: the hint is kept past
    the request in flight, and its note goes in after that answer."""
    history, routes = one_turn(app, "typing")
    engine = app.app.state.tandem.engine
    long_answer = " ".join(["word"] * 120)
    asked = [*history, user("tell me something long")]

    async def scenario():
        answering = asyncio.create_task(asyncio.to_thread(
            app.chat, asked, long_answer, {SESSION: "typing"}))
        while not engine.running("client"):
            await asyncio.sleep(0.005)
        sent = await asyncio.to_thread(hint, app, routes, KAFKA_HINT)
        during = await app.app.state.tandem.prefetch.tick()  # never beside a client
        await answering
        return sent.status_code, during

    status, during = served.run(scenario())
    assert status == 202 and during == []
    (run,) = tick(app, served)
    assert (run.outcome, run.hinted) == ("done", True)
    rec = record(app, "typing")
    assert rec.messages[-1].content == long_answer  # after the answer the hint came during
    assert [s.note_ids for s in rec.spans if s.kind == PREFETCH_KIND] == [
        (note_id(app, "restart the kafka consumer"),)]


def test_a_note_prefetched_for_an_earlier_message_is_skipped_like_any_matched_one(app,
                                                                                  served):
    """Only the notes placed since the last answer stand for the next message's match; an
    older prefetched note is one the conversation holds, and the message gets another."""
    add_rival(app)
    history, routes = one_turn(app, "older")
    assert hint(app, routes, KAFKA_HINT).status_code == 202
    assert [r.outcome for r in tick(app, served)] == ["done"]
    history = [*history, user("thanks, later"), assistant("Sure.")]
    app.chat(history[:-1], "Sure.", headers={SESSION: "older"})
    app.chat([*history, user("how do I restart the kafka consumer?")], "Like that.",
             headers={SESSION: "older"})
    (matched,) = [s.note_ids for s in record(app, "older").spans if s.kind == "notes"]
    assert matched == (note_id(app, "kafka consumer lag board"),)


def test_a_parts_whole_hidden_message_counts_against_the_budget(app, served):
    """The budget holds the part as prefilled (its system-message frame too), not only
    the notes' text: a part is never over it (counting the text in pieces may err by a
    token on the safe side)."""
    _, routes = one_turn(app, "measure")
    assert hint(app, routes, KAFKA_HINT).status_code == 202
    (run,) = tick(app, served)
    limits = app.memory.idle.prefetch_limits
    for session, budget, fetched in (("short", run.tokens - 2, []),
                                     ("roomy", run.tokens + 2, [run.tokens])):
        app.memory.idle.prefetch_limits = dataclasses.replace(limits, budget=budget)
        _, routes = one_turn(app, session)
        assert hint(app, routes, KAFKA_HINT).status_code == 202
        assert [r.tokens for r in tick(app, served)] == fetched, budget


def test_a_tool_result_leaves_the_users_hint_for_their_next_message(app, served):
    """An agent's loop goes on while the user types: the request that carries a tool's
    result is not the message the hint is about."""
    history, routes = one_turn(app, "agent")
    assert hint(app, routes, KAFKA_HINT).status_code == 202
    calling = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": "{\"path\": \"a.py\"}"}}]}
    tools = [{"type": "function", "function": {
        "name": "read_file", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}}}}}]
    app.chat([*history, user("read a.py"), calling,
              {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"}],
             "It prints hi.", headers={SESSION: "agent"}, tools=tools)
    assert app.memory.idle.prefetch_due.hint("tester", "agent") == KAFKA_HINT
    assert [(r.outcome, r.hinted) for r in tick(app, served)] == [("done", True)]
