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
