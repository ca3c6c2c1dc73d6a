"""Prefetch on the real engine (server/idle/prefetch.py): after a turn, in idle time,
the notes the conversation is likely to need next go in right after the answer, in the
session's record, prefilled; the next turn replays them from the cache."""

from __future__ import annotations

import asyncio

import pytest

from conductor.hidden.prefetch import ON_NOTES, PREFETCH_KIND
from tests.inprocess import InProcessApp

SESSION = "X-Tandem-Session"


ON = {"prefetch": (("notes", ON_NOTES),)}  # off by default


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    lean = InProcessApp(served, tmp_path, memory_changes=ON)
    for title, body in (
            ("restart the kafka consumer", "kafka consumer restarts with systemctl restart "
             "consumer on the broker host"),
            ("staging database port", "the staging database listens on port 5433"),
            ("office wifi", "the office wifi password is on the fridge")):
        assert lean.memory.store("tester").add(title=title, body=body, kind="runbook",
                                               scope="user", source="cli",
                                               has_user_message=True).ok
    return lean


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def two_turns(app: InProcessApp, session: str) -> list[dict]:
    """A conversation that goes on: its second answer talks about the kafka consumer,
    which the user has not named yet."""
    history = [user("hello there"), assistant("Hi.")]
    app.chat([user("hello there")], "Hi.", headers={SESSION: session})
    answer = "The lag comes from the kafka consumer; a consumer restart usually clears it."
    app.chat([*history, user("why is the queue lagging?")], answer,
             headers={SESSION: session})
    return [*history, user("why is the queue lagging?"), assistant(answer)]


def record(app: InProcessApp, session: str):
    return app.memory.latest_record("tester", session)


def tick(app: InProcessApp, served):
    return served.run(app.app.state.tandem.prefetch.tick())


def span_text(app: InProcessApp, rec, span) -> str:
    tokenizer = app.app.state.tandem.engine.tokenizer
    return tokenizer.decode(list(rec.ids[span.start:span.end]))


def test_the_prefetched_note_is_in_the_next_turns_replayed_ids_and_cached(app, served,
                                                                          tiny_profile):
    history = two_turns(app, "pf")
    before = len(record(app, "pf").ids)
    (run,) = tick(app, served)
    assert run.outcome == "done" and len(run.note_ids) == 1
    kafka = run.note_ids[0]
    prefetched = record(app, "pf")
    (span,) = [s for s in prefetched.spans if s.kind == PREFETCH_KIND]
    assert (span.start, span.end, span.note_ids) == (before, len(prefetched.ids), (kafka,))
    assert "restart the kafka consumer" in span_text(app, prefetched, span)
    assert tick(app, served) == []  # once a turn
    context = app.request("GET", "/v1/conductor/memory/context", params={"session": "pf"})
    names = [p["name"] for p in context.json()["parts"]]
    assert names[-1] == "prefetched notes"  # the screen names the part
    _, usage, _ = app.chat([*history, user("how do I restart the kafka consumer?")],
                           "Like that.", headers={SESSION: "pf"})
    third = record(app, "pf")
    assert list(third.ids[:len(prefetched.ids)]) == list(prefetched.ids)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= len(prefetched.ids) - \
        tiny_profile.block_size
    # no second copy: the note was prefetched, the message's match skips it
    matched = [i for s in third.spans if s.kind in ("notes", PREFETCH_KIND)
               for i in s.note_ids]
    assert matched.count(kafka) == 1


def test_a_one_shot_request_without_a_session_gets_no_prefetch(app, served):
    app.chat([user("the kafka consumer lags, what do I restart?")], "The consumer.")
    assert tick(app, served) == []
    assert not [r for r in app.memory.records("tester")
                if any(s.kind == PREFETCH_KIND for s in r.spans)]


def test_a_named_session_is_prefetched_for_from_its_first_turn(app, served):
    app.chat([user("why is the queue lagging?")], "The kafka consumer is behind; restart "
             "the consumer.", headers={SESSION: "named"})
    assert [r.outcome for r in tick(app, served)] == ["done"]


def test_a_session_whose_history_changed_gets_no_stale_prefetch(app, served):
    history = two_turns(app, "edit")
    assert [r.outcome for r in tick(app, served)] == ["done"]
    # the client edits its second message: the record is cut before it, and the
    # prefetch after the answer that followed goes with it
    edited = [*history[:2], user("what is the staging database port?")]
    app.chat(edited, "Port 5433.", headers={SESSION: "edit"})
    rec = record(app, "edit")
    assert not [s for s in rec.spans if s.kind == PREFETCH_KIND]
    assert [s for s in rec.spans if s.kind == "notes"]  # matched afresh, as without prefetch


