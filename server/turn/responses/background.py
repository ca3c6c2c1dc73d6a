"""Background responses (`background: true`): answered at once as `queued`, run on as a
task of the server, polled with GET and stopped with `/cancel`.

Three bounds keep them from starving anyone (issue 53: 64 queued by one user turned
another user's 4-token chat from 0.06 s into 106.6 s):

* each user has at most `MAX_PER_USER` in flight (queued or in progress): past it, a 429
  that says so, before any work is done for the request;
* each counts in `/load` from its creation to its end (`ServerLoad.hold`), as a request
  in flight does;
* each runs on the engine as a *deferred* client request (`GenerationParams.deferred`):
  interactive requests are scheduled first and take its slot when none is free, and it
  resumes with its output kept (`engine/scheduler.py`). It still goes before memory's own
  background work, as any client's request.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import aclosing, contextmanager
from typing import Any

from engine.backend import BackendFailed, EngineDead
from server.http.errors import APIError
from server.http.load_tracking import ServerLoad
from server.http.sse import stream_error
from server.turn.responses.turn import ResponseRun

log = logging.getLogger("tandem.server")

MAX_PER_USER = 4  # background responses a user may have queued or in progress at once

Keep = Callable[[dict[str, Any]], Awaitable[None]]


class Slot:
    """One of a user's background responses, held from the request's check to the run's
    end (or to the request's failure before its run started)."""

    def __init__(self, runs: BackgroundRuns, user: str | None) -> None:
        self._runs, self._user = runs, user
        self.started = False
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._runs.per_user[self._user] -= 1
            if self._runs.per_user[self._user] <= 0:
                del self._runs.per_user[self._user]


class BackgroundRuns:
    """The background responses running in this server, by id, and each user's count."""

    def __init__(self, max_per_user: int | None = None) -> None:
        self.max_per_user = MAX_PER_USER if max_per_user is None else max_per_user
        self.tasks: dict[str, asyncio.Task] = {}
        self.per_user: Counter[str | None] = Counter()

    @contextmanager
    def reserved(self, user: str | None) -> Iterator[Slot]:
        """A slot of the user's, or a 429 past the bound; given back on leaving unless a
        run was started with it (`start`: the run gives it back when it ends). The check
        and the count are one step of the event loop: two requests cannot both pass."""
        if self.per_user[user] >= self.max_per_user:
            raise APIError(429, f"background: {self.max_per_user} background responses "
                           "of this user are already queued or in progress, the most a user "
                           "may have (docs/serving/limits.md); poll them to their end or "
                           "cancel one, or send this one without background",
                           code="rate_limit_exceeded", param="background",
                           kind="rate_limit_error")
        self.per_user[user] += 1
        slot = Slot(self, user)
        try:
            yield slot
        finally:
            if not slot.started:
                slot.release()

    def start(self, slot: Slot, response_id: str, run: ResponseRun, keep: Keep,
              load: ServerLoad | None) -> None:
        """Run the response as a task; counted in `/load` until it ends, however it ends
        (a done callback: a task cancelled before its first step runs no `finally`)."""
        slot.started = True
        if load is not None:
            load.hold()
        task = asyncio.create_task(_in_background(run, keep))
        self.tasks[response_id] = task

        def ended(_task: asyncio.Task) -> None:
            self.tasks.pop(response_id, None)
            slot.release()
            if load is not None:
                load.release()

        task.add_done_callback(ended)


async def _in_background(run: ResponseRun, keep: Keep) -> None:
    """A background response to its end, the only writer of its file while it runs:
    cancelled, it keeps what it had written (or the finished response, when the cancel
    came while that was being stored); failed, what it had written and why."""
    events = run.events(keep)  # no `on_cut`: what a cut leaves is stored below, once
    try:
        async with aclosing(events):
            async for event in events:
                if event["type"] == "response.created":
                    await keep(run.turn.shape.object("in_progress"))
    except asyncio.CancelledError:
        await keep(run.finished or run.final("cancelled"))
    except (EngineDead, BackendFailed) as exc:
        await keep(run.failed(stream_error(exc)))
    except Exception:  # the client polls: it reads "failed", the log has the trace
        log.exception("a background response failed")
        await keep(run.final("failed", {"code": "server_error",
                                        "message": "the response failed; the log says why"}))
