"""What a web page may do with the server: nothing, unless the operator allows its origin.

A page on any site can make the user's browser send requests to the server: to
127.0.0.1 directly (a cross-site POST, which needs no preflight when its body is
`text/plain`), or through a name of the attacker's that resolves to 127.0.0.1 (DNS
rebinding: the browser then treats the server as the attacker's own origin and lets the
page read the answers). Without a key, either would read or write the user's memory.
Three checks, before anything else runs:

* **Host**: the request must name the server as it listens (an IP address, `localhost`,
  the `--host` name, the machine's own name when listening on every interface, or an
  `--allowed-host`): a rebinding page's requests carry the attacker's name. 421.
* **Origin**: a browser's request from another origin is refused unless `--allowed-origin`
  names it (CORS is then answered for it, preflights included); a page the server serves
  itself is its own origin. Clients that are not browsers send no Origin. 403.
* **JSON bodies only**: a body on a POST, PUT or PATCH must be declared
  `application/json`, so no form or `text/plain` post reaches a JSON route. 415.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from server.http.asgi import scope_header
from server.http.errors import APIError, error_response

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _host_name(host_header: str) -> str:
    """The name in a Host header, without its port, lowercased."""
    host = host_header.strip().lower()
    if host.startswith("["):  # an IPv6 literal: [::1]:8000
        return host[1:host.find("]")] if "]" in host else host
    name, _, port = host.rpartition(":")
    return (name if name and port.isdigit() else host).rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class BrowserPolicy:
    """The names the server answers as and the web origins it lets in."""

    listen_host: str = "127.0.0.1"
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()
    _machine_names: frozenset[str] = field(default_factory=lambda: frozenset(
        n.lower() for n in {socket.gethostname(), socket.getfqdn()} if n))

    def host_allowed(self, host_header: str | None) -> bool:
        if host_header is None:  # HTTP/1.0 without one: no browser sends that
            return True
        name = _host_name(host_header)
        # An IP literal cannot be rebound: a page that reached the server by its address
        # is that address's own origin.
        if _is_ip(name) or name == "localhost" or name.endswith(".localhost"):
            return True
        if name == self.listen_host.lower() or name in self.allowed_hosts:
            return True
        return self.listen_host in WILDCARD_HOSTS and name in self._machine_names

    def origin_allowed(self, origin: str, host_header: str | None, scheme: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if origin in self.allowed_origins:
            return True
        # A page the server serves itself (the Memory screen) is its own origin.
        return host_header is not None and origin == f"{scheme}://{host_header.lower()}"


def _has_body(scope: Scope) -> bool:
    length = scope_header(scope, b"content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return scope_header(scope, b"transfer-encoding") is not None


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


class BrowserGuard:
    """The Host, Origin and content-type checks, as plain ASGI middleware (outermost)."""

    def __init__(self, app: ASGIApp, policy: BrowserPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> APIError | None:
        host = scope_header(scope, b"host")
        if not self.policy.host_allowed(host):
            return APIError(421, "this server does not answer as that host name; start it "
                            "with --allowed-host NAME to answer as one",
                            code="host_not_allowed")
        origin = scope_header(scope, b"origin")
        if origin is not None and not self.policy.origin_allowed(
                origin, host, scope.get("scheme", "http")):
            return APIError(403, "requests from web pages of another origin are refused; "
                            "start the server with --allowed-origin ORIGIN to allow one",
                            code="origin_not_allowed")
        if scope["method"] in BODY_METHODS and _has_body(scope) and not _is_json(
                scope_header(scope, b"content-type")):
            return APIError(415, "the request body must be JSON, sent as Content-Type: "
                            "application/json", code="unsupported_media_type")
        return None
