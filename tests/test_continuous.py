"""The continuous conversation on the real engine: one conversation a user, assembled from
the layers most stable first, served from the prefix cache message after message, kept
on disk and resumed after a restart."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from conductor.layers.conversation import POLICY
from tests.inprocess import WITH_INDEX, InProcessApp, eventually

USER = "tester"  # InProcessApp's engine user


@pytest.fixture
def app(template_served, tmp_path) -> InProcessApp:
    """Each test that takes it runs once a chat template."""
    return InProcessApp(template_served, tmp_path)


def prompt_text(app: InProcessApp, tokenizer, user: str = USER) -> str:
    """The last continuous record's ids (prompt and answer) as text."""
    record = app.memory.latest_record(user, "continuous")
    return tokenizer.decode(record.ids)


def turn_files(home, user: str = USER) -> list:
    return sorted((home / "memory" / "layers" / user / "history" / "turns").rglob("*.json"))


def test_the_prompt_is_assembled_most_stable_first(app, tokenizer, tmp_path):
    app.converse("first question", "first answer")
    eventually(lambda: len(turn_files(tmp_path)) == 1)
    app.converse("second question", "second answer", utc_offset_minutes=60)
    text = prompt_text(app, tokenizer)
    order = [POLICY[:60], "## AGENT.md", "## USER.md", "## SOUL.md", "# Working memory",
             "## Pending Checks", "Hidden memory context", "first question", "first answer",
             "second question", "Local time:", "second answer"]
    at = 0
    for marker in order:  # each section after the one before it
        assert marker in text[at:], (marker, text[at:])
        at = text.index(marker, at)
    # The time line stands right after its own user message, in a system message.
    assert "second question<|im_end|>\n<|im_start|>system\nLocal time:" in text
    assert "(UTC+01:00)" in text.split("second question")[1]


def test_each_message_is_served_from_the_cache_up_to_the_new_one(app):
    previous = None
    for i, stream in enumerate([False, True, False, True]):
        _, usage, _ = app.converse(f"question {i} " + "words " * 20, f"answer {i}", stream=stream)
        if previous is not None:
            floor = previous["prompt_tokens"] + previous["completion_tokens"] - 32
            assert usage["prompt_tokens_details"]["cached_tokens"] >= floor, (i, usage)
        previous = usage


def test_turns_are_written_listed_and_their_numbering_continues(app, tmp_path):
    for i in range(3):
        app.converse(f"q{i}", f"a{i}")
    eventually(lambda: len(turn_files(tmp_path)) == 3)
    stored = json.loads(turn_files(tmp_path)[0].read_text())
    assert stored["schema_version"] == 2 and stored["seq"] == 1
    assert stored["messages"][0]["parts"][0] == {"type": "text", "text": "q0"}
    page = app.request("GET", "/v1/conductor/converse/history", params={"limit": 2}).json()
    assert [t["seq"] for t in page["data"]] == [2, 3] and page["has_more"]
    older = app.request("GET", "/v1/conductor/converse/history",
                        params={"before": 2, "limit": 2}).json()
    assert [t["seq"] for t in older["data"]] == [1] and not older["has_more"]
    assert older["data"][0]["messages"][1]["parts"] == [{"type": "text", "text": "a0"}]


def test_a_stored_turn_holds_no_time_line_and_a_rerendered_prompt_holds_one(
        template_served, app, tokenizer, tmp_path):
    for i in range(3):
        app.converse(f"q{i}", f"a{i}")
    eventually(lambda: len(turn_files(tmp_path)) == 3)
    assert all("Local time" not in p.read_text() for p in turn_files(tmp_path))
    restarted = InProcessApp(template_served, tmp_path)  # an empty ledger: the prompt is rendered
    restarted.converse("q3", "a3")
    text = prompt_text(restarted, tokenizer)
    assert text.count("Local time:") == 1
    assert text.index("Local time:") > text.index("q3")


def test_a_restart_resumes_the_conversation_from_disk(template_served, app, tokenizer, tmp_path):
    app.converse("my cat is called Miso", "noted")
    app.converse("and my dog is Pip", "noted too")
    eventually(lambda: len(turn_files(tmp_path)) == 2)
    restarted = InProcessApp(template_served, tmp_path)
    restarted.converse("what are their names?", "Miso and Pip")
    text = prompt_text(restarted, tokenizer)
    assert text.index("my cat is called Miso") < text.index("and my dog is Pip") < text.index(
        "what are their names?")
    eventually(lambda: len(turn_files(tmp_path)) == 3)
    assert turn_files(tmp_path)[-1].name == "00000003.json"


