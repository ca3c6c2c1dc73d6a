"""The turn's explicit memory command: "remember that ...", carried out before the answer
(by memory's front door, in `MemoryServices.admit_turn`; here what the turn makes of it).

Only the user's own newest message counts: the request must end with it (a request that
ends with a tool's result is an agent's loop going on, and a tool's result or a document
is never read for commands). The command runs where memory may write (not with
`X-Tandem-Memory: read` or `off`, nor in a JSON answer), with the profile's
`memory.commands` on; its status lines go at the end of the answer (`quiet`: only in the
`X-Tandem-Memory-Command` header). The log says which command ran, never its words.
"""

from __future__ import annotations

from conductor.memory.context import status_line
from conductor.memory.lease import LeaseBusy, LeaseUnavailable
from conductor.memory.types import CommandOutcome
from engine.profiles import Profile
from server.http.errors import APIError, not_the_writer

HEADER = "X-Tandem-Memory-Command"


def lease_busy(exc: LeaseBusy | LeaseUnavailable) -> APIError:
    """Replicas: a command writes only where this replica holds the user's lease
    (`MemoryServices.admit_turn` carries it out); elsewhere the whole request is a
    retryable 409 before the engine sees it (the lease frees within its ttl, or the router
    brings the user back to their writer)."""
    return not_the_writer("lease_busy", exc.retry_after, exc.holder)


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
