"""Part 5: new sessions. What memory on costs a session's first turn, against memory off
with the same system prompt: with the notes unchanged since the last session, right after
a note was written (the shared context changed), and after the prewarm ran for that write.
Each step but the one right after a write follows the idle moment a server has between
sessions: both lanes' prewarm ticks (in `on` it prefills, behind the head it knows, the
shared context when it changed and a branch per likely note; `off` has nothing to do).

Each step opens a new session in both lanes (the order rotates). The openers are the
first messages of a working day, so the figure is about the shared context (card +
index) and the session tail; matching notes follow a message that matches them (part 3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.lanes.conversation import Turn
from bench.lanes.lane import USER, Lane
from bench.lanes.session import rotated

Progress = Callable[[str], None]

OPENERS = (
    Turn("Good morning! I'm starting on a new task in this repository today.",
         "Good morning. What is the task?"),
    Turn("Hi again, I have a question about something else.", "Sure, go ahead."),
    Turn("Hello, can you help me plan this afternoon's work?", "Yes. What is on the list?"),
    Turn("Hey, a quick one before lunch.", "Go ahead."),
    Turn("Back again, one more thing to look at.", "Ready when you are."),
)
# (step, note written before it, prewarm run before it)
STEPS: tuple[tuple[str, bool, bool], ...] = (
    ("unchanged", False, True), ("unchanged", False, True), ("unchanged", False, True),
    ("after_write", True, False), ("after_write_prewarmed", True, True),
)
WRITES = (("runbook", "new session note one", "The staging deploy needs the VPN profile "
           "named quayside-ops; without it the deploy hangs at the login step."),
          ("gotcha", "new session note two", "The nightly export job fails when the "
           "reports bucket is full; clear last month's folder first."))


def _span_end(lane: Lane, session: str, kind: str) -> int | None:
    """Where the hidden part `kind` ends in the session's first prompt (None: it has none):
    the shared context ("shared"), the opener's matched notes before it ("notes")."""
    record = lane.services.latest_record(USER, session)
    spans = [s for s in record.spans if s.kind == kind] if record else []
    return spans[0].end if spans else None


async def run_new_sessions(lanes: dict[str, Lane], script: bool, block_size: int,
                           progress: Progress) -> list[dict[str, Any]]:
    """Every step's first turn in lanes `off` and `on`, as dicts."""
    rows: list[dict[str, Any]] = []
    writes = iter(WRITES)
    for number, ((step, write, prewarm), opener) in enumerate(zip(STEPS, OPENERS, strict=True), 1):
        prewarms: list[str] = []
        if write:
            kind, title, body = next(writes)
            result = lanes["on"].store().add(title=title, body=body, kind=kind, scope="user",
                                             source="cli", has_user_message=True)
            if not result.ok:
                raise RuntimeError(f"note {title!r} refused: {result.reason}")
        if prewarm:  # the idle moment before the session, in both lanes alike
            for mode in ("off", "on"):
                runs = await lanes[mode].app.state.tandem.prewarm.tick()
                if mode == "on":  # each run's kind (shared, note) and outcome
                    prewarms = [f"{r.kind} {r.outcome}" for r in runs]
        for mode in rotated(("off", "on"), number):
            lane = lanes[mode]
            conversation = lane.conversation(f"new{number}")
            result = await lane.ask(conversation, opener, number, script)
            shared_end = _span_end(lane, conversation.session, "shared")
            rows.append({**result.as_dict(), "step": step, "session_number": number,
                         "prewarms": prewarms if mode == "on" else [],
                         "shared_context_end": shared_end,
                         "matched_notes_end": _span_end(lane, conversation.session, "notes"),
                         "cached_floor": None if shared_end is None else shared_end - block_size})
            progress(f"new session {number}/{len(STEPS)} ({step}) mode {mode}: ttft "
                     f"{result.ttft_s:.2f} s, prompt {result.prompt_tokens}, cached "
                     f"{result.cached_tokens}")
    return rows


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def new_session_ratios(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """TTFT on / off per step (means over the step's sessions), and how far the cached
    tokens of a warm new session are above system + tools + shared context - one block."""
    def ttft(step: str, mode: str) -> float | None:
        return _mean([r["ttft_s"] for r in rows if r["step"] == step and r["mode"] == mode])

    ratios: dict[str, float | None] = {}
    for step in dict.fromkeys(s for s, _, _ in STEPS):
        on, off = ttft(step, "on"), ttft(step, "off")
        ratios[f"new_session_{step}_ttft_on_over_off"] = on / off if on is not None and off \
            else None
    # The step without its prewarm prefills the new context once, by design: not counted.
    warm = [r for r in rows if r["mode"] == "on" and r["cached_floor"] is not None
            and r["step"] != "after_write"]
    ratios["new_session_cached_minus_floor_min"] = min(
        (r["cached_tokens"] - r["cached_floor"] for r in warm), default=None)
    return ratios


def by_session_number(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each new session's first-turn TTFT on / off, by its number (issue 58, item 3): a
    step's mean hides which session paid (the first after start prefills what the
    sessions after it find cached)."""
    def ttft(number: int, mode: str) -> float | None:
        return next((r["ttft_s"] for r in rows if r["session_number"] == number
                     and r["mode"] == mode), None)

    out = []
    for number in sorted({r["session_number"] for r in rows}):
        on, off = ttft(number, "on"), ttft(number, "off")
        step = next(r["step"] for r in rows if r["session_number"] == number)
        out.append({"session_number": number, "step": step,
                    "ttft_on_over_off": on / off if on is not None and off else None})
    return out


def markdown_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["", "New sessions (part 5), first turn, memory on against off:", "",
             "| # | step | mode | prompt tok | cached tok | shared context ends at | "
             "matched note ends at | TTFT s |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        end = r["shared_context_end"] if r["shared_context_end"] is not None else "-"
        notes = r.get("matched_notes_end")
        lines.append(f"| {r['session_number']} | {r['step']} | {r['mode']} | "
                     f"{r['prompt_tokens']} | {r['cached_tokens']} | {end} | "
                     f"{notes if notes is not None else '-'} | {r['ttft_s']:.3f} |")
    return lines


NEW_SESSION_PLOT = "new_session_ttft.png"


def plot_new_sessions(rows: list[dict[str, Any]], profile: str, path) -> None:
    """Bars: each new session's first-token time, memory on beside off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numbers = sorted({r["session_number"] for r in rows})
    labels = [next(r["step"] for r in rows if r["session_number"] == n).replace("_", " ")
              for n in numbers]
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    width = 0.38
    for shift, mode in ((-width / 2, "off"), (width / 2, "on")):
        values = [next((r["ttft_s"] for r in rows if r["session_number"] == n
                        and r["mode"] == mode), 0.0) for n in numbers]
        ax.bar([n + shift for n in numbers], values, width, label=f"memory {mode}")
    ax.set_xticks(numbers, [f"{n}: {label}" for n, label in zip(numbers, labels, strict=True)],
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("TTFT (s, log scale)")
    ax.set_title(f"New session, first turn ({profile})")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
