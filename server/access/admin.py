"""The admin rule: who may use the `/v1/conductor/...` admin routes and the Memory screen.

* **No admin password set**: loopback clients only, not relayed by a trusted proxy, with
  the engine user's API key where the server has keys (the rule of before).
* **A password set** (`tandem admin password`): a credential from any address, either
  - a screen session: the cookie `tandem_admin` (HttpOnly, SameSite=Strict, Secure over
    TLS) that `POST /v1/conductor/admin/login` sets, plus its CSRF token in
    `X-CSRF-Token` on every write; or
  - `Authorization: Bearer <admin password>`, for scripts (nothing ambient: no CSRF).

Failed logins and bearers are slowed: from the fourth attempt of an address within
`FAILURE_WINDOW_S`, each check waits twice as long as the last (at most `MAX_DELAY_S`),
and after `MAX_FAILURES` the address is refused (429) without a check until the window
passes, even with the right password. An attempt is counted before its check runs and
while it is in flight (`server.access.attempts`), so guesses sent at once are refused as
guesses sent one by one; a right password takes its attempt back, and one already
verified is served without scrypt, but not to an address refused (its cheap check would
be a guessing oracle). At most `MAX_TRACKED` addresses are remembered. A signed-in session
lasts `SESSION_IDLE_S` without use and ends when the password changes.
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

from conductor.memory.types import UserNameError, user_folder, valid_user
from server.access.admin_password import AdminPassword
from server.access.attempts import Attempts
from server.access.auth import is_loopback
from server.access.keys import same_user
from server.http.errors import APIError

COOKIE = "tandem_admin"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_IDLE_S = 12 * 3600
FAILURE_WINDOW_S = 300.0
FREE_FAILURES = 3
MAX_DELAY_S = 8.0
MAX_FAILURES = 10
MAX_TRACKED = 4096  # addresses with recent failures remembered at most
MAX_SESSIONS = 64
ADMIN_PREFIX = "/v1/conductor/"
USER_ROUTES = ("/v1/conductor/converse",)  # a key holder's own conversation, not admin
# Open to anyone who reaches the server (the key check passes them): the screen's page and
# assets hold no data, and the login and logout routes are how a browser signs in. The
# session route is an admin route to the key check: while no password is set, a server
# with keys wants the engine user's key there, as on the others.
SCREEN_PREFIX = "/memory"
SESSION_PREFIX = "/v1/conductor/admin/"
SESSION_ROUTE = SESSION_PREFIX + "session"


def is_admin_path(path: str) -> bool:
    return path.startswith(ADMIN_PREFIX) and not path.startswith(USER_ROUTES)


def is_screen_path(path: str) -> bool:
    """The screen's page, its assets and the login and logout routes."""
    return (path == SCREEN_PREFIX or path.startswith(SCREEN_PREFIX + "/")
            or (path.startswith(SESSION_PREFIX) and path != SESSION_ROUTE))


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
        self.clock = time.monotonic
        # per address: wrong passwords and checks in flight (read at creation, so a test
        # that changes the limits before making the app gets its own)
        self.attempts = Attempts(MAX_FAILURES, FAILURE_WINDOW_S, MAX_TRACKED,
                                 clock=lambda: self.clock())

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
        if bearer is not None and await self.verify(_peer(request), bearer):
            return
        raise APIError(401, "the admin routes need the admin password: sign in on /memory "
                       "or send 'Authorization: Bearer <admin password>'",
                       code="admin_password_required", kind="invalid_request_error")

    async def user(self, request: Request, name: str | None) -> str:
        """Check the admin rule, then the folder of the user an admin route is asked about
        (`?user=`, default: the engine's own; `user_named`)."""
        await self.check(request)
        return user_named(name, self.settings.user_name)

    def _check_local(self, request: Request) -> None:
        peer = _peer(request)
        if not is_loopback(peer) or peer in self.settings.trusted_proxies:
            raise APIError(403, "conductor routes answer local clients only (set an admin "
                           "password with `tandem admin password` to use them from "
                           "elsewhere)", code="admin_only", kind="permission_error")
        key_user = getattr(request.state, "key_user", None)
        if key_user is not None and not same_user(key_user, self.settings.user_name):
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
        if not self.password.is_set():
            raise APIError(409, "no admin password is set: the screen is open on this "
                           "machine without one", code="no_admin_password")
        if not await self.verify(_peer(request), password):
            raise APIError(401, "wrong admin password", code="wrong_admin_password",
                           kind="invalid_request_error")
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
    async def verify(self, peer: str | None, password: str) -> bool:
        """Whether `password` is the admin password, as an attempt of `peer`: 429 when the
        address is out of attempts, slowed from its fourth."""
        if self.attempts.locked_out(peer):
            raise _too_many()
        if self.password.known(password):  # verified before: no scrypt, no attempt
            return True
        check = self.attempts.begin(peer, hashlib.sha256(password.encode()).digest())
        if check is None:
            raise _too_many()
        if not check.leader:  # the same password is being checked: share its answer
            # shielded: a client leaving cancels its wait, not the check it shares
            return await asyncio.shield(asyncio.wrap_future(check.answer))
        ok = False
        try:  # a client that leaves while it waits keeps its attempt counted
            delay = delay_for(check.prior)
            if delay:
                await asyncio.sleep(delay)
            ok = await asyncio.to_thread(self.password.verify, password)
        finally:
            self.attempts.end(check, ok)
        return ok


def user_named(name: str | None, default: str) -> str:
    """The folder of the user an admin route is asked about: `name` (`?user=`, a body's
    `user`), else `default` (the engine's own user). A user's name is mapped by
    `user_folder`, as a key's label and a relayed X-Tandem-User are on the chat routes, so
    `?user=josé` is the folder a key labelled josé writes; a folder as the screen lists
    it (`users_under`: `jose--<hash>`) is that folder, since a name of that reserved form
    is never filed as it is. A 400 `invalid_user` saying why for a name that is no
    one's (empty, over 128 characters, a control character)."""
    given = name or default
    folder = given.lower()
    try:
        if valid_user(folder) and user_folder(folder) != folder:
            return folder  # the mapped form: a folder listed, not a name to map again
        return user_folder(given)
    except UserNameError as exc:
        raise APIError(400, f"user: {exc}", code="invalid_user", param="user") from None


def delay_for(prior: int) -> float:
    """Seconds an attempt waits after `prior` attempts of its address in the window."""
    extra = prior - FREE_FAILURES
    return 0.0 if extra < 0 else min(MAX_DELAY_S, 0.25 * 2 ** extra)


def _too_many() -> APIError:
    return APIError(429, f"too many wrong admin passwords from this address: wait "
                    f"{int(FAILURE_WINDOW_S // 60)} minutes", code="too_many_failures",
                    kind="rate_limit_error")


def _peer(request: Request) -> str | None:
    return request.client.host if request.client else None


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None
