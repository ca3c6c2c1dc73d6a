"""The selection of vLLM's server tests (tests/vllm_suite/selection.toml) names its reasons."""

from __future__ import annotations

import tomllib
from pathlib import Path

SELECTION = Path(__file__).parent / "vllm_suite" / "selection.toml"


def _selection() -> dict:
    with open(SELECTION, "rb") as f:
        return tomllib.load(f)


def test_every_exclusion_and_rerun_names_a_reason_the_file_gives():
    selection = _selection()
    for path, entry in selection["files"].items():
        for pattern, reason in entry.get("exclude", {}).items():
            assert reason in selection["reasons"], (path, pattern)
        for pattern, reason in entry.get("rerun", {}).items():
            assert reason in selection["reruns"], (path, pattern)
    for path, reason in selection["excluded_files"].items():
        assert reason in selection["reasons"], path


def test_a_test_run_again_on_failure_is_not_also_excluded():
    selection = _selection()
    for path, entry in selection["files"].items():
        assert not set(entry.get("rerun", {})) & set(entry.get("exclude", {})), path