def tick_while_a_client_runs(app, served) -> tuple[list, str, str]:
    """The prefetch's tick while a client's long answer is being generated: its runs, and
    the client's answer with the answer it was scripted to give."""
    engine = app.app.state.tandem.engine
    long_answer = " ".join(["word"] * 150)

    async def scenario():
        client = asyncio.create_task(asyncio.to_thread(app.chat, [user("talk")], long_answer))
        while not engine.running("client"):
            await asyncio.sleep(0.005)
        during = await app.app.state.tandem.prefetch.tick()
        await client
        return during, client.result()

    during, (content, _, _) = served.run(scenario())
    return during, content, long_answer


def a_client_during_a_tick(app, served, script: str) -> tuple[str, list]:
    """A client's request sent once the prefetch's tick has a background request running
    (or the tick ended first): the client's answer, and the tick's runs."""
    engine = app.app.state.tandem.engine

    async def scenario():
        fetching = asyncio.create_task(app.app.state.tandem.prefetch.tick())
        while not engine.running("background") and not fetching.done():
            await asyncio.sleep(0.001)
        content, _, _ = await asyncio.to_thread(app.chat, [user("quick question")], script)
        return content, await fetching

    return served.run(scenario())


def test_a_prefetch_never_starts_while_a_client_request_is_in_flight(app, served):
    two_turns(app, "busy")
    during, content, long_answer = tick_while_a_client_runs(app, served)
    assert during == [] and content == long_answer
    assert [r.outcome for r in tick(app, served)] == ["done"]  # still due, done when idle


def test_nothing_starts_while_a_client_request_is_at_the_door_before_the_engine_has_it(
        branching, served):
    """A request counts from the door (server/http/load_tracking.py): its turn is laid out
    (notes matched, the prompt rendered) before the engine runs it, and on a loaded host
    that took longer than the 20 branches of a prefetch (CI, stop 73)."""
    two_turns(branching, "door")
    door = branching.app.state.tandem.load
    door.hold()  # as TrackServerLoad holds it for a generation request that came in
    try:
        assert tick(branching, served) == []
        assert len(branching.memory.idle.prefetch_due) == 1  # still due
    finally:
        door.release()
    assert [r.outcome for r in tick(branching, served)] == ["done"] * 3


def test_a_client_request_beside_a_prefetch_gets_its_whole_answer(app, served):
    two_turns(app, "race")
    script = "The client's answer, whole and in order."
    content, runs = a_client_during_a_tick(app, served, script)
    assert content == script
    assert len(runs) == 1 and runs[0].outcome in ("done", "preempted")
    if runs[0].outcome == "preempted":  # ended at a step boundary: it stays due
        assert [r.outcome for r in tick(app, served)] == ["done"]


def test_by_default_prefetch_is_off(served, tmp_path):
    off = InProcessApp(served, tmp_path)
    assert off.memory.store("tester").add(title="kafka consumer restart", body="kafka "
                                          "consumer restart runbook", kind="runbook",
                                          scope="user", source="cli",
                                          has_user_message=True).ok
    two_turns(off, "off")
    assert len(off.memory.idle.prefetch_due) == 0  # not even marked due
    assert tick(off, served) == []


def test_an_answer_cut_by_its_length_is_closed_before_the_prefetch(app, served, tiny_profile):
    """A random-weight model's answers end at max_tokens: the record is closed with its
    end-of-turn token, as the client's next render closes it, and replays whole."""
    app.chat([user("hello there")], "Hi.", headers={SESSION: "cut"})
    history = [user("hello there"), assistant("Hi."), user("why is the queue lagging?")]
    script = "The kafka consumer is behind; a consumer restart clears it, then more words"
    content, _, _ = app.chat(history, script, headers={SESSION: "cut"}, max_tokens=12)
    assert not record(app, "cut").ended_cleanly
    assert [r.outcome for r in tick(app, served)] == ["done"]
    closed = record(app, "cut")
    (span,) = [s for s in closed.spans if s.kind == PREFETCH_KIND]
    end_of_turn = app.app.state.tandem.engine.tokens.end_of_turn
    assert closed.ended_cleanly and closed.ids[span.start - 1] == end_of_turn
    _, usage, _ = app.chat([*history, assistant(content), user("and then?")], "Then.",
                           headers={SESSION: "cut"})
    following = record(app, "cut")
    assert list(following.ids[:len(closed.ids)]) == list(closed.ids)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= len(closed.ids) - \
        tiny_profile.block_size


