"""The jobs' own state for one user, in ``state/jobs.json``: what each job has seen, the
review's open flags, the schedule slots handled, when a failed job may retry.

The consolidation checkpoint lives with the conversation (``state/conversation.json``):
it is what the prompt replays from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from conductor.layers.paths import LayerFiles
from conductor.storage.atomic import atomic_write

JOBS_STATE_FILE = "jobs.json"


@dataclass(frozen=True)
class Flag:
    """A review's finding about one entry of working or semantic memory."""

    id: str
    problem: str  # stale, unsupported, contradicted
    reason: str


@dataclass
class JobState:
    review_seq: int = 0  # the last turn the verification review saw
    extract_seq: int = 0  # the extraction's own checkpoint
    flags: list[Flag] = field(default_factory=list)
    schedule_handled: dict[str, str] = field(default_factory=dict)  # job -> ISO time
    retry_after: dict[str, str] = field(default_factory=dict)  # job -> ISO time
    last_run: dict[str, dict] = field(default_factory=dict)  # job -> {at, outcome, run_id}

    def handled(self, job: str) -> datetime | None:
        value = self.schedule_handled.get(job)
        return datetime.fromisoformat(value) if value else None

    def may_retry(self, job: str, now: datetime) -> bool:
        value = self.retry_after.get(job)
        return value is None or datetime.fromisoformat(value) <= now


def read_job_state(files: LayerFiles) -> JobState | None:
    """The saved state, or None when there is none yet (or it cannot be read: derived
    bookkeeping, rebuilt from the start)."""
    try:
        raw = json.loads((files.state_dir / JOBS_STATE_FILE).read_text())
        flags = [Flag(**f) for f in raw.pop("flags", [])]
        return JobState(flags=flags, **raw)
    except (OSError, ValueError, TypeError):
        return None


def write_job_state(files: LayerFiles, state: JobState) -> None:
    atomic_write(files.state_dir / JOBS_STATE_FILE, json.dumps(asdict(state), indent=1) + "\n")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")
