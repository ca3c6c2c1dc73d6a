"""An answer the client sends back without the status lines the server added is the answer
the ledger holds (issue 68 item 7): `ShownAnswers.as_shown` takes what the model wrote back
to what the client was shown, and `as_the_ledger_knows` puts each answer of a
conversation in that form, so both forms find one record and derive one session."""

from __future__ import annotations

from conductor.ledger.records import VisibleMessage
from conductor.ledger.shown_answers import ShownAnswers
from conductor.memory.context import as_the_ledger_knows, derive_session

SHOWN = "Noted.\n\n› remembered: the kettle is blue"


def test_what_the_model_wrote_comes_back_as_shown_for_its_user_only():
    answers = ShownAnswers()
    answers.remember("ann", SHOWN, "Noted. ")
    assert answers.as_shown("ann", "Noted.") == SHOWN
    assert answers.as_shown("ann", " Noted.\n") == SHOWN  # outer whitespace aside
    assert answers.as_shown("ann", SHOWN) == SHOWN
    assert answers.as_shown("bob", "Noted.") == "Noted."  # another user's answer
    assert answers.as_shown("ann", "Noted!") == "Noted!"  # never recorded


def test_a_shown_text_stays_as_it_is_though_another_answer_wrote_it():
    answers = ShownAnswers()
    answers.remember("ann", "Done.\n\n› remembered: a", "Done.")
    answers.remember("ann", "Done.\n\n› remembered: b", "Done.")  # the newest form wins
    assert answers.as_shown("ann", "Done.") == "Done.\n\n› remembered: b"
    assert answers.as_shown("ann", "Done.\n\n› remembered: a") == "Done.\n\n› remembered: a"


def test_the_written_form_goes_with_its_shown_one():
    answers = ShownAnswers(max_answers=2)
    answers.remember("ann", SHOWN, "Noted.")
    answers.remember("ann", "a\n› forgot: x", "a")
    answers.remember("ann", "b\n› forgot: y", "b")  # SHOWN is out of the bound
    assert answers.as_shown("ann", "Noted.") == "Noted."
    assert answers.as_shown("ann", "a") == "a\n› forgot: x"
    answers.forget_user("ann")
    assert answers.as_shown("ann", "a") == "a"
    answers.load("ann", [(SHOWN, "Noted.")])  # after a restart
    assert answers.as_shown("ann", "Noted.") == SHOWN


def test_both_forms_of_an_answer_derive_one_session():
    answers = ShownAnswers()
    answers.remember("ann", SHOWN, "Noted.")
    opening = [VisibleMessage.of("system", "Be brief."), VisibleMessage.of("user", "hi")]
    shown = as_the_ledger_knows([*opening, VisibleMessage.of("assistant", SHOWN)],
                                answers.for_shown("ann"))
    written = as_the_ledger_knows([*opening, VisibleMessage.of("assistant", "Noted.")],
                                  answers.for_shown("ann"))
    assert shown == written
    assert derive_session("ann", None, shown) == derive_session("ann", None, written)
    # a user's message that reads like an answer is not one
    user = as_the_ledger_knows([VisibleMessage.of("user", "Noted.")], answers.for_shown("ann"))
    assert user[0].content == "Noted."
