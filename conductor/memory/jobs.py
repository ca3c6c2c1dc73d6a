"""The background jobs the server schedules and shows: the controller, the job table, runs
and their state, the nightly pass.

Part of memory's front door (`conductor.memory`): what the server may use of
`conductor/cognition/`, and nothing deeper."""

from __future__ import annotations

from conductor.cognition.backend import JobAnswer, JobBackend, JobPrompt
from conductor.cognition.controller import JobController
from conductor.cognition.job import JobCaps
from conductor.cognition.job_models import (
    INHERIT,
    JobModel,
    JobModels,
    endpoint_model,
    key_env_allowed,
)
from conductor.cognition.job_state import read_job_state
from conductor.cognition.jobs import JOBS
from conductor.cognition.nightly import nightly_loop, run_nightly, run_nightly_all
from conductor.cognition.runner import JobRun, recent_runs, run_job
from conductor.storage.clock import utc_now

__all__ = [
    "INHERIT",
    "JOBS",
    "JobAnswer",
    "JobBackend",
    "JobCaps",
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
