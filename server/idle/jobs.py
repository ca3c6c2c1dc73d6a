"""The cognition jobs inside the server: the controller, the models, the idle-time runs.

The idle loop calls `tick`: the first due job of any user runs as a background turn,
unless a client request is in flight. `run` is a manual run (admin route, CLI). Either
way a job is never started twice at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from conductor.memory.services import MemoryServices
from conductor.memory.types import (
    JOBS,
    JobBackend,
    JobCaps,
    JobController,
    JobModel,
    JobModels,
    JobRun,
    endpoint_model,
    key_env_allowed,
    run_job,
    utc_now,
)
from engine.backend import EngineBackend
from engine.profiles import Profile, ProfileError
from server.http.load_tracking import ServerLoad
from server.idle.idle import IdleService
from server.idle.job_backends import EndpointJobBackend, EngineJobBackend
from server.idle.prewarm import PrewarmRun
from server.turn.continuous import conversation_prefix_ids, window_bounds

log = logging.getLogger("tandem.jobs")
JOB_MAX_TOKENS = 1536
CONSOLIDATE = "working_memory.consolidate"



def profile_key_envs(profile) -> frozenset[str]:
    """The key variables the profile itself names (its job endpoints, its embedder)."""
    named = {env for *_, env in profile.memory.job_endpoints if env}
    if profile.memory.search_embedder is not None and profile.memory.search_embedder[2]:
        named.add(profile.memory.search_embedder[2])
    return frozenset(named)

class JobBusy(Exception):
    """The job is running already."""


def profile_job_models(profile: Profile) -> dict[str, JobModel]:
    models = {}
    for job, base_url, model, key_env in profile.memory.job_endpoints:
        if job not in JOBS:
            raise ProfileError(f"{profile.path}: key 'memory.jobs.{job}': no such job "
                               f"(jobs: {', '.join(JOBS)})")
        try:
            models[job] = endpoint_model(base_url, model, key_env, profile_key_envs(profile))
        except ValueError as exc:
            raise ProfileError(f"{profile.path}: key 'memory.jobs.{job}.model': {exc}") from None
    return models


class JobService(IdleService):
    name = "jobs"

    def __init__(self, memory: MemoryServices, engine: EngineBackend, profile: Profile,
                 clock: Callable[[], datetime] = utc_now, door: ServerLoad | None = None) -> None:
        super().__init__(memory, engine, door)
        self.profile = profile
        self.mode = profile.memory.jobs_mode
        self.controller = JobController(memory.root, clock,
                                        last_seq=lambda user: memory.layers(user).history.last_seq)
        self.models = JobModels(memory.root / "jobs" / "models.json",
                                profile_job_models(profile))
        self.caps = JobCaps()
        self.max_tokens = JOB_MAX_TOKENS
        # Users whose conversation prefix changed under them (a consolidation): prefilled
        # in idle time so their next message finds it cached.
        self.prewarm_due: set[str] = set()
        self.live_tokens = 0  # tokens the engine has given jobs so far (for the bench)

    def backend(self, job: str, user: str | None = None) -> JobBackend:
        model = self.models.get(job)
        if model.inherits:
            return EngineJobBackend(self.engine, self.memory.latest_record, self._count_tokens,
                                    cache_salt=self.memory.cache_salt(user))
        if model.api_key_env and not key_env_allowed(model.api_key_env,
                                                     profile_key_envs(self.profile)):
            # a choice saved before the rule (or written by hand): no key goes out
            log.warning("job %s: its endpoint's key variable is not one a job may use; "
                        "the job runs without a key", job)
            return EndpointJobBackend(model.base_url, model.model, None)
        return EndpointJobBackend(model.base_url, model.model, model.api_key_env)

    def _count_tokens(self, n: int) -> None:
        self.live_tokens += n

    async def tick(self) -> list[JobRun]:
        """Prefill a conversation a consolidation changed, else run the first due job;
        when jobs are on and no client is waiting."""
        if self.client_busy():
            return []
        if self.prewarm_due:  # a manual consolidation's too, jobs on or off
            await self.prewarm_conversation(next(iter(self.prewarm_due)))
            return []
        if self.mode == "off":
            return []
        due = self.controller.next_due()
        if due is None:
            return []
        try:
            return self.kept([await self.run(due.user, due.spec.name, due.trigger)])
        except JobBusy:
            return []

    async def run(self, user: str, job: str, trigger: str = "manual",
                  script: str | None = None) -> JobRun:
        if not self.controller.start(user, job, trigger):
            raise JobBusy(job)
        try:
            run = await run_job(JOBS[job], self.memory.layers(user), self.backend(job, user),
                                trigger, window_bounds(self.profile), self.engine.count_tokens,
                                self.caps, self.max_tokens, self.controller.clock, script)
        finally:
            self.controller.finish(user, job)
        if self.memory.metrics is not None:
            self.memory.metrics.background_run(job, run.outcome)
        if job == CONSOLIDATE and run.outcome == "changed":
            self.prewarm_due.add(user)
        if run.files_changed:
            self.memory.on_change(user)
        # Codes and counts only: a run's reason never holds the model's text.
        log.info("job %s (%s) for a user: %s%s", job, trigger, run.outcome,
                 f" ({run.reason})" if run.reason else "")
        return run

    async def prewarm_conversation(self, user: str) -> PrewarmRun:
        """One background token on the conversation's new prefix; a preempted prefill
        stays due."""
        ids = conversation_prefix_ids(self.engine, self.profile, self.memory, user)
        cached, outcome = await self.prefill(user, ids)
        if outcome == "done":
            self.prewarm_due.discard(user)
        if self.memory.metrics is not None:
            self.memory.metrics.background_run("conversation_prewarm", outcome)
        log.info("conversation prewarm %s: %d prompt tokens, %d cached", outcome, len(ids),
                 cached)
        return PrewarmRun(len(ids), cached, outcome)
