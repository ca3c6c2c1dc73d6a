"""One job run: gather the inputs, ask the backend, check the JSON, render and write the
artifacts, move the state on, leave a run record. A failed or preempted run changes no
file and no checkpoint."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import jsonschema

from conductor.cognition.artifacts import ArtifactRefused, write_artifacts
from conductor.cognition.backend import JobBackend, JobPrompt
from conductor.cognition.job import JobCaps, JobInputs, JobSpec
from conductor.cognition.job_state import JobState, iso, read_job_state, write_job_state
from conductor.layers.conversation import CountTokens, WindowBounds, conversation_messages
from conductor.layers.semantic import SEMANTIC_FILES, parse_semantic, read_semantic
from conductor.layers.state import ConversationState
from conductor.layers.user_layers import UserLayers
from conductor.layers.working import parse_working_memory
from conductor.storage.atomic import atomic_write
from conductor.storage.clock import utc_now
from conductor.storage.fence import FenceRefused

FAILED_RETRY_S = 600.0  # a failed job waits this long before its state trigger fires again
Clock = Callable[[], datetime]
_UNDECODABLE_RUN = re.compile("\ufffd{2,}")


def one_mark_per_undecodable_run(text: str) -> str:
    """The answer with each run of U+FFFD made one.

    The grammar counts a string's length in characters, and it lets a byte sequence that is
    not UTF-8 through as one character; decoding writes that sequence as up to four U+FFFD.
    Seen on random weights: a 48-character string decoded to 50. One mark per run keeps every
    string within the length the grammar allowed, and still shows something was there.
    """
    return _UNDECODABLE_RUN.sub("\ufffd", text)


@dataclass
class JobRun:
    """One run's record: ids, counts and codes, never a turn's text."""

    run_id: str
    job: str
    user: str
    trigger: str  # state, schedule, manual
    provider: str
    model: str
    started_at: str
    ended_at: str = ""
    duration_s: float = 0.0
    turns: tuple[int, int] = (0, 0)  # the seq range it took in
    artifact_versions: dict[str, str] = field(default_factory=dict)  # path -> hash before
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    outcome: str = "failed"  # changed, unchanged, failed, preempted, refused
    reason: str | None = None
    checkpoint_before: int = 0
    checkpoint_after: int = 0
    files_changed: list[str] = field(default_factory=list)
    flags_resolved: list[dict[str, str]] = field(default_factory=list)
    flags_raised: int = 0
    secrets_dropped: int = 0


def gather(layers: UserLayers, bounds: WindowBounds, count: CountTokens) -> JobInputs:
    layers.ensure()
    state = read_job_state(layers.files) or JobState()
    window = layers.replay(bounds, count)
    semantic = {name: parse_semantic(name, read_semantic(layers.files, name))
                for name in SEMANTIC_FILES}
    return JobInputs(layers=layers, conversation=layers.state(), state=state,
                     last_seq=layers.history.last_seq, window=window,
                     working=parse_working_memory(layers.working_memory()), semantic=semantic)


def _hash(path) -> str:
    try:
        return hashlib.blake2b(path.read_bytes(), digest_size=6).hexdigest()
    except FileNotFoundError:
        return "-"


async def run_job(spec: JobSpec, layers: UserLayers, backend: JobBackend, trigger: str,
                  bounds: WindowBounds, count: CountTokens, caps: JobCaps, max_tokens: int,
                  clock: Clock = utc_now, script: str | None = None) -> JobRun:
    started = time.perf_counter()
    inputs = gather(layers, bounds, count)
    before = spec.checkpoint(inputs.conversation, inputs.state)
    run = JobRun(run_id=uuid.uuid4().hex[:12], job=spec.name, user=layers.user,
                 trigger=trigger, provider=backend.provider, model=backend.model,
                 started_at=iso(clock()), turns=(before + 1, inputs.last_seq),
                 artifact_versions={a: _hash(layers.files.user_dir / a) for a in spec.artifacts},
                 checkpoint_before=before, checkpoint_after=before)
    prompt = JobPrompt(layers.user, conversation_messages(layers.core(),
                                                          layers.working_memory(),
                                                          inputs.window),
                       spec.instruction(inputs, caps))
    schema = spec.schema(caps)
    answer = await backend.answer(prompt, schema, max_tokens, script)
    run.prompt_tokens, run.cached_tokens = answer.prompt_tokens, answer.cached_tokens
    run.output_tokens = answer.output_tokens
    try:
        _settle(spec, inputs, run, answer, schema, caps, clock)
    finally:
        run.ended_at, run.duration_s = iso(clock()), time.perf_counter() - started
        _record(layers, run, inputs.state, clock)
    return run


def _settle(spec: JobSpec, inputs: JobInputs, run: JobRun, answer, schema, caps: JobCaps,
            clock: Clock) -> None:
    """The outcome, and on success the artifacts and the state moved on."""
    if answer.finish_reason == "abort":
        run.outcome, run.reason = "preempted", "client_request"
        return
    if answer.error is not None:
        run.reason = answer.error
        return
    if answer.finish_reason == "length":
        run.reason = "answer_cut_at_max_tokens"
        return
    try:
        # Raw tabs and newlines inside strings are fine here: code re-spaces every text.
        data = json.loads(one_mark_per_undecodable_run(answer.text), strict=False)
        jsonschema.validate(data, schema)
    except ValueError:
        run.reason = "invalid_json"
        return
    except jsonschema.ValidationError:
        run.reason = "answer_outside_schema"
        return
    output = spec.apply(inputs, data, caps)
    try:
        with inputs.layers.writing():  # replicas: only the user's writer (fence.py)
            run.files_changed = write_artifacts(inputs.layers.files, spec.artifacts,
                                                output.files)
    except ArtifactRefused as exc:
        run.outcome, run.reason = "refused", str(exc)
        return
    except FenceRefused as exc:  # another replica writes this user's memory now
        run.outcome, run.reason = "refused", exc.reason
        return
    state = inputs.state
    if output.review_seq is not None:
        state.review_seq = output.review_seq
    if output.extract_seq is not None:
        state.extract_seq = output.extract_seq
    if output.flags is not None:
        state.flags = output.flags
        run.flags_raised = len(output.flags)
    state.flags = [f for f in state.flags if f.id not in output.resolved]
    if output.checkpoint_seq is not None:
        conversation = inputs.layers.state()
        inputs.layers.save_state(ConversationState(output.checkpoint_seq,
                                                   conversation.replay_from_seq))
    run.flags_resolved, run.secrets_dropped = output.resolutions, output.secrets_dropped
    run.checkpoint_after = spec.checkpoint(inputs.layers.state(), state)
    run.outcome = "changed" if run.files_changed else "unchanged"


def _record(layers: UserLayers, run: JobRun, state: JobState, clock: Clock) -> None:
    now = clock()
    if run.outcome == "failed":
        state.retry_after[run.job] = iso(datetime.fromtimestamp(
            now.timestamp() + FAILED_RETRY_S, UTC))
    elif run.outcome != "preempted":
        state.retry_after.pop(run.job, None)
    state.last_run[run.job] = {"at": run.ended_at, "outcome": run.outcome, "run_id": run.run_id}
    write_job_state(layers.files, state)
    day = now.strftime("%Y/%m/%d")
    name = f"{now:%H%M%S}-{run.job}-{run.run_id}.json"
    atomic_write(layers.files.runs_dir / day / name, json.dumps(asdict(run), indent=1) + "\n")


def recent_runs(layers: UserLayers, limit: int) -> list[dict]:
    """The newest run records, newest first (records that do not parse are skipped)."""
    folder = layers.files.runs_dir
    paths = sorted(folder.rglob("*.json"), reverse=True) if folder.is_dir() else []
    out = []
    for path in paths:
        if len(out) >= limit:
            break
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out