def test_a_prefetched_note_edited_since_reaches_the_next_turn_as_a_correction(app, served):
    history = two_turns(app, "fix")
    (run,) = tick(app, served)
    store = app.memory.store("tester")
    assert store.edit(run.note_ids[0], body="the kafka consumer now restarts with "
                      "kafkactl restart").ok
    app.chat([*history, user("thanks, anything else?")], "No.", headers={SESSION: "fix"})
    rec = record(app, "fix")
    (fix,) = [s for s in rec.spans if s.kind == "correction"]
    assert "kafkactl restart" in span_text(app, rec, fix)


def test_an_answer_that_calls_a_tool_gets_no_prefetch():
    from conductor.ledger.records import Record, VisibleMessage
    from server.idle.prefetch import _fits

    def ending_with(answer: VisibleMessage) -> Record:
        return Record(user="u", session="s", messages=(
            VisibleMessage.of("user", "restart the kafka consumer"), answer), ids=[1, 2],
            ended_cleanly=True)

    assert _fits(ending_with(VisibleMessage.of("assistant", "Restart it.")))
    calling = VisibleMessage.of("assistant", "", [("run", {"cmd": "systemctl restart"})])
    assert not _fits(ending_with(calling))


def test_the_session_cap_stops_the_guess_once_the_session_was_given_as_many(served,
                                                                          tmp_path):
    capped = InProcessApp(served, tmp_path, memory_changes={
        "prefetch": (("notes", ON_NOTES), ("session_cap", 1))})
    for title in ("kafka consumer restart", "kafka consumer lag board",
                  "kafka consumer offsets reset"):
        assert capped.memory.store("tester").add(
            title=title, body=f"the {title} runbook for the kafka consumer", kind="runbook",
            scope="user", source="cli", has_user_message=True).ok
    history = two_turns(capped, "cap")
    (run,) = tick(capped, served)
    assert run.outcome == "done" and len(run.note_ids) == 1  # the cap, not the 3 a turn
    # the next answer talks about the other two notes: the cap is spent, none is fetched
    capped.chat([*history, user("thanks")], "The kafka consumer lag board and the kafka "
                "consumer offsets reset runbook cover the rest.", headers={SESSION: "cap"})
    assert tick(capped, served) == []
    assert capped.memory.idle.prefetch_limits.guess_room(1) == 0


# Prefetch by branches (memory.prefetch.branches): after a turn, each note the next
# message may match has its matched tail prefilled after the record, nothing recorded.
BRANCHES = {"prefetch": (("branches", 8),)}  # the guess off: notes 0
NOTES = (("restart the kafka consumer", "kafka consumer restarts with systemctl restart "
          "consumer on the broker host, then check the lag board"),
         ("staging database port", "the staging database listens on port 5433"),
         ("office wifi", "the office wifi password is on the fridge"))


def with_notes(lean: InProcessApp) -> InProcessApp:
    for title, body in NOTES:
        assert lean.memory.store("tester").add(title=title, body=body, kind="runbook",
                                               scope="user", source="cli",
                                               has_user_message=True).ok
    return lean


@pytest.fixture
def branching(served, tmp_path) -> InProcessApp:
    return with_notes(InProcessApp(served, tmp_path, memory_changes=BRANCHES))


def notes_span(rec):
    (span,) = [s for s in rec.spans if s.kind == "notes"]
    return span


def test_a_branch_prefetched_note_is_read_from_the_cache_before_the_message(
        branching, served, tiny_profile):
    history = two_turns(branching, "br")
    before = record(branching, "br")
    runs = tick(branching, served)
    # every note the next message may match, the guess's choice first (the answer
    # talked about the kafka consumer); each one background request, all finished
    assert [r.outcome for r in runs] == ["done"] * 3 and all(r.branch for r in runs)
    kafka = runs[0].note_ids[0]
    assert "kafka" in branching.memory.store("tester").get(kafka).title
    assert {r.note_ids[0] for r in runs} == {n.id for n in
                                             branching.memory.store("tester").list()}
    assert record(branching, "br") is before  # nothing recorded
    assert tick(branching, served) == []  # once a record
    _, usage, _ = branching.chat([*history, user("how do I restart the kafka consumer?")],
                                 "Like that.", headers={SESSION: "br"})
    after = record(branching, "br")
    span = notes_span(after)
    assert span.note_ids == (kafka,)
    assert span.start == len(before.ids)  # right after the replayed record
    # read from the cache to the note's end, but for the block the branch did not fill
    # (branches off: to the record's last whole block, some 100 tokens short)
    assert usage["prompt_tokens_details"]["cached_tokens"] >= span.end - \
        tiny_profile.block_size


