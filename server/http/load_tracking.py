"""The server's load as vLLM's `/load` reports it: generation requests in flight on the API.

vLLM counts a request of its generation routes from the moment its handler starts (its
body read and parsed) until its response (a stream's last event included) has been sent,
and `GET /load` answers `{"server_load": N}` (`--enable-server-load-tracking`; always on
here). Here a request counts once its body has been read whole, so a client that sends
its headers and stalls its body holds nothing up. Plain ASGI, like the server's other
middleware, so counting costs a request no task of its own; it sits inside the key
check, so a refused request is not counted. The count is also what the idle-time work
reads as "a client is here" (`server/idle/idle.py`), so it holds the routes that run the
engine for a client, and not vLLM's other counted ones (count_tokens, a stored
response read back or cancelled), which run no generation.

A background response (`POST /v1/responses` with `background: true`) is answered at once
but runs on: the route counts it from its creation to its end (`ServerLoad.hold`), found
on the request as `request.state.server_load`, so a balancer reading `/load` sees it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http.asgi import route_path

# The routes that run the engine for a client: vLLM's chat (one conversation or a batch),
# completions, Responses and Anthropic Messages (each `@load_aware_call` in vLLM),
# SageMaker's /invocations (either of the first two), and Tandem's continuous conversation.
GENERATION_ROUTES = frozenset({"/v1/chat/completions", "/v1/chat/completions/batch",
                               "/v1/completions", "/invocations", "/v1/responses",
                               "/v1/messages", "/v1/conductor/converse"})


class ServerLoad:
    """The number of generation requests in flight, from the door: a request counts while
    its turn is still being laid out, before the engine has it, so idle work starts
    nothing new once a client has arrived (`IdleService.client_busy`)."""

    def __init__(self) -> None:
        self.in_flight = 0

    def hold(self) -> None:
        """One more generation in flight (a request, or a background response that
        outlives its request); `release` when it ends."""
        self.in_flight += 1

    def release(self) -> None:
        self.in_flight -= 1


class TrackServerLoad:
    """Counts POSTs to the generation routes while they run (ASGI middleware)."""

    def __init__(self, app: ASGIApp, load: ServerLoad) -> None:
        self.app = app
        self.load = load

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" \
                or route_path(scope) not in GENERATION_ROUTES:
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})["server_load"] = self.load  # for work that outlives it
        held = False

        async def counted_once_read() -> Message:
            nonlocal held
            message = await receive()
            if not held and message["type"] == "http.request" \
                    and not message.get("more_body", False):
                held = True  # the body is whole: the handler runs next
                self.load.hold()
            return message

        try:
            await self.app(scope, counted_once_read, send)
        finally:
            if held:
                self.load.release()
