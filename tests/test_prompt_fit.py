"""Memory's hidden parts give way before a request is refused as too long: a request whose
own messages fit the model's context is served, as plain vLLM would serve it."""

from __future__ import annotations

import uuid

import pytest

from server.http.schema import ChatCompletionRequest
from server.turn.chat_turn import prepare
from server.turn.fit import answer_reserve
from tests.inprocess import InProcessApp

QUESTION = "Which port does component 3 of the service listen on today?"


@pytest.fixture
def app(served, tmp_path) -> InProcessApp:
    return InProcessApp(served, tmp_path)


def fill(app: InProcessApp) -> None:
    for n in range(6):
        result = app.memory.store("tester").add(
            title=f"service port {n}", body=f"component {n} of the service listens on port "
            f"{8000 + n} today", kind="reference", scope="user", source="cli",
            has_user_message=True)
        assert result.ok, result.reason


def prepared(app: InProcessApp, max_tokens: int, session: str, headers: dict | None = None):
    tandem = app.app.state.tandem
    request = ChatCompletionRequest(model="tiny", max_tokens=max_tokens,
                                    messages=[{"role": "user", "content": QUESTION}])
    return prepare(tandem.engine, tandem.engine.profile, app.memory, request,
                   {"x-tandem-session": session, **(headers or {})}, "127.0.0.1")


def kinds(chat) -> set[str]:
    return {span.kind for span in chat.spans}


def test_memorys_parts_give_way_least_needed_first(app, tiny_profile):
    fill(app)
    context = tiny_profile.max_model_len
    whole = prepared(app, 16, "fit-a")
    assert {"shared", "notes"} <= kinds(whole) and whole.engine_tools

    # One token more than the whole layout leaves: the matched notes and the session's
    # tail go, the shared context stays where it was.
    without_tails = prepared(app, context - len(whole.prompt_ids) + 1, "fit-b")
    assert kinds(without_tails) == {"shared"} and without_tails.engine_tools
    assert len(without_tails.prompt_ids) < len(whole.prompt_ids)
    shared = next(s for s in whole.spans if s.kind == "shared")
    assert without_tails.prompt_ids[:shared.end] == whole.prompt_ids[:shared.end]

    # Then the shared context: the client's messages and the engine's tools only.
    bare = prepared(app, context - len(without_tails.prompt_ids) + 1, "fit-c")
    assert not bare.spans and bare.engine_tools and not bare.hidden.tails

    # Then the engine's tool catalog: the prompt is the client's request alone, as with
    # memory off for the request.
    alone = prepared(app, context - len(bare.prompt_ids) + 1, "fit-d")
    assert not alone.engine_tools and not alone.spans
    off = prepared(app, 16, "fit-e", {"x-tandem-memory": "off"})
    assert alone.prompt_ids == off.prompt_ids

    # A max_tokens not even the client's own prompt leaves room for is cut to the room,
    # as vLLM cuts it: memory's parts stay (giving way would not buy the answer its
    # tokens), and the answer gets all the rest.
    cut = prepared(app, context - len(alone.prompt_ids) + 1, "fit-f")
    assert {"shared", "notes"} <= kinds(cut) and cut.engine_tools
    assert cut.params.max_tokens == context - len(cut.prompt_ids)


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_that_fits_alone_is_served_with_memory_left_out(app, tiny_profile, stream):
    fill(app)
    messages = [{"role": "user", "content": QUESTION}]
    _, own, _ = app.chat(messages, "ok", headers={"X-Tandem-Memory": "off"}, max_tokens=1)
    room = tiny_profile.max_model_len - own["prompt_tokens"]  # all the rest, for the answer
    _, usage, _ = app.chat(messages, "Port 8003.", stream=stream, max_tokens=room)
    assert usage["prompt_tokens"] == own["prompt_tokens"]
    # One token more than even the client's own prompt leaves: served, the answer's
    # max_tokens cut to the room (vLLM's way; agents ask for 32,000 on any model), and
    # memory's parts back in, since giving way could not buy the answer that token.
    _, usage, _ = app.chat(messages, "ok", stream=stream, max_tokens=room + 1)
    assert usage["prompt_tokens"] > own["prompt_tokens"]


def first_turn(app: InProcessApp, session: str):
    """(messages, the record, its shared span) of a short first turn."""
    first = [{"role": "user", "content": "Hello there."}]
    content, _, _ = app.chat(first, "Hi.", headers={"X-Tandem-Session": session})
    record = app.memory.latest_record("tester", session)
    (shared,) = [s for s in record.spans if s.kind == "shared"]
    return [*first, {"role": "assistant", "content": content}], record, shared


