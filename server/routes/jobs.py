"""Admin routes of the cognition jobs: list them, run one now, choose its model, read the
run records. The admin rule: `server.access.admin`."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from conductor.memory.types import (
    INHERIT,
    JOBS,
    endpoint_model,
    read_job_state,
    recent_runs,
)
from server.access.admin import user_named
from server.http.errors import APIError
from server.idle.jobs import JobBusy, JobService, profile_key_envs

MAX_RUNS_PAGE = 200


class JobRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str | None = None
    script: str | None = None  # scripted profiles only: the job's JSON answer


class JobModelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inherit: bool = False
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None


def job_router(state) -> APIRouter:
    router = APIRouter(prefix="/v1/conductor/jobs")

    async def service(request: Request) -> JobService:
        await state.admin.check(request)
        if state.jobs is None:
            raise APIError(503, "the engine is still loading", code="engine_not_ready",
                           kind="server_error")
        return state.jobs

    def user_of(name: str | None) -> str:
        """The folder of `?user=` (or the body's user), default the engine's own."""
        return user_named(name, state.memory.settings.user_name)

    def known(job: str) -> str:
        if job not in JOBS:
            raise APIError(404, f"no job {job!r}; jobs: {', '.join(JOBS)}", code="not_found")
        return job

    @router.get("")
    async def list_jobs(request: Request, user: str | None = None) -> dict:
        jobs = await service(request)
        who = user_of(user)
        running = jobs.controller.running()
        job_state = read_job_state(jobs.memory.layers(who).files)
        return {"mode": jobs.mode, "user": who, "data": [{
            "job": name, "schedule_utc_hours": list(spec.hours),
            "state_threshold": spec.threshold, "dirty": jobs.controller.dirty(who, spec),
            "last_run": (job_state.last_run.get(name) if job_state else None),
            "model": jobs.models.get(name).describe(), "running": (who, name) in running,
        } for name, spec in JOBS.items()]}

    @router.post("/{job}/run")
    async def run_job(job: str, body: JobRunRequest, request: Request) -> dict:
        jobs = await service(request)
        if body.script is not None and not state.profile.scripted:
            raise APIError(400, "scripts are only accepted by scripted profiles",
                           code="invalid_value", param="script")
        try:
            run = await jobs.run(user_of(body.user), known(job), "manual", body.script)
        except JobBusy:
            raise APIError(409, f"{job} is running already", code="job_running") from None
        return asdict(run)

    @router.put("/{job}/model")
    async def set_model(job: str, body: JobModelRequest, request: Request) -> dict:
        jobs = await service(request)
        known(job)
        if body.inherit:
            model = INHERIT
        else:
            if body.base_url is None or body.model is None:
                raise APIError(400, "give base_url and model, or inherit: true",
                               code="invalid_value", param="base_url")
            try:
                model = endpoint_model(body.base_url, body.model, body.api_key_env,
                                       profile_key_envs(state.profile))
            except ValueError as exc:
                raise APIError(400, str(exc), code="invalid_value") from None
        jobs.models.set(job, model)
        return {"job": job, "model": model.describe()}

    @router.get("/runs")
    async def runs(request: Request, limit: int = 20, user: str | None = None) -> dict:
        jobs = await service(request)
        if not 1 <= limit <= MAX_RUNS_PAGE:
            raise APIError(400, f"limit must be between 1 and {MAX_RUNS_PAGE}",
                           code="invalid_value", param="limit")
        return {"object": "list", "data": recent_runs(jobs.memory.layers(user_of(user)), limit)}

    return router