def test_the_replay_window_drops_the_oldest_from_the_prompt_never_from_disk(
        template_served, tokenizer, tmp_path):
    app = InProcessApp(template_served, tmp_path, memory_changes={"replay_turns": 4})
    usages = []
    for i in range(8):
        _, usage, _ = app.converse(f"question number {i}", f"answer number {i}")
        usages.append(usage)
        eventually(lambda n=i + 1: len(turn_files(tmp_path)) == n)
    text = prompt_text(app, tokenizer)
    # Message 5 held turns 0..4 (five, over the bound of 4): the window kept the newest
    # two, 3 and 4, and has grown from there without moving again.
    assert "question number 2" not in text
    assert all(f"question number {i}" in text for i in range(3, 8))
    assert len(turn_files(tmp_path)) == 8
    state = json.loads((tmp_path / "memory/layers/tester/state/conversation.json").read_text())
    assert state["replay_from_seq"] == 4
    def served_from_cache(k: int) -> bool:
        floor = usages[k - 1]["prompt_tokens"] + usages[k - 1]["completion_tokens"] - 32
        return usages[k]["prompt_tokens_details"]["cached_tokens"] >= floor
    # The move re-renders the prompt once; the messages after it are cached again.
    assert [served_from_cache(k) for k in range(1, 8)] == [True, True, True, True, False,
                                                          True, True]


def test_an_unreadable_turn_is_quarantined_and_the_conversation_goes_on(template_served, app,
                                                                        tmp_path):
    app.converse("q0", "a0")
    eventually(lambda: len(turn_files(tmp_path)) == 1)
    broken = turn_files(tmp_path)[0].parent / "00000002.json"
    broken.write_text("{ torn")
    restarted = InProcessApp(template_served, tmp_path)
    restarted.converse("q1", "a1")
    eventually(lambda: len(turn_files(tmp_path)) == 2)
    layers = tmp_path / "memory/layers/tester"
    assert (layers / "history/quarantine" / broken.relative_to(
        layers / "history/turns")).read_text() == "{ torn"
    journal = (tmp_path / "memory/journal.jsonl").read_text()
    assert '"op": "history_quarantine"' in journal and "torn" not in journal
    listed = restarted.request("GET", "/v1/conductor/memory/layers").json()
    assert listed["history"]["quarantined"] == [str(broken.relative_to(layers / "history/turns"))]


def test_an_older_schema_turn_is_upgraded_and_replayed(app, tokenizer, tmp_path):
    folder = tmp_path / "memory/layers/tester/history/turns/2026/01/02"
    folder.mkdir(parents=True)
    (folder / "00000001.json").write_text(json.dumps({
        "schema_version": 1, "seq": 1, "time": "2026-01-02T03:04:05Z",
        "user": "an old question", "assistant": "an old answer"}))
    app.converse("a new question", "a new answer")
    text = prompt_text(app, tokenizer)
    assert text.index("an old question") < text.index("an old answer") < text.index(
        "a new question")
    page = app.request("GET", "/v1/conductor/converse/history").json()["data"]
    assert [t["schema_version"] for t in page] == [2, 2] and page[0]["seq"] == 1


def test_core_files_are_never_written_by_code_and_an_edit_changes_the_prompt_once(
        app, tokenizer, tmp_path):
    app.converse("hello", "hi")
    core = tmp_path / "memory/layers/tester/core"
    (core / "AGENT.md").write_text("# Agent\n\nAnswer in haiku, always.\n")
    (core / "USER.md").unlink()
    before = (core / "AGENT.md").stat().st_mtime_ns
    _, edited, _ = app.converse("after the edit", "ok")
    _, next_one, _ = app.converse("and again", "ok again")
    text = prompt_text(app, tokenizer)
    assert "Answer in haiku, always." in text and "## USER.md\n\n(empty)" in text
    assert not (core / "USER.md").exists()
    assert (core / "AGENT.md").stat().st_mtime_ns == before
    assert (core / "AGENT.md").read_text() == "# Agent\n\nAnswer in haiku, always.\n"
    floor = edited["prompt_tokens"] + edited["completion_tokens"] - 32
    assert next_one["prompt_tokens_details"]["cached_tokens"] >= floor  # once, then cached


