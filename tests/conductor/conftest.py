"""Fixtures for the note store tests: a tmp memory root and an injectable clock."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

# Helper modules of these tests (notes_helpers, dedupe_pairs) import by name in any
# pytest import mode.
sys.path.insert(0, str(Path(__file__).parent))

from notes_helpers import FakeClock  # noqa: E402

from conductor.notes import NoteStore  # noqa: E402


@pytest.fixture(autouse=True)
def _no_real_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test may touch the real ~/.tandem."""
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "tandem-home"))
    yield


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2025, 3, 10, 12, 0, tzinfo=UTC))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "home" / "memory"


@pytest.fixture
def store(root: Path, clock: FakeClock) -> NoteStore:
    return NoteStore(root, "alice", clock=clock)
