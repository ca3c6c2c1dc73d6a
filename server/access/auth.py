"""Who may talk to the engine: `Authorization: Bearer KEY` on every `/v1` route.

Auth is on when the server has a key of its own (`--api-key`, `$TANDEM_API_KEY`) or any
named key (`tandem keys add LABEL`). The engine's own key is the engine's user; a named
key is the user its label names: its own notes, sessions and memory tokens. With auth
off (no key at all) the server answers loopback only, unless told otherwise
(`--insecure-no-auth`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass, field

from server.access.keys import KeyStore
from server.http.errors import APIError

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
NO_KEY_LEFT = ("this server answers other machines and has no API key left: add one with "
               "`tandem keys add LABEL` (or restart it with --api-key)")
log = logging.getLogger("tandem.auth")


def is_loopback(host: str | None) -> bool:
    return host in LOOPBACK or (host or "").startswith("127.")


@dataclass
class Auth:
    api_key: str | None = None  # the engine's own key: its user is the engine's user
    keys: KeyStore | None = None  # named keys: each label is a user
    engine_user: str = field(default="local")
    # Serving other machines: a key is needed for the server's whole life, so revoking the
    # last named key (or losing keys.json) shuts the door rather than opening it.
    required: bool = False
    _said_no_key_at: float = field(default=0.0, repr=False)

    def has_a_key(self) -> bool:
        return self.api_key is not None or (self.keys is not None and self.keys.has_keys())

    def enabled(self) -> bool:
        return self.required or self.has_a_key()

    async def user_for(self, authorization: str | None,
                       peer: str | None = None) -> str | None:
        """The user the request's key names; None when auth is off. 401 when the key is
        missing or not a valid one."""
        if not self.enabled():
            return None
        if not self.has_a_key():
            now = time.monotonic()
            if now - self._said_no_key_at > 60:  # once a minute, not once a request
                self._said_no_key_at = now
                log.warning("every /v1 request is refused: %s", NO_KEY_LEFT)
            raise _unauthorized(NO_KEY_LEFT)
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise _unauthorized("no API key: send 'Authorization: Bearer KEY' (or "
                                "'x-api-key: KEY' on /v1/messages)")
        if self.api_key is not None and hmac.compare_digest(key.encode(), self.api_key.encode()):
            return self.engine_user
        label = await asyncio.to_thread(self.keys.label_for, key, peer) if self.keys else None
        if label is None:
            raise _unauthorized("invalid API key")
        return label


def _unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key", kind="invalid_request_error")


def exposure_problem(host: str, auth: Auth, insecure: bool) -> str | None:
    """Why serving on `host` would hand the engine (and its memory) to the network."""
    if is_loopback(host) or insecure or auth.has_a_key():
        return None
    return (f"--host {host} answers other machines, and no API key is set: anyone who "
            "reaches the port could read and write this user's memory. Give a key with "
            "--api-key KEY (or $TANDEM_API_KEY), add named keys with `tandem keys add "
            "LABEL`, or pass --insecure-no-auth if you mean it.")
