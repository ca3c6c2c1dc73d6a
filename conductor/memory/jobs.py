"""The background jobs the server schedules and shows: the controller, the job table, runs
and their state, the nightly pass.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/background/`, and nothing deeper."""

from __future__ import annotations

from conductor.background.backend import JobAnswer, JobBackend, JobPrompt
from conductor.background.controller import JobController
from conductor.background.job import Caps
from conductor.background.job_models import (
    INHERIT,
    JobModel,
    JobModels,
    endpoint_model,
    key_env_allowed,
)
from conductor.background.job_state import read_job_state
from conductor.background.jobs import JOBS
from conductor.background.nightly import nightly_loop, run_nightly, run_nightly_all
from conductor.background.runner import JobRun, recent_runs, run_job, utc_now

__all__ = [
    "Caps",
    "INHERIT",
    "JOBS",
    "JobAnswer",
    "JobBackend",
    "JobController",
    "JobModel",
    "JobModels",
    "JobPrompt",
    "JobRun",
    "endpoint_model",
    "key_env_allowed",
    "nightly_loop",
    "read_job_state",
    "recent_runs",
    "run_job",
    "run_nightly",
    "run_nightly_all",
    "utc_now",
]
