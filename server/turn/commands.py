"""The turn's explicit memory command: "remember that ...", carried out before the answer.

Only the user's own newest message counts: the request must end with it (a request that
ends with a tool's result is an agent's loop going on, and a tool's result or a document
is never read for commands). The command runs where memory may write (not with
`X-Tandem-Memory: read` or `off`, nor in a JSON answer), with the profile's
`memory.commands` on; its status lines go at the end of the answer (`quiet`: only in the
`X-Tandem-Memory-Command` header). The log says which command ran, never its words.
"""

from __future__ import annotations

import logging
import math

from conductor.memory.context import MemoryContext, status_line
from conductor.memory.lease import LeaseBusy, LeaseUnavailable
from conductor.memory.services import MemoryServices
from conductor.memory.writing import CommandOutcome, carry_out, recognise
from engine.profiles import Profile
from server.http.errors import APIError
from server.http.schema import ChatCompletionRequest

log = logging.getLogger("tandem.memory")
HEADER = "X-Tandem-Memory-Command"


def run_command(services: MemoryServices, profile: Profile, memory: MemoryContext,
                request: ChatCompletionRequest) -> CommandOutcome | None:
    """Carry out the command the newest user message opens with; None when there is none
    (or memory may not write for this request)."""
    if (profile.memory.commands == "off" or not memory.writes or memory.user is None
            or not request.messages or request.messages[-1].role != "user"):
        return None
    try:
        text = request.messages[-1].text()
    except ValueError:  # content the turn refuses anyway (it says why)
        return None
    command = recognise(text)
    if command is None:
        return None
    if services.leases is not None:
        _hold_lease(services, memory.user)
    outcome = carry_out(services.store(memory.user), command, session=memory.session,
                        project=memory.project)
    log.info("memory command: %s (%d note%s)", command.kind, len(outcome.note_ids),
             "" if len(outcome.note_ids) == 1 else "s")
    return outcome


def _hold_lease(services: MemoryServices, user: str) -> None:
    """Replicas: the command writes only where this replica holds the user's lease;
    elsewhere the whole request is a retryable 503 before the engine sees it (the router
    brings the user back to their writer, or the lease frees within its ttl)."""
    try:
        services.leases.token(user)
    except (LeaseBusy, LeaseUnavailable) as exc:
        raise APIError(503, "another replica writes this user's memory now; retry",
                       code="lease_busy", kind="server_error",
                       headers={"Retry-After": str(math.ceil(exc.retry_after)),
                                **({"X-Tandem-Writer": exc.holder} if exc.holder else {})},
                       ) from None


def status_lines(profile: Profile, outcome: CommandOutcome | None) -> tuple[str, ...]:
    """The lines the answer ends with (none when the profile keeps commands quiet)."""
    if outcome is None or profile.memory.commands != "on":
        return ()
    return tuple(status_line(verb, what) for verb, what in outcome.status)


def header(outcome: CommandOutcome | None) -> dict[str, str]:
    """`X-Tandem-Memory-Command: remembered; notes=n-12` (verbs and note ids: ASCII, no
    titles in a header)."""
    if outcome is None or not outcome.status:
        return {}
    verbs = ",".join(dict.fromkeys(verb.replace(" ", "_") for verb, _ in outcome.status))
    notes = ",".join(outcome.note_ids)
    return {HEADER: f"{verbs}; notes={notes}" if notes else verbs}
