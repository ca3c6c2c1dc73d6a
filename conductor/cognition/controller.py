"""Which job is due for which user, and why: a state trigger (enough turns since the job's
checkpoint) or a schedule (a UTC hour passed since the slot last handled; a slot missed
while the server was down fires once). The order of the jobs emerges from their
thresholds and schedules; nothing here sequences them.

The server's idle loop calls `next_due` and runs what it returns, one background turn at a
time (the writer and prewarms share the slot); `running` keeps a job from starting twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from conductor.cognition.job import JobSpec
from conductor.cognition.job_state import JobState, iso, read_job_state, write_job_state
from conductor.cognition.jobs import JOBS
from conductor.cognition.schedule import last_slot, schedule_due
from conductor.layers.history import HistoryStore
from conductor.layers.paths import LayerFiles, layer_users
from conductor.layers.state import read_state

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class DueJob:
    user: str
    spec: JobSpec
    trigger: str  # state or schedule
    dirty: int


class JobController:
    def __init__(self, root: Path, clock: Clock, last_seq: Callable[[str], int] | None = None,
                 jobs: dict[str, JobSpec] = JOBS) -> None:
        """`last_seq(user)`: the user's last turn number (the server passes its cached
        history index; by default the folder is scanned)."""
        self.root = root
        self.clock = clock
        self.jobs = jobs
        self._last_seq = last_seq or (lambda user: HistoryStore(LayerFiles(root, user)).last_seq)
        self._running: set[tuple[str, str]] = set()  # (user, job)
        self._lock = threading.Lock()

    def dirty(self, user: str, spec: JobSpec, state: JobState | None = None) -> int:
        """Turns the job has not taken in yet, from the files (no layers are created)."""
        files = LayerFiles(self.root, user)
        return spec.dirty(self._last_seq(user), read_state(files),
                          state or read_job_state(files) or JobState())

    def due(self, user: str) -> list[DueJob]:
        """The user's due jobs, in the order of the jobs' table; marks schedule slots
        with nothing new to take in as handled."""
        files = LayerFiles(self.root, user)
        now = self.clock()
        state = self._state(files, now)
        due, touched = [], False
        for name, spec in self.jobs.items():
            if (user, name) in self._running or not state.may_retry(name, now):
                continue
            dirty = self.dirty(user, spec, state)
            if dirty >= spec.threshold:
                due.append(DueJob(user, spec, "state", dirty))
            elif schedule_due(spec.hours, now, state.handled(name)):
                if dirty >= 1:
                    due.append(DueJob(user, spec, "schedule", dirty))
                else:  # nothing new since its last run: the slot passes
                    state.schedule_handled[name] = iso(last_slot(spec.hours, now))
                    touched = True
        if touched:
            write_job_state(files, state)
        return due

    def _state(self, files: LayerFiles, now: datetime) -> JobState:
        """The user's job state; on first sight made with every schedule slot so far
        handled (a new user does not set off the schedules of the past)."""
        state = read_job_state(files)
        if state is None:
            state = JobState(schedule_handled={
                name: iso(slot) for name, spec in self.jobs.items()
                if (slot := last_slot(spec.hours, now)) is not None})
            write_job_state(files, state)
        return state

    def next_due(self) -> DueJob | None:
        for user in layer_users(self.root):
            found = self.due(user)
            if found:
                return found[0]
        return None

    def start(self, user: str, job: str, trigger: str) -> bool:
        """Claim the job for a run; False when it is running already."""
        with self._lock:
            if (user, job) in self._running:
                return False
            self._running.add((user, job))
        files = LayerFiles(self.root, user)
        state = self._state(files, self.clock())
        if trigger == "schedule":  # the slot is handled whatever the run's outcome
            slot = last_slot(self.jobs[job].hours, self.clock())
            if slot is not None:
                state.schedule_handled[job] = iso(slot)
                write_job_state(files, state)
        return True

    def finish(self, user: str, job: str) -> None:
        with self._lock:
            self._running.discard((user, job))

    def running(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._running)
