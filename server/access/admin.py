"""The admin rule: who may use the `/v1/conductor/...` admin routes and the Memory screen.

* **No admin password set**: loopback clients only, not relayed by a trusted proxy, with
  the engine user's API key where the server has keys (the rule of before).
* **A password set** (`tandem admin password`): a credential from any address, either
  - a screen session: the cookie `tandem_admin` (HttpOnly, SameSite=Strict, Secure over
    TLS) that `POST /v1/conductor/admin/login` sets, plus its CSRF token in
    `X-CSRF-Token` on every write; or
  - `Authorization: Bearer <admin password>`, for scripts (nothing ambient: no CSRF).

Failed logins and bearers are slowed: from the fourth failure of an address within
`FAILURE_WINDOW_S`, each answer waits twice as long as the last (at most `MAX_DELAY_S`),
and past `MAX_FAILURES` the address is refused (429) without a check until the window
passes. A signed-in session lasts `SESSION_IDLE_S` without use and ends when the password
changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from starlette.requests import Request

from conductor.storage.paths import valid_user
from server.access.admin_password import AdminPassword
from server.access.auth import is_loopback
from server.http.errors import APIError

COOKIE = "tandem_admin"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_IDLE_S = 12 * 3600
FAILURE_WINDOW_S = 300.0
FREE_FAILURES = 3
MAX_DELAY_S = 8.0
MAX_FAILURES = 10
MAX_SESSIONS = 64
ADMIN_PREFIX = "/v1/conductor/"
USER_ROUTES = ("/v1/conductor/converse",)  # a key holder's own conversation, not admin
# Open to anyone who reaches the server (the key check passes them): the screen's page and
# assets hold no data, and the session routes are how a browser signs in.
SCREEN_PREFIX = "/memory"
SESSION_PREFIX = "/v1/conductor/admin/"


def is_admin_path(path: str) -> bool:
    return path.startswith(ADMIN_PREFIX) and not path.startswith(USER_ROUTES)


def is_screen_path(path: str) -> bool:
    """The screen's page, its assets and the sign-in routes."""
    return (path == SCREEN_PREFIX or path.startswith(SCREEN_PREFIX + "/")
            or path.startswith(SESSION_PREFIX))


@dataclass
class ScreenSession:
    csrf: str
    password_version: str
    last_used: float


class AdminGate:
    """The admin rule over the password, the screen sessions and the failure count."""

    def __init__(self, password: AdminPassword, settings) -> None:
        self.password = password
        self.settings = settings  # MemorySettings: the engine user and trusted proxies
        self._lock = threading.Lock()
        self._sessions: dict[bytes, ScreenSession] = {}  # sha256(cookie) -> session
        self._failures: dict[str | None, list[float]] = {}
        self.clock = time.monotonic

    # -- the check every admin route makes -----------------------------------------------
    async def check(self, request: Request) -> None:
        """Raise the 401/403 the request earns; return when it may use an admin route."""
        if not self.password.is_set():
            self._check_local(request)
            return
        session = self.session_of(request)
        if session is not None:
            if request.method not in SAFE_METHODS and not hmac.compare_digest(
                    request.headers.get(CSRF_HEADER, "").encode(), session.csrf.encode()):
                raise APIError(403, "a write from the screen needs its X-CSRF-Token",
                               code="csrf_failed", kind="permission_error")
            return
        bearer = _bearer(request)
        if bearer is not None:
            await self.wait_for_turn(_peer(request))
            if await asyncio.to_thread(self.password.verify, bearer):
                return
            self.failed(_peer(request))
        raise APIError(401, "the admin routes need the admin password: sign in on /memory "
                       "or send 'Authorization: Bearer <admin password>'",
                       code="admin_password_required", kind="invalid_request_error")

    async def user(self, request: Request, name: str | None) -> str:
        """Check the admin rule, then the user an admin route is asked about (`?user=`,
        default: the engine's own), lowercased as requests resolve users."""
        await self.check(request)
        user = (name or self.settings.user_name).lower()
        if not valid_user(user):
            raise APIError(400, "not a user name", code="invalid_value", param="user")
        return user

    def _check_local(self, request: Request) -> None:
        peer = _peer(request)
        if not is_loopback(peer) or peer in self.settings.trusted_proxies:
            raise APIError(403, "conductor routes answer local clients only (set an admin "
                           "password with `tandem admin password` to use them from "
                           "elsewhere)", code="admin_only", kind="permission_error")
        key_user = getattr(request.state, "key_user", None)
        if key_user is not None and key_user.lower() != self.settings.user_name.lower():
            raise APIError(403, "conductor routes answer the engine's own user only",
                           code="admin_only", kind="permission_error")

    # -- screen sessions -----------------------------------------------------------------
    def session_of(self, request: Request) -> ScreenSession | None:
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            return None
        key = hashlib.sha256(cookie.encode()).digest()
        version = self.password.version()
        now = self.clock()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if session.password_version != version or now - session.last_used > SESSION_IDLE_S:
                del self._sessions[key]
                return None
            session.last_used = now
            return session

    async def login(self, request: Request, password: str) -> tuple[str, ScreenSession]:
        """A new screen session for the right password: (cookie value, session)."""
        peer = _peer(request)
        await self.wait_for_turn(peer)
        if not self.password.is_set():
            raise APIError(409, "no admin password is set: the screen is open on this "
                           "machine without one", code="no_admin_password")
        ok = await asyncio.to_thread(self.password.verify, password)
        if not ok:
            self.failed(peer)
            raise APIError(401, "wrong admin password", code="wrong_admin_password",
                           kind="invalid_request_error")
        self._failures.pop(peer, None)
        cookie = secrets.token_urlsafe(32)
        session = ScreenSession(secrets.token_urlsafe(24), self.password.version() or "",
                                self.clock())
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:  # the least recently used goes
                oldest = min(self._sessions, key=lambda k: self._sessions[k].last_used)
                del self._sessions[oldest]
            self._sessions[hashlib.sha256(cookie.encode()).digest()] = session
        return cookie, session

    def logout(self, request: Request) -> None:
        cookie = request.cookies.get(COOKIE)
        if cookie:
            with self._lock:
                self._sessions.pop(hashlib.sha256(cookie.encode()).digest(), None)

    # -- failures ------------------------------------------------------------------------
    def failed(self, peer: str | None) -> None:
        now = self.clock()
        with self._lock:
            recent = [t for t in self._failures.get(peer, []) if now - t < FAILURE_WINDOW_S]
            recent.append(now)
            self._failures[peer] = recent[-MAX_FAILURES - 1:]

    def delay_for(self, peer: str | None) -> float | None:
        """Seconds the next try of `peer` waits; None when it is refused outright."""
        now = self.clock()
        with self._lock:
            recent = [t for t in self._failures.get(peer, []) if now - t < FAILURE_WINDOW_S]
        if len(recent) >= MAX_FAILURES:
            return None
        extra = len(recent) - FREE_FAILURES
        return 0.0 if extra < 0 else min(MAX_DELAY_S, 0.25 * 2 ** extra)

    async def wait_for_turn(self, peer: str | None) -> None:
        delay = self.delay_for(peer)
        if delay is None:
            raise APIError(429, f"too many wrong admin passwords from this address: wait "
                           f"{int(FAILURE_WINDOW_S // 60)} minutes", code="too_many_failures",
                           kind="rate_limit_error")
        if delay:
            await asyncio.sleep(delay)


def _peer(request: Request) -> str | None:
    return request.client.host if request.client else None


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None