def test_each_user_has_a_conversation_of_their_own(template_served, tokenizer, tmp_path):
    proxy = "10.9.8.7"
    app = InProcessApp(template_served, tmp_path, trusted_proxies=frozenset({proxy}),
                       client_host=proxy)
    app.converse("alice's secret plan", "ok", headers={"X-Tandem-User": "alice"})
    app.converse("bob's question", "ok", headers={"X-Tandem-User": "bob"})
    assert "alice's secret plan" not in prompt_text(app, tokenizer, "bob")
    eventually(lambda: len(turn_files(tmp_path, "alice")) == len(turn_files(tmp_path, "bob")) == 1)
    bob = app.request("GET", "/v1/conductor/converse/history",
                      headers={"X-Tandem-User": "bob"}).json()["data"]
    assert [t["messages"][0]["parts"][0]["text"] for t in bob] == ["bob's question"]
    nobody = app.request("POST", "/v1/conductor/converse", json={"message": "hi", "script": "x"})
    assert nobody.status_code == 200  # answered, with nothing read or written
    assert not (tmp_path / "memory/layers/-relayed-").exists()


def test_memory_off_on_converse_reads_and_writes_no_layer(app, tokenizer, tmp_path):
    app.converse("remember this turn", "ok")
    eventually(lambda: len(turn_files(tmp_path)) == 1)
    _, usage, response = app.converse("off the record", "fine",
                                      headers={"X-Tandem-Memory": "off"})
    assert "x-tandem-memory-token" not in response.headers
    assert usage["prompt_tokens"] < 40  # the message alone: no policy, core or history
    app.converse("back on", "ok")
    eventually(lambda: len(turn_files(tmp_path)) == 2)
    texts = [json.loads(p.read_text())["messages"][0]["parts"][0]["text"]
             for p in turn_files(tmp_path)]
    assert texts == ["remember this turn", "back on"]
    assert "off the record" not in prompt_text(app, tokenizer)


def test_a_read_only_message_is_answered_with_the_history_and_leaves_no_turn(
        app, tokenizer, tmp_path):
    _, first, _ = app.converse("the plan is Tuesday", "ok")
    eventually(lambda: len(turn_files(tmp_path)) == 1)
    _, usage, _ = app.converse("when is the plan?", "Tuesday",
                               headers={"X-Tandem-Memory": "read"})
    # it started with the conversation so far: the first message's prompt and answer
    floor = first["prompt_tokens"] + first["completion_tokens"] - 32
    assert usage["prompt_tokens_details"]["cached_tokens"] >= floor
    assert "the plan is Tuesday" in prompt_text(app, tokenizer)
    assert len(turn_files(tmp_path)) == 1


def test_read_only_messages_leave_the_last_real_record_to_the_next_message(app):
    app.converse("first real message", "first answer")
    _, real, _ = app.converse("second real message", "second answer")
    for n in range(4):  # more than a session's records
        app.converse(f"just looking {n}", "ok", headers={"X-Tandem-Memory": "read"})
    _, usage, _ = app.converse("third real message", "third answer")
    floor = real["prompt_tokens"] + real["completion_tokens"] - 32
    assert usage["prompt_tokens_details"]["cached_tokens"] >= floor, (usage, real)


def test_the_same_message_again_replaces_the_last_turn(app, tokenizer, tmp_path):
    _, first, _ = app.converse("first question", "first answer")
    app.converse("second question", "a first try")
    eventually(lambda: len(turn_files(tmp_path)) == 2)
    _, again, _ = app.converse("second question", "a second try")  # the client regenerates
    floor = first["prompt_tokens"] + first["completion_tokens"] - 32
    assert again["prompt_tokens_details"]["cached_tokens"] >= floor  # up to the first turn
    text = prompt_text(app, tokenizer)
    assert "a second try" in text and "a first try" not in text
    eventually(lambda: "a second try" in turn_files(tmp_path)[-1].read_text())
    assert len(turn_files(tmp_path)) == 2
    _, usage, _ = app.converse("third question", "third answer")
    assert usage["prompt_tokens_details"]["cached_tokens"] >= (
        again["prompt_tokens"] + again["completion_tokens"] - 32)
    text = prompt_text(app, tokenizer)
    assert "a second try" in text and "a first try" not in text
    page = app.request("GET", "/v1/conductor/converse/history").json()
    assert [t["seq"] for t in page["data"]] == [1, 2, 3]


def test_a_message_said_twice_with_the_answer_between_is_two_turns():
    """Unit test, no engine: a client that sends its copy of the history shows a repeat on
    purpose; one that sends the message alone again regenerates."""
    from datetime import UTC, datetime

    from conductor.layers.turn_format import Part, Turn, TurnMessage
    from server.http.schema import ChatCompletionRequest
    from server.turn.continuous import is_regenerate

    last = Turn(1, datetime.now(UTC), 0, (TurnMessage("user", (Part("text", "ok"),)),
                                          TurnMessage("assistant", (Part("text", "Done."),))))

    def sent(*messages: tuple[str, str]) -> ChatCompletionRequest:
        return ChatCompletionRequest(model="tiny", messages=[
            {"role": role, "content": text} for role, text in messages])

    assert is_regenerate(sent(("user", "ok")), last)
    assert is_regenerate(sent(("user", "earlier"), ("assistant", "x"), ("user", "ok")), last)
    assert not is_regenerate(sent(("user", "ok"), ("assistant", "Done."), ("user", "ok")), last)
    assert not is_regenerate(sent(("user", "okay")), last)
    assert not is_regenerate(sent(("user", "ok")), None)


