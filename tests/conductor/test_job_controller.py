"""When each cognition job is due: state triggers at and below their thresholds, schedules
with a controllable clock, slots missed while the server was down, one run at a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from conductor.cognition.controller import JobController
from conductor.cognition.job_state import iso, read_job_state, write_job_state
from conductor.cognition.jobs import JOBS
from conductor.layers.paths import LayerFiles
from conductor.layers.state import ConversationState, write_state

USER = "ada"
VERIFY, CONSOLIDATE, EXTRACT = JOBS


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 11, 30, 10, 30, tzinfo=UTC))


def controller(tmp_path, clock: Clock, turns: int) -> JobController:
    LayerFiles(tmp_path, USER).user_dir.mkdir(parents=True)
    return JobController(tmp_path, clock, last_seq=lambda user: turns)


def due(ctl: JobController) -> list[tuple[str, str]]:
    return [(d.spec.name, d.trigger) for d in ctl.due(USER)]


@pytest.mark.parametrize("job", list(JOBS))
def test_a_state_trigger_fires_at_its_threshold_and_not_below(tmp_path, clock, job):
    threshold = JOBS[job].threshold
    below = controller(tmp_path, clock, threshold - 1)
    assert job not in dict(due(below))
    at = JobController(tmp_path, clock, last_seq=lambda user: threshold)
    assert dict(due(at)).get(job) == "state"


def test_all_three_are_due_at_once_in_the_tables_order(tmp_path, clock):
    assert due(controller(tmp_path, clock, 12)) == [(VERIFY, "state"), (CONSOLIDATE, "state"),
                                                   (EXTRACT, "state")]


def test_turns_count_from_each_jobs_own_checkpoint(tmp_path, clock):
    ctl = controller(tmp_path, clock, 12)
    files = LayerFiles(tmp_path, USER)
    write_state(files, ConversationState(checkpoint_seq=10))
    ctl.due(USER)  # first sight: the job state is made
    state = read_job_state(files)
    state.review_seq, state.extract_seq = 5, 0
    write_job_state(files, state)
    assert due(ctl) == [(EXTRACT, "state")]  # 2 for consolidation, 7 for the review


def test_a_new_user_does_not_fire_the_schedules_of_the_past(tmp_path, clock):
    assert due(controller(tmp_path, clock, 1)) == []


def test_an_overdue_schedule_fires_once_whatever_was_missed(tmp_path, clock):
    ctl = controller(tmp_path, clock, 1)
    ctl.due(USER)  # first sight at 10:30: the slots so far are handled
    clock.at += timedelta(days=3)  # the server was down for three days
    assert due(ctl) == [(VERIFY, "schedule"), (CONSOLIDATE, "schedule"), (EXTRACT, "schedule")]
    for job in JOBS:
        assert ctl.start(USER, job, "schedule")
        ctl.finish(USER, job)
    assert due(ctl) == []  # handled: the missed ones do not queue up


def test_a_schedule_fires_when_its_hour_passes(tmp_path, clock):
    ctl = controller(tmp_path, clock, 1)
    ctl.due(USER)
    clock.at = clock.at.replace(hour=14, minute=59)
    assert due(ctl) == []
    clock.at = clock.at.replace(hour=15, minute=0)
    assert due(ctl) == [(VERIFY, "schedule")]


def test_a_slot_with_nothing_new_passes_without_a_run(tmp_path, clock):
    ctl = controller(tmp_path, clock, 0)
    ctl.due(USER)
    clock.at += timedelta(days=1)
    assert due(ctl) == []
    state = read_job_state(LayerFiles(tmp_path, USER))
    assert state.handled(VERIFY) == datetime(2026, 12, 1, 3, tzinfo=UTC)


def test_a_running_job_is_not_started_twice_nor_due(tmp_path, clock):
    ctl = controller(tmp_path, clock, 12)
    assert ctl.start(USER, CONSOLIDATE, "state")
    assert not ctl.start(USER, CONSOLIDATE, "manual")
    assert CONSOLIDATE not in dict(due(ctl))
    ctl.finish(USER, CONSOLIDATE)
    assert CONSOLIDATE in dict(due(ctl))


def test_a_failed_job_waits_before_its_trigger_fires_again(tmp_path, clock):
    ctl = controller(tmp_path, clock, 6)
    files = LayerFiles(tmp_path, USER)
    ctl.due(USER)
    state = read_job_state(files)
    state.retry_after[CONSOLIDATE] = iso(clock.at + timedelta(minutes=10))
    write_job_state(files, state)
    assert CONSOLIDATE not in dict(due(ctl))
    clock.at += timedelta(minutes=10)
    assert dict(due(ctl))[CONSOLIDATE] == "state"


def test_the_job_state_survives_a_restart(tmp_path, clock):
    ctl = controller(tmp_path, clock, 1)
    ctl.due(USER)
    clock.at += timedelta(days=1)
    again = JobController(tmp_path, clock, last_seq=lambda user: 1)  # a new process
    assert (VERIFY, "schedule") in due(again)