def test_a_card_left_out_to_fit_comes_back_when_there_is_room(template_app, tiny_profile):
    app, session = template_app, f"back-{uuid.uuid4().hex[:6]}"
    headers = {"X-Tandem-Session": session}
    history, record, shared = first_turn(app, session)
    # an answer so long that only the card's leaving makes room for it (half its size)
    max_tokens = (tiny_profile.max_model_len - len(record.ids)
                  + (shared.end - shared.start) // 2)
    history.append({"role": "user", "content": "Go on."})
    content, _, _ = app.chat(history, "Going.", headers=headers, max_tokens=max_tokens)
    assert "shared" not in {s.kind for s in app.memory.latest_record("tester", session).spans}
    history += [{"role": "assistant", "content": content},
                {"role": "user", "content": "And now?"}]
    app.chat(history, "Now.", headers=headers)  # room again: the card is back
    assert "shared" in {s.kind for s in app.memory.latest_record("tester", session).spans}


def test_without_max_tokens_memory_leaves_the_answer_its_reserve(template_app, tiny_profile):
    app = template_app
    _, record, shared = first_turn(app, f"measure-{uuid.uuid4().hex[:6]}")
    context, reserve = tiny_profile.max_model_len, answer_reserve(tiny_profile.max_model_len)
    size = shared.end - shared.start
    base = len(record.ids) - size  # the catalog, a short message and its answer
    # with the card, less than the reserve is left (but room enough on a plain server)
    words = context - reserve - base - min(size, reserve) // 2
    big = [{"role": "user", "content": "word " * words}]
    for max_tokens, card in ((None, False), (16, True)):
        session = f"reserve-{uuid.uuid4().hex[:6]}"
        extra = {} if max_tokens is None else {"max_tokens": max_tokens}
        _, usage, response = app.chat(big, "Ok.", headers={"X-Tandem-Session": session},
                                      **extra)
        assert response.status_code == 200
        kinds = {s.kind for s in app.memory.latest_record("tester", session).spans}
        assert ("shared" in kinds) is card, (max_tokens, usage)
        if not card:
            assert context - usage["prompt_tokens"] >= reserve


def test_a_dense_engine_reuses_any_whole_block(engine):
    """No reuse block: the dense profiles' layouts stay as they were (no padding)."""
    assert engine.reuse_block is None


def test_a_turn_renders_its_conversation_once(
        template_app, monkeypatch):
    """Through the real app and engine, memory on, each chat template: a new session's
    request renders its conversation once (with the generation prompt, split where the
    two renders split it), a replayed turn once and then the record's messages alone, to
    find where its ids end (red before: the conversation rendered without and with the
    generation prompt, 2 and 3 renders in the overhead bench's profile; issue 58, item 4);
    the replayed turn still reads the record from the prefix cache."""
    engine = template_app.app.state.tandem.engine
    renders: list[bool] = []
    real = engine.tokenizer.apply_chat_template

    def counted(*args, **kwargs):
        renders.append(bool(kwargs.get("add_generation_prompt")))
        return real(*args, **kwargs)

    def session(name: str) -> dict:
        return {"X-Tandem-Session": f"renders-{name}-{uuid.uuid4().hex[:8]}"}

    opening = [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "Which port does the API use?"}]
    warm = session("warm")  # each template's one-time probes (its generation prompt, and
    content, _usage, _response = template_app.chat(opening, "Port 8080.", headers=warm)
    template_app.chat([*opening, {"role": "assistant", "content": content},  # its reasoning)
                       {"role": "user", "content": "Thanks."}], "Noted.", headers=warm)
    monkeypatch.setattr(engine.tokenizer, "apply_chat_template", counted)
    headers, history = session("counted"), list(opening)
    content, _usage, _response = template_app.chat(history, "Port 8080.", headers=headers)
    assert renders == [True]  # a new session: the one render
    for question in ("And the admin port?", "And TLS?"):
        history += [{"role": "assistant", "content": content},
                    {"role": "user", "content": question}]
        renders.clear()
        content, usage, _response = template_app.chat(history, "Port 9090.", headers=headers)
        # the request's one render, then only the record's prefixes, which show where its
        # ids end (Qwen2.5's rule for earlier reasoning renders an earlier one too)
        assert renders[0] and renders.count(True) == 1, renders
        assert usage["prompt_tokens_details"]["cached_tokens"] > 0  # the record replayed
