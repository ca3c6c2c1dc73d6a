"""The secret detector measured on the labelled lines in tests/data/secrets (issue 22)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.notes import NoteStore
from conductor.notes.secrets import has_secret

DATA = Path(__file__).parents[1] / "data" / "secrets"
RECALL_MIN = 0.98
FALSE_REFUSALS_MAX = 0.02
# The issue's body: an AWS key id, and its secret after the word "secret" (no = or :).
ISSUE_BODY = ("key id AKIA" + "IOSFODNN7EXAMPLE secret " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"
              + "EXAMPLEKEY")


def lines(name: str) -> list[str]:
    return [line.replace("\\n", "\n") for line in (DATA / name).read_text().splitlines()]


def test_the_labelled_set_has_enough_of_both():
    assert len(lines("secrets.txt")) >= 150 and len(lines("ordinary.txt")) >= 150


def test_recall_on_secret_lines_is_at_least_98_percent():
    secret = lines("secrets.txt")
    missed = [line for line in secret if not has_secret(line)]
    assert 1 - len(missed) / len(secret) >= RECALL_MIN, missed


def test_ordinary_lines_are_refused_at_most_2_percent():
    ordinary = lines("ordinary.txt")
    refused = [line for line in ordinary if has_secret(line)]
    assert len(refused) / len(ordinary) <= FALSE_REFUSALS_MAX, refused


def test_the_issues_body_is_refused_as_mostly_secret(tmp_path):
    result = NoteStore(tmp_path, "u").add(title="aws access", body=ISSUE_BODY,
                                          kind="reference", scope="user")
    assert not result.ok and result.reason == "secret"
    assert "mostly secret" in result.detail


@pytest.mark.parametrize("body", [
    "The deploy role reads its key from the vault; for local runs the key is "
    "sk-proj-" + "aB3dE5gH7jK9mN1pQ3sT" * 2 + " until we rotate it next week.",
    "Use the staging database with postgres://app:" + "s3cr3tPass" + "@db:5432/app "
    "and run the migrations before the integration tests on Monday mornings.",
])
def test_a_fact_with_a_secret_in_it_is_kept_with_the_secret_redacted(tmp_path, body):
    result = NoteStore(tmp_path, "u").add(title="local setup", body=body, kind="reference",
                                          scope="user")
    assert result.ok and "[redacted:" in result.note.body
    assert "aB3dE5gH7jK9mN1pQ3sT" not in result.note.body and "s3cr3tPass" not in result.note.body
