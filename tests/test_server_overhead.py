"""The server's own CPU a request under load (issue 58, item 4): what it keeps from one
request to the next instead of computing again, and the heap the collector leaves alone.
The speed is the overhead bench's (`tandem bench --overhead`); these check behaviour."""

from __future__ import annotations

import gc


def test_the_loaded_server_s_heap_is_frozen_out_of_the_collectors_walk(served):
    """Once the engine is up, the objects the server holds for good (the ledger among
    them) are in the collector's permanent generation, which no collection walks."""
    assert gc.get_freeze_count() > 0
    ledger = served.app.state.tandem.memory._ledger
    assert not any(obj is ledger for obj in gc.get_objects())


class CountingTokenizer:
    """The real tokenizer, noting each text given to its `encode`."""

    def __init__(self, real) -> None:
        self._real = real
        self.encoded: list[str] = []

    def encode(self, text: str, **kwargs):
        self.encoded.append(text)
        return self._real.encode(text, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def test_a_matched_notes_tail_is_encoded_once_until_its_text_changes(template_tokenizer):
    """Every request that matches a note carries the same tail text: the second request's
    assembly encodes none of it, with the same ids; an edited note (a new text) is encoded
    afresh, as the tokenizer encodes it."""
    from conductor.memory.turn import Tail
    from server.http.schema import ChatCompletionRequest
    from server.turn.prompt import assemble, hidden_message_ids, render_chat

    tokenizer = CountingTokenizer(template_tokenizer)
    request = ChatCompletionRequest(model="tiny", messages=[{"role": "user", "content": "hi"}])
    rendered = render_chat(tokenizer, request, enable_thinking=False)
    note = Tail("notes", "the deploy window: fridays after 16:00, never on a holiday", ("n1",))
    first = assemble(tokenizer, rendered, None, None, [note]).ids
    tokenizer.encoded.clear()
    assert assemble(tokenizer, rendered, None, None, [note]).ids == first
    assert not any(text and text in note.text for text in tokenizer.encoded), tokenizer.encoded
    edited = Tail("notes", "the deploy window: mondays before noon", ("n1",))
    tokenizer.encoded.clear()
    ids = assemble(tokenizer, rendered, None, None, [edited]).ids
    assert any("mondays" in text for text in tokenizer.encoded)
    assert hidden_message_ids(tokenizer, edited.text) == [
        *template_tokenizer.encode("<|im_start|>system\n", add_special_tokens=False),
        *template_tokenizer.encode(edited.text, add_special_tokens=False),
        *template_tokenizer.encode("<|im_end|>\n", add_special_tokens=False)]
    assert ids != first


def test_the_templates_constant_pieces_are_encoded_once_as_the_tokenizer_encodes_them(
        template_tokenizer):
    """The generation prompt (thinking on and off), a hidden message's opening and its end
    are memoised per tokenizer: their ids are the tokenizer's own for each template, and a
    second request's assembly, a shared context and a note in it, encodes none of them."""
    from conductor.memory.hiding import SHARED_KIND
    from conductor.memory.turn import Tail
    from server.http.schema import ChatCompletionRequest
    from server.turn.prompt import assemble, constant_ids, render_chat

    tokenizer = CountingTokenizer(template_tokenizer)
    request = ChatCompletionRequest(model="tiny", messages=[
        {"role": "system", "content": "Shared head."}, {"role": "user", "content": "hi"}])
    shared = Tail(SHARED_KIND, "the card\n\nthe index: port 8080 is the API")
    note = Tail("notes", "staging hostname: alpha.internal", ("n1",))
    for thinking in (False, True):
        rendered = render_chat(tokenizer, request, enable_thinking=thinking)
        pieces = [rendered.generation_prompt, "<|im_start|>system\n", "<|im_end|>\n"]
        assert all(pieces)
        for piece in pieces:
            assert constant_ids(tokenizer, piece) == tuple(
                template_tokenizer.encode(piece, add_special_tokens=False))
        first = assemble(tokenizer, rendered, None, shared, [note]).ids
        tokenizer.encoded.clear()
        assert assemble(tokenizer, rendered, None, shared, [note]).ids == first
        assert not set(pieces) & set(tokenizer.encoded)
        assert first[-len(constant_ids(tokenizer, pieces[0])):] == list(
            template_tokenizer.encode(pieces[0], add_special_tokens=False))
