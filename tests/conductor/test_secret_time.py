"""The secret check costs time linear in its text's length, whatever the text: a
6,000-character body of `-` once stalled the server 4.5 s (a quadratic pattern). Measured
as a ratio in one run (16 KB against 4 KB of the same seed: 4 is linear, 16 quadratic);
`python -m bench.secrets.fuzz` reports the worst time per KB."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.secrets.fuzz import ALPHABET, SEEDS, best_time, repeated
from conductor.notes.secrets import find_secrets, redact


@pytest.mark.parametrize("seed", SEEDS)
def test_the_secret_check_takes_time_linear_in_the_texts_length(seed):
    # CPU time of this thread, best of five: wall time under a loaded CI machine read 28x
    # for a linear pattern once (a core taken away mid-run), and CPU time does not.
    def timed(kb: int) -> float:
        return best_time(repeated(seed, kb), repeats=5, clock=time.thread_time)

    small, large = timed(4), timed(16)
    assert large < 10 * small + 0.01, (seed, small, large)  # quadratic would be 16x


def test_a_long_body_is_refused_by_its_length_before_any_pattern_runs(tmp_path):
    from conductor.notes import NoteStore

    store = NoteStore(tmp_path, "u")
    result = store.add(title="dashes", body="-" * 60_000, kind="reference", scope="user",
                       source="cli", has_user_message=True)
    assert (result.ok, result.reason) == (False, "body_too_long")


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=400))
def test_a_redacted_text_holds_no_secret_the_check_would_find_again(text):
    once = redact(text).text
    assert redact(once).text == once
    for finding in find_secrets(text):
        assert 0 <= finding.start < finding.end <= len(text)
