"""An answer the client sends back without the status lines the server added is the answer
the ledger holds: `ShownAnswers.as_shown` takes what the model wrote back to what the
client was shown AT THAT PLACE (the digest of the conversation before it), and
`as_the_ledger_knows` puts each answer of a conversation in that form, so both forms find
one record and derive one session; the same words written in another conversation ("Noted."
after every remember) are that conversation's own answer."""

from __future__ import annotations

from conductor.ledger.records import VisibleMessage
from conductor.ledger.shown_answers import ShownAnswers
from conductor.memory.context import as_the_ledger_knows, conversation_digest, derive_session

SHOWN = "Noted.\n\n› remembered: the kettle is blue"
OPENING = [VisibleMessage.of("system", "Be brief."), VisibleMessage.of("user", "hi")]
HERE = conversation_digest(OPENING)


def test_what_the_model_wrote_comes_back_as_shown_at_its_place_for_its_user_only():
    answers = ShownAnswers()
    answers.remember("ann", SHOWN, "Noted. ", HERE)
    assert answers.as_shown("ann", "Noted.", HERE) == SHOWN
    assert answers.as_shown("ann", " Noted.\n", HERE) == SHOWN  # outer whitespace aside
    assert answers.as_shown("ann", SHOWN, HERE) == SHOWN
    assert answers.as_shown("bob", "Noted.", HERE) == "Noted."  # another user's answer
    assert answers.as_shown("ann", "Noted!", HERE) == "Noted!"  # never recorded
    elsewhere = conversation_digest([VisibleMessage.of("user", "hello")])
    assert answers.as_shown("ann", "Noted.", elsewhere) == "Noted."  # another place


def test_the_same_words_in_two_conversations_are_each_its_own_answer():
    """Every remember answers "Noted.": conversation A's stripped answer is A's, not the
    newest one B was shown (which would derive a third session and miss A's record)."""
    answers = ShownAnswers()
    a = conversation_digest([VisibleMessage.of("user", "remember the kettle is blue")])
    b = conversation_digest([VisibleMessage.of("user", "remember the car is red")])
    answers.remember("ann", "Noted.\n\n› remembered: kettle", "Noted.", a)
    answers.remember("ann", "Noted.\n\n› remembered: car", "Noted.", b)
    assert answers.as_shown("ann", "Noted.", a) == "Noted.\n\n› remembered: kettle"
    assert answers.as_shown("ann", "Noted.", b) == "Noted.\n\n› remembered: car"


def test_an_empty_answer_is_never_taken_for_a_shown_one():
    """A held-back block alone writes nothing visible: its written text is empty, and an
    assistant message of whitespace is no answer of it."""
    answers = ShownAnswers()
    answers.remember("ann", "› remembered: kettle", "", HERE)
    assert answers.as_shown("ann", "\n", HERE) == "\n"
    assert answers.as_shown("ann", "", HERE) == ""


def test_the_written_form_goes_with_its_shown_one_and_survives_a_restart():
    answers = ShownAnswers(max_answers=2)
    answers.remember("ann", SHOWN, "Noted.", HERE)
    answers.remember("ann", "a\n› forgot: x", "a", HERE)
    answers.remember("ann", "b\n› forgot: y", "b", HERE)  # SHOWN is out of the bound
    assert answers.as_shown("ann", "Noted.", HERE) == "Noted."
    assert answers.as_shown("ann", "a", HERE) == "a\n› forgot: x"
    saved = answers.take_changes()["ann"]
    answers.forget_user("ann")
    assert answers.as_shown("ann", "a", HERE) == "a"
    restarted = ShownAnswers()
    restarted.load("ann", saved)  # what the ledger's files hold, the place included
    assert restarted.as_shown("ann", "a", HERE) == "a\n› forgot: x"
    restarted.load("ann", [(SHOWN, "Noted.")])  # a file of the format before places
    assert restarted.as_written("ann", SHOWN) == "Noted."
    assert restarted.as_shown("ann", "Noted.", HERE) == "Noted."


def test_a_shown_text_written_again_otherwise_leaves_no_dangling_link():
    """Two answers shown alike but written otherwise: the second takes the shown text,
    the first's written form no longer maps to it, and eviction raises nothing."""
    answers = ShownAnswers(max_answers=1)
    shown = "Done.\n\n› remembered: a\n› remembered: b"
    answers.remember("ann", shown, "Done.\n\n› remembered: a", HERE)
    answers.remember("ann", shown, "Done.", HERE)
    assert answers.as_shown("ann", "Done.\n\n› remembered: a", HERE) == \
        "Done.\n\n› remembered: a"
    answers.remember("ann", "c\n› forgot: z", "c", HERE)  # evicts the shown text
    assert answers.as_shown("ann", "Done.", HERE) == "Done."


def test_both_forms_of_an_answer_derive_one_session():
    answers = ShownAnswers()
    answers.remember("ann", SHOWN, "Noted.", HERE)
    shown = as_the_ledger_knows([*OPENING, VisibleMessage.of("assistant", SHOWN)],
                                answers.for_shown("ann"))
    written = as_the_ledger_knows([*OPENING, VisibleMessage.of("assistant", "Noted.")],
                                  answers.for_shown("ann"))
    assert shown == written
    assert derive_session("ann", None, shown) == derive_session("ann", None, written)
    # the tool definitions' pseudo-message is no part of an answer's place
    tools = VisibleMessage.of("tools", "[...]")
    with_tools = as_the_ledger_knows([tools, *OPENING, VisibleMessage.of("assistant", "Noted.")],
                                     answers.for_shown("ann"))
    assert with_tools[-1].content == SHOWN
    # a user's message that reads like an answer is not one
    user = as_the_ledger_knows([VisibleMessage.of("user", "Noted.")], answers.for_shown("ann"))
    assert user[0].content == "Noted."
