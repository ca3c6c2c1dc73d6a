"""Admin routes for the conductor: run the writer on a session now, read or set its mode.

The admin rule (`server.access.admin`): this machine's own clients while no admin password
is set, the password's holder once one is.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel

from server.access.admin import user_named
from server.http.errors import APIError


class WriterRunRequest(BaseModel):
    session: str
    user: str | None = None
    script: str | None = None  # scripted profiles only: the writer's answer
    gate_script: str | None = None  # scripted profiles only: the gate's answer


class WriterModeRequest(BaseModel):
    mode: Literal["off", "shadow", "on"]


def conductor_router(state) -> APIRouter:
    router = APIRouter(prefix="/v1/conductor")

    async def admin(request: Request):
        await state.admin.check(request)
        if state.writer is None:
            raise APIError(503, "the engine is still loading", code="engine_not_ready",
                           kind="server_error")
        return state.writer

    @router.get("/writer")
    async def writer_status(request: Request) -> dict:
        service = await admin(request)
        due = [{"session": s, "trigger": t} for _u, s, t in state.memory.idle.triggers.due()]
        return {"mode": service.writer.mode, "due": due}

    @router.put("/writer")
    async def set_writer_mode(body: WriterModeRequest, request: Request) -> dict:
        service = await admin(request)
        service.writer.mode = body.mode
        return {"mode": body.mode}

    @router.post("/writer/run")
    async def run_writer(body: WriterRunRequest, request: Request) -> dict:
        service = await admin(request)
        if (body.script is not None or body.gate_script is not None) and not state.profile.scripted:
            raise APIError(400, "scripts are only accepted by scripted profiles",
                           code="invalid_value", param="script")
        if service.writer.mode == "off":
            raise APIError(409, "the writer is off; PUT /v1/conductor/writer to turn it on",
                           code="writer_off")
        user = user_named(body.user, state.memory.settings.user_name)  # their folder
        run = await service.run(user, body.session, "admin", script=body.script,
                                gate_script=body.gate_script)
        state.memory.idle.triggers.visited(user, body.session, preempted=run.outcome == "preempted")
        return asdict(run)

    return router