@pytest.mark.parametrize("body, param", [
    ({"message": ""}, "message"),
    ({"message": "hi", "utc_offset_minutes": 5000}, "utc_offset_minutes"),
    ({"message": "hi", "stream": "yes"}, "stream"),
    ({"message": "hi", "messages": []}, "messages"),
], ids=["empty", "offset", "stream-type", "unknown-field"])
def test_a_bad_converse_request_gets_a_clear_400(app, body, param):
    response = app.request("POST", "/v1/conductor/converse", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_the_layer_routes_list_and_read_files_for_the_admin_only(template_served, app, tmp_path):
    app.converse("hello", "hi")
    listed = app.request("GET", "/v1/conductor/memory/layers").json()
    names = {(f["layer"], f["name"]) for f in listed["files"]}
    assert {("core", "AGENT.md"), ("working", "WORKING_MEMORY.md"),
            ("semantic", "facts.md")} <= names
    assert all(f["tokens"] > 0 for f in listed["files"])
    agent = app.request("GET", "/v1/conductor/memory/layers/core/AGENT.md").json()
    assert agent["text"].startswith("# Agent")
    eventually(lambda: len(turn_files(tmp_path)) == 1)
    turn = app.request("GET", "/v1/conductor/memory/layers/history/1").json()
    assert turn["seq"] == 1
    for path in ("core/../../keys.json", "core/secrets.md", "notes/x", "history/99"):
        assert app.request("GET", f"/v1/conductor/memory/layers/{path}").status_code == 404
    assert app.request("PUT", "/v1/conductor/memory/layers/core/AGENT.md").status_code == 405
    remote = InProcessApp(template_served, tmp_path, client_host="192.168.1.20")
    assert remote.request("GET", "/v1/conductor/memory/layers").status_code == 403


def test_a_continuous_profile_makes_chat_completions_continuous_for_the_plain_sdk_call(
        template_served, tokenizer, tmp_path):
    app = InProcessApp(template_served, tmp_path, memory_changes={"conversation": "continuous"})

    async def plain_calls() -> list:
        transport = httpx.ASGITransport(app=app.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            sdk = openai.AsyncOpenAI(base_url="http://localhost/v1", api_key="unused",
                                     http_client=http)
            usages = []
            for i in range(3):  # the client sends only its new message, like a fresh chat
                done = await sdk.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": f"plain {i}"}],
                    extra_body={"script": f"reply {i}"})
                usages.append(done.usage)
                await asyncio.sleep(0)
            return usages

    usages = template_served.run(plain_calls())
    text = prompt_text(app, tokenizer)
    assert text.index("plain 0") < text.index("reply 0") < text.index("plain 2")
    floor = usages[1].prompt_tokens + usages[1].completion_tokens - 32
    assert usages[2].prompt_tokens_details.cached_tokens >= floor
    refused = app.request("POST", "/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": "x"},
                                      {"role": "assistant", "content": "y"}]})
    assert refused.status_code == 400 and "continuous" in refused.json()["error"]["message"]


def test_a_conversation_whose_memory_outgrew_the_context_gives_way_in_its_window(
        template_served, tiny_profile, tmp_path):
    """The card, the index (at its budget with 200 notes), the matching notes and the
    window at its own bound (a third of the context) together pass the tiny model's 4,096
    tokens by the 12th message: the window gives way so each message keeps room for its
    answer, rather than every message after that being refused."""
    app = InProcessApp(template_served, tmp_path, memory_changes=WITH_INDEX)
    store = app.memory.store(USER)
    for i in range(200):
        assert store.add(title=f"Port fact {i:03d} for the build", kind="reference",
                         body=f"The build of part {i} listens on port {1000 + i}.",
                         scope="user").ok
    answer = "Noted: " + " ".join(["logs ports deploys caches tests"] * 12) + "."
    for turn in range(16):
        response = app.request("POST", "/v1/conductor/converse", json={
            "message": f"question {turn}: what now about the logs and the ports?",
            "script": answer})
        assert response.status_code == 200, (turn, response.text)
        usage = response.json()["usage"]
        assert usage["prompt_tokens"] + 512 <= tiny_profile.max_model_len
    state = json.loads((tmp_path / "memory/layers/tester/state/conversation.json").read_text())
    assert state["replay_from_seq"] > 1, "the window's start moved"
