"""The Memory screen: its page and assets at `/memory`, and the sign-in routes.

The page and its assets are files of the package (`server/screen/`, no build step, no
CDN) and hold no data: everything it shows comes from the admin routes, under the admin
rule (`server.access.admin`). A script can do all the screen does through those routes.

    GET  /memory, /memory/{tab}                the page (one page; the tab is in the path)
    GET  /memory/static/{file}                 its script and style
    GET  /v1/conductor/admin/session           whether a password is set, signed in, allowed
                                               (and to an admin only: the user, the profile)
    POST /v1/conductor/admin/login             {"password"}: sets the session cookie
    POST /v1/conductor/admin/logout
"""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from server.access.admin import COOKIE, SESSION_IDLE_S
from server.http.errors import APIError

SCREEN_DIR = Path(__file__).resolve().parents[1] / "screen"
ASSETS = {"screen.js": "text/javascript", "screen.css": "text/css"}
TABS = ("notes", "context", "layers", "jobs", "bench")
# The page runs only its own script and style, is never framed, and sends no referrer.
HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; "
           "style-src 'self'; img-src 'self' data:; connect-src 'self'; "
           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}


PAGE = (SCREEN_DIR / "index.html").read_text(encoding="utf-8")


class Login(BaseModel):
    model_config = ConfigDict(extra="forbid")
    password: str = Field(min_length=1, max_length=1024)


class Logout(BaseModel):
    model_config = ConfigDict(extra="forbid")  # no fields: a body, if any, is `{}`


def screen_router(state) -> APIRouter:
    router = APIRouter()
    gate = state.admin

    @router.get("/memory")
    @router.get("/memory/{tab}")
    async def page(request: Request, tab: str = "notes") -> Response:
        if tab not in TABS:
            raise APIError(404, f"no screen {tab!r}; screens: {', '.join(TABS)}",
                           code="not_found")
        # behind a proxy's path prefix (--root-path) the page's links carry it
        root = html.escape(request.scope.get("root_path", "").rstrip("/"), quote=True)
        return Response(PAGE.replace("__ROOT__", root), media_type="text/html",
                        headers=HEADERS)

    @router.get("/memory/static/{name}")
    async def asset(name: str) -> Response:
        if name not in ASSETS:  # a fixed list: no path ever reaches the file system
            raise APIError(404, f"no asset {name!r}", code="not_found")
        return FileResponse(SCREEN_DIR / name, media_type=ASSETS[name], headers=HEADERS)

    @router.get("/v1/conductor/admin/session")
    async def session(request: Request) -> dict:
        # Whoever the admin rule does not admit learns only what the sign-in page needs:
        # a form (a password is set) or why the screen is closed to them. The engine's
        # user and profile are the admin's to see (on loopback without a password, the
        # admin is this machine: the rule's own check, with the engine user's key where
        # the server has keys, which the key check asks for on this route).
        try:
            await gate.check(request)
        except APIError as exc:
            return {"password_set": gate.password.is_set(), "signed_in": False,
                    "csrf": None, "allowed": False, "reason": exc.message}
        signed_in = gate.session_of(request)
        return {"password_set": gate.password.is_set(), "signed_in": signed_in is not None,
                "csrf": signed_in.csrf if signed_in is not None else None,
                "allowed": True, "reason": None,
                "user": state.memory.settings.user_name, "profile": state.profile.name}

    @router.post("/v1/conductor/admin/login")
    async def login(body: Login, request: Request) -> JSONResponse:
        cookie, session = await gate.login(request, body.password)
        response = JSONResponse({"ok": True, "csrf": session.csrf})
        response.set_cookie(COOKIE, cookie, max_age=SESSION_IDLE_S, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https",
                            path="/")
        return response

    @router.post("/v1/conductor/admin/logout")
    async def logout(request: Request, body: Logout | None = None) -> JSONResponse:
        gate.logout(request)
        response = JSONResponse({"ok": True})
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    return router
