"""The ledger's files, unit tests on real files: what a restart finds again."""

from __future__ import annotations

from conductor.ledger.files import LedgerFiles
from conductor.ledger.records import Ledger, Record, VisibleMessage

ASKED = (VisibleMessage.of("user", "Which port?"), VisibleMessage.of("assistant", "80."))


def record(project: str | None) -> Record:
    return Record(user="u", session="s", messages=ASKED, ids=[1, 2, 3], ended_cleanly=True,
                  project=project)


def saved_and_loaded(tmp_path, ledger: Ledger) -> Ledger:
    files = LedgerFiles(tmp_path)
    files.save(*ledger.take_changes())
    again = Ledger()
    files.load_into(again)
    return again


def test_a_record_keeps_its_project_across_a_restart_and_is_found_only_there(tmp_path):
    ledger = Ledger()
    ledger.record(record("/w/alpha"))
    again = saved_and_loaded(tmp_path, ledger)
    query = [*ASKED, VisibleMessage.of("user", "And TLS?")]
    assert again.find("u", "s", query, "/w/alpha").record.project == "/w/alpha"
    assert again.find("u", "s", query, "/w/beta") is None
    assert again.find("u", "s", query) is None


def test_shown_answers_come_back_per_user_and_a_forgotten_user_loses_the_file(tmp_path):
    from conductor.ledger.files import ShownAnswerFiles
    from conductor.ledger.shown_answers import ShownAnswers

    answers, files = ShownAnswers(max_answers=2), ShownAnswerFiles(tmp_path)
    answers.remember("ann", "Noted.\n› remembered: x", "Noted.")
    answers.remember(None, "Ok.\n› remembered: y", "Ok.")
    files.save(answers.take_changes())
    assert len(list(files.folder.glob("*.json"))) == 2
    again = ShownAnswers()
    assert files.load_into(again) == 2
    assert again.as_written("ann", "Noted.\n› remembered: x") == "Noted."
    assert again.as_written("bob", "Noted.\n› remembered: x") == "Noted.\n› remembered: x"
    assert again.as_written(None, "Ok.\n› remembered: y") == "Ok."
    answers.remember("bob", "A.\n› remembered: z", "A.")
    answers.remember("bob", "B.\n› remembered: z", "B.")  # the bound drops ann's and None's
    files.save(answers.take_changes())
    assert len(list(files.folder.glob("*.json"))) == 1
    (path,) = files.folder.glob("*.json")
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_an_unreadable_shown_answers_file_is_skipped_and_removed(tmp_path):
    from conductor.ledger.files import ShownAnswerFiles
    from conductor.ledger.shown_answers import ShownAnswers

    files = ShownAnswerFiles(tmp_path)
    files.folder.mkdir(parents=True)
    broken = files.folder / "broken.json"
    broken.write_text('{"version": 1, "user": 5, "answers": []}')
    assert files.load_into(ShownAnswers()) == 0
    assert not broken.exists()


def test_a_corrections_versions_come_back_and_older_files_read_without_them(tmp_path):
    from conductor.ledger.files import decode_record, encode_record
    from conductor.ledger.records import Span

    spans = (Span(0, 1, "notes", ("n1",)), Span(1, 2, "correction", ("n1", "n2"), (6, 3)))
    made = Record(user="u", session="s", messages=ASKED, ids=[1, 2, 3], ended_cleanly=True,
                  spans=spans)
    encoded = encode_record(made)
    assert decode_record("u", "s", encoded).spans == spans
    encoded["spans"] = [[0, 1, "notes", ["n1"]]]  # as written before versions
    assert decode_record("u", "s", encoded).spans == (Span(0, 1, "notes", ("n1",)),)
