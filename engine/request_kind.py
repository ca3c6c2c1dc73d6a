"""How a request tells the engine-core process what kind it is: client or background."""

from __future__ import annotations

from typing import Literal

RequestKind = Literal["client", "background"]

KIND_KEY = "tandem_kind"
CLIENT_PRIORITY = 0
# vLLM's priority policy schedules lower values first; background turns go last.
BACKGROUND_PRIORITY = 100
# A client's request that can wait (`GenerationParams.deferred`: a background response):
# after every interactive request, before memory's background turns. Unlike those it is
# never ended for a client: it yields its slot and resumes with its output kept
# (`engine/scheduler.py`).
DEFERRED_PRIORITY = 50


def kind_of(extra_args: dict | None) -> RequestKind:
    return "background" if (extra_args or {}).get(KIND_KEY) == "background" else "client"
