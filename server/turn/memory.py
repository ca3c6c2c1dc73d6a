"""Who a request is for, from its headers and peer: user, session, project and memory's
mode (`conductor.memory` decides what memory then does with it)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from conductor.memory.context import MemoryContext, derive_session
from conductor.memory.settings import MemorySettings
from conductor.memory.types import VisibleMessage, valid_session
from server.access.user_names import UserNameError, header_text, user_folder
from server.http.errors import APIError
from server.http.schema import ChatCompletionRequest

MEMORY_HEADER = "x-tandem-memory"
USER_HEADER = "x-tandem-user"
SESSION_HEADER = "x-tandem-session"
PROJECT_HEADER = "x-tandem-project"
TOKEN_HEADER = "x-tandem-memory-token"
# (user, project, the request's messages) -> the conversation's id
DerivedSession = Callable[[str | None, str | None, Sequence[VisibleMessage]], str]
MEMORY_SWITCHES = ("off", "read")  # what X-Tandem-Memory may say: it only turns memory down


def memory_switch(value: str | None) -> str | None:
    """X-Tandem-Memory's value, lower-cased (None: none sent); a 400 for any other, on
    the chat routes and /mcp alike."""
    switch = (value or "").strip().lower() or None
    if value is not None and switch not in MEMORY_SWITCHES:
        raise APIError(400, "X-Tandem-Memory must be 'off' or 'read'", code="invalid_value",
                       param="X-Tandem-Memory")
    return switch


def request_messages(request: ChatCompletionRequest) -> list[VisibleMessage]:
    """The request's messages in the ledger's terms (as `prompt.visible_messages`, without
    the tools): what a derived session id is made of."""
    out = []
    for message in request.messages:
        role = "system" if message.role == "developer" else message.role
        try:
            text = message.text()
        except ValueError:  # non-text parts are refused later, with a clear error
            text = ""
        calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        out.append(VisibleMessage.of(role, text, calls))
    return out


def request_user(headers, peer: str | None, settings: MemorySettings,
                 key_user: str | None = None) -> str | None:
    """Whose memory a request is: the user a trusted proxy relays (None: nobody's), else
    the user its API key names, else the engine's own user."""
    relayed = peer is not None and peer in settings.trusted_proxies
    if not relayed:
        return _folder(key_user or settings.user_name, None)
    named = headers.get(USER_HEADER)
    # A relay with no header names nobody (memory does nothing); any name it sends has a
    # folder of its own, or is refused: never merged with another's or with nobody's.
    return None if named is None else _folder(header_text(named), USER_HEADER)


def _folder(name: str, header: str | None) -> str:
    """The user's folder (`server.access.user_names`); a 400 saying why for a name that
    can be no one's. One user whatever the case: `Alice` and `alice` name one folder on a
    case-insensitive filesystem, so they are one user everywhere."""
    try:
        return user_folder(name)
    except UserNameError as exc:
        where = "X-Tandem-User: " if header else ""
        raise APIError(400, f"{where}{exc}", code="invalid_user", param=header) from None


def resolve_context(request: ChatCompletionRequest, headers, peer: str | None, mode: str,
                    settings: MemorySettings, key_user: str | None = None,
                    session: str | None = None,
                    derived_session: DerivedSession = derive_session) -> MemoryContext:
    """Who the request is for and what memory does for it; `derived_session`: the
    conversation's id when the client names none (`MemoryDoor.derived_session`, which
    knows an answer sent back without its status lines)."""
    user = request_user(headers, peer, settings, key_user)
    header = memory_switch(headers.get(MEMORY_HEADER))
    project = headers.get(PROJECT_HEADER) or None
    session = session or headers.get(SESSION_HEADER)
    derived = not session
    if not session:
        session = derived_session(user, project, request_messages(request))
    if not valid_session(session):  # any header value is accepted, filed under its hash
        session = "h-" + hashlib.blake2b(session.encode(), digest_size=8).hexdigest()
    last_role = request.messages[-1].role
    return MemoryContext(user=user, session=session, project=project, mode=mode,
                         header=header, has_user_message=last_role == "user", derived=derived)


