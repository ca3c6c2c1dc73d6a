"""Admin routes for the conductor: run the writer on a session now, read or set its mode.

Admin means the machine itself: only loopback clients that are not relayed by a proxy.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel

from server.access.auth import is_loopback
from server.http.errors import APIError


class WriterRunRequest(BaseModel):
    session: str
    user: str | None = None
    script: str | None = None  # scripted profiles only: the writer's answer
    gate_script: str | None = None  # scripted profiles only: the gate's answer


class WriterModeRequest(BaseModel):
    mode: Literal["off", "shadow", "on"]


def check_admin(request: Request, settings) -> None:
    """The admin rule: a loopback client, not relayed by a proxy, with the engine user's key
    (or none where the server has no keys)."""
    peer = request.client.host if request.client else None
    if not is_loopback(peer) or peer in settings.trusted_proxies:
        raise APIError(403, "conductor routes answer local clients only",
                       code="admin_only", kind="permission_error")
    key_user = getattr(request.state, "key_user", None)
    if key_user is not None and key_user.lower() != settings.user_name.lower():
        raise APIError(403, "conductor routes answer the engine's own user only",
                       code="admin_only", kind="permission_error")


def conductor_router(state) -> APIRouter:
    router = APIRouter(prefix="/v1/conductor")

    def admin(request: Request):
        check_admin(request, state.memory.settings)
        if state.writer is None:
            raise APIError(503, "the engine is still loading", code="engine_not_ready",
                           kind="server_error")
        return state.writer

    @router.get("/writer")
    async def writer_status(request: Request) -> dict:
        service = admin(request)
        due = [{"session": s, "trigger": t} for _u, s, t in state.memory.triggers.due()]
        return {"mode": service.writer.mode, "due": due}

    @router.put("/writer")
    async def set_writer_mode(body: WriterModeRequest, request: Request) -> dict:
        service = admin(request)
        service.writer.mode = body.mode
        return {"mode": body.mode}

    @router.post("/writer/run")
    async def run_writer(body: WriterRunRequest, request: Request) -> dict:
        service = admin(request)
        if (body.script is not None or body.gate_script is not None) and not state.profile.scripted:
            raise APIError(400, "scripts are only accepted by scripted profiles",
                           code="invalid_value", param="script")
        if service.writer.mode == "off":
            raise APIError(409, "the writer is off; PUT /v1/conductor/writer to turn it on",
                           code="writer_off")
        user = (body.user or state.memory.settings.user_name).lower()
        run = await service.run(user, body.session, "admin", script=body.script,
                                gate_script=body.gate_script)
        state.memory.triggers.visited(user, body.session, preempted=run.outcome == "preempted")
        return asdict(run)

    return router