def test_a_message_matching_no_branch_gets_the_prompt_memory_on_gives_without_them(
        branching, served, tmp_path):
    plain = with_notes(InProcessApp(served, tmp_path / "plain"))
    prompts = []
    for lean in (branching, plain):
        history = two_turns(lean, "none")
        before = record(lean, "none")
        runs = tick(lean, served)
        _, usage, _ = lean.chat([*history, user("thanks, that is all for today")], "Bye.",
                                headers={SESSION: "none"})
        after = record(lean, "none")
        assert list(after.ids[:len(before.ids)]) == list(before.ids)
        assert not [s for s in after.spans if s.start >= len(before.ids)]  # nothing hidden
        prompts.append((usage["prompt_tokens"], len(runs)))
    assert prompts[0][0] == prompts[1][0]  # no prompt growth for the branches
    assert (prompts[0][1], prompts[1][1]) == (3, 0)


def test_branches_follow_an_answer_cut_by_its_length_as_the_next_render_closes_it(
        branching, served, tiny_profile):
    branching.chat([user("hello there")], "Hi.", headers={SESSION: "cut"})
    history = [user("hello there"), assistant("Hi."), user("why is the queue lagging?")]
    script = "The kafka consumer is behind; a consumer restart clears it, then more words"
    content, _, _ = branching.chat(history, script, headers={SESSION: "cut"}, max_tokens=12)
    before = record(branching, "cut")
    assert not before.ended_cleanly
    assert [r.outcome for r in tick(branching, served)] == ["done"] * 3
    _, usage, _ = branching.chat([*history, assistant(content),
                                  user("how do I restart the kafka consumer?")], "So.",
                                 headers={SESSION: "cut"})
    after = record(branching, "cut")
    span = notes_span(after)
    end_of_turn = branching.app.state.tandem.engine.tokens.end_of_turn
    # the answer closed first, then the note: where the branch put it (before the fix,
    # the note went inside the unclosed answer and the cache held only the record)
    assert span.start == len(before.ids) + 1 and after.ids[span.start - 1] == end_of_turn
    assert usage["prompt_tokens_details"]["cached_tokens"] >= span.end - \
        tiny_profile.block_size


def test_a_client_request_ends_the_branches_and_the_rest_run_in_a_later_idle_moment(
        served, tmp_path):
    branching = with_notes(InProcessApp(served, tmp_path, memory_changes={
        "prefetch": (("branches", 64),)}))
    for n in range(17):  # 20 branches in all: the client comes while they run
        assert branching.memory.store("tester").add(
            title=f"runbook {n} of the night shift", body=f"step {n}: page the on-call",
            kind="runbook", scope="user", source="cli", has_user_message=True).ok
    two_turns(branching, "busy")
    during, content, long_answer = tick_while_a_client_runs(branching, served)
    assert during == [] and content == long_answer  # none started beside the client
    assert len(branching.memory.idle.prefetch_due) == 1  # still due

    script = "The client's answer, whole and in order."
    content, first = a_client_during_a_tick(branching, served, script)
    # A dense engine prefills a branch in one step (no chunked prefill): the client waits
    # for the step under way, and the branch is done, or ended ("preempted") when the
    # client came between its scheduling and its step; either way no other starts.
    assert content == script and len(first) < 20
    rest = tick(branching, served)
    done = [r.note_ids[0] for r in [*first, *rest] if r.outcome == "done"]
    # each candidate prefilled once in all: one that gave way again, none twice
    assert sorted(done) == sorted(n.id for n in branching.memory.store("tester").list())
    preempted = [r for r in first if r.outcome == "preempted"]
    assert all(r.note_ids[0] in {x.note_ids[0] for x in rest} for r in preempted)
    assert tick(branching, served) == []


def test_branches_must_be_zero_or_more():
    from conductor.hidden.prefetch import PrefetchLimits

    with pytest.raises(ValueError, match="branches"):
        PrefetchLimits(branches=-1)
    assert PrefetchLimits(branches=4).after_turn and not PrefetchLimits(branches=4).on
