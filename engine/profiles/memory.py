"""A profile's `memory:` section, read strictly into `ProfileMemory`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.profiles.checks import ProfileError, check_choice, check_type, memory_mode

CONVERSATIONS = ("sessions", "continuous")
# memory.commands: "remember that ..." and the like, carried out by the server; quiet: no
# status line in the answer's text, only the X-Tandem-Memory-Command header;
# memory.command_recogniser: the rules alone, or with a learned fall-back (issue 60)
COMMAND_MODES, RECOGNISERS = ("on", "quiet", "off"), ("rules", "learned")


@dataclass(frozen=True)
class ProfileMemory:
    """What a profile says of memory (its `memory:` section); the server-wide settings
    the CLI and the environment set are conductor.memory.services.MemorySettings."""

    mode: str = "off"
    writer_mode: str = "off"
    # sessions: /v1/chat/completions serves the history the client sends; continuous: the
    # server keeps one conversation a user and takes only the client's last user message.
    conversation: str = "sessions"
    replay_turns: int = 40  # the continuous conversation's replay window, in turns
    replay_tokens: int | None = None  # ... and in tokens (None: a third of the context)
    # The ids the session ledger holds in all, each shared block once (its memory is
    # about 4 bytes an id): past it, idle sessions' records go first.
    ledger_max_tokens: int = 4_000_000
    jobs_mode: str = "on"  # the cognition jobs: on, or off (they run only when asked)
    # (job, base_url, model, api_key_env): jobs that run on an OpenAI-compatible endpoint
    job_endpoints: tuple[tuple[str, str, str, str | None], ...] = ()
    # The search's points in a Qdrant server (None: in the process); $TANDEM_QDRANT_URL wins.
    qdrant_url: str | None = None
    # (base_url, model, api_key_env): dense vectors from an OpenAI-compatible embeddings
    # endpoint rather than the packaged all-MiniLM-L6-v2
    search_embedder: tuple[str, str, str | None] | None = None
    # Folders beyond the user's own memory folders that search sources may index (and
    # memory_read read): the operator's choice, never a user's.
    allowed_roots: tuple[Path, ...] = ()
    # (key, value) pairs of memory.notes_shown, checked; the server fills in the rest
    notes_shown: tuple[tuple[str, int | str], ...] = ()
    # (key, value) pairs of memory.prefetch, checked; the server fills in the rest
    prefetch: tuple[tuple[str, int | str], ...] = ()
    commands: str = "on"  # one of COMMAND_MODES
    command_recogniser: str = "rules"  # one of RECOGNISERS
    responses_store_mib: int = 64  # the Responses API's stored responses, a user's at most
    # A known head's likely notes the prewarm prefills as branches after the shared
    # context, in idle time (0: none; conductor.hidden.prewarm.PREWARM_NOTES)
    prewarm_notes: int = 64


_MEMORY_KEYS = ("mode", "writer", "conversation", "replay_turns", "replay_tokens", "jobs",
                "search", "ledger_max_tokens", "notes_shown", "prefetch", "commands",
                "command_recogniser", "responses_store_mib", "prewarm_notes")
# memory.notes_shown: what the hidden context shows of the notes (the server's
# conductor.hidden.tail_notes.NotesShown holds the defaults): key -> its choices, or None
# for a count of 0 or more.
NOTES_SHOWN_KEYS: dict[str, tuple[str, ...] | None] = {
    "index_budget": None, "match_budget": None, "max_matches": None,
    "note_format": ("header", "plain"), "match_frame": ("full", "short"),
    "match_place": ("before", "after")}
# memory.prefetch: the notes chosen after a turn and prefilled in idle time (the server's
# conductor.hidden.prefetch.PrefetchLimits holds the defaults); 0 notes turns it off.
# branches: the notes whose matched tail is prefilled after the record, nothing recorded.
PREFETCH_KEYS: dict[str, tuple[str, ...] | None] = {
    "notes": None, "budget": None, "session_cap": None, "hint_notes": None, "branches": None}
JOBS_MODES = ("off", "on")


def read_memory(path: Path, raw: Any) -> ProfileMemory:
    for key in raw:
        if key not in _MEMORY_KEYS:
            raise ProfileError(f"{path}: unknown key 'memory.{key}'")
    writer = raw.get("writer", {}) or {}
    check_type(path, "memory.writer", writer, (dict,))
    for key in writer:
        if key != "mode":
            raise ProfileError(f"{path}: unknown key 'memory.writer.{key}'")
    sizes = {}  # the replay window's, the ledger's, the stored responses', the prewarm's
    for key, types, least in (("replay_turns", (int,), 2), ("replay_tokens", (int, type(None)), 2),
                              ("responses_store_mib", (int,), 1), ("prewarm_notes", (int,), 0)):
        if key in raw:
            check_type(path, f"memory.{key}", raw[key], types)
            if raw[key] is not None and raw[key] < least:
                raise ProfileError(f"{path}: key 'memory.{key}' must be at least {least}, "
                                   f"got {raw[key]}")
            sizes[key] = raw[key]
    if "ledger_max_tokens" in raw:
        check_type(path, "memory.ledger_max_tokens", raw["ledger_max_tokens"], (int,))
        if raw["ledger_max_tokens"] < 0:
            raise ProfileError(f"{path}: key 'memory.ledger_max_tokens' must be 0 or more, "
                               f"got {raw['ledger_max_tokens']}")
        sizes["ledger_max_tokens"] = raw["ledger_max_tokens"]
    jobs_mode, endpoints = _jobs(path, raw.get("jobs") or {})
    choices = {}  # memory's keys of a word among a few (the first is the default)
    for key, options in (("conversation", CONVERSATIONS), ("commands", COMMAND_MODES),
                         ("command_recogniser", RECOGNISERS)):
        choices[key] = raw.get(key, options[0])
        check_type(path, f"memory.{key}", choices[key], (str,))
        check_choice(path, f"memory.{key}", choices[key], options)
    search = raw.get("search") or {}
    check_type(path, "memory.search", search, (dict,))
    for key in search:
        if key not in ("qdrant_url", "embedder", "allowed_roots"):
            raise ProfileError(f"{path}: unknown key 'memory.search.{key}'")
    if "qdrant_url" in search:
        check_type(path, "memory.search.qdrant_url", search["qdrant_url"], (str, type(None)))
    embedder = None
    if search.get("embedder") is not None:
        raw_embedder = search["embedder"]
        check_type(path, "memory.search.embedder", raw_embedder, (dict,))
        if set(raw_embedder) - {"base_url", "model", "api_key_env"} or not {
                "base_url", "model"} <= set(raw_embedder):
            raise ProfileError(f"{path}: key 'memory.search.embedder' needs base_url and "
                               "model (and may name api_key_env)")
        for part in raw_embedder:
            check_type(path, f"memory.search.embedder.{part}", raw_embedder[part], (str,))
        embedder = (raw_embedder["base_url"], raw_embedder["model"],
                    raw_embedder.get("api_key_env"))
    return ProfileMemory(
        mode=memory_mode(path, "memory.mode", raw.get("mode", "off")),
        writer_mode=memory_mode(path, "memory.writer.mode", writer.get("mode", "off")),
        jobs_mode=jobs_mode, job_endpoints=endpoints,
        qdrant_url=search.get("qdrant_url"), search_embedder=embedder,
        allowed_roots=_allowed_roots(path, search.get("allowed_roots")),
        notes_shown=_settings(path, "notes_shown", raw.get("notes_shown"), NOTES_SHOWN_KEYS),
        prefetch=_settings(path, "prefetch", raw.get("prefetch"), PREFETCH_KEYS),
        **choices, **sizes,
    )


def _settings(path: Path, section: str, raw: Any,
              known: dict[str, tuple[str, ...] | None]) -> tuple[tuple[str, int | str], ...]:
    """`memory.<section>` (notes_shown, prefetch): each key's value checked here, a choice
    or a count of 0 or more, so a bad value names its key at load."""
    if raw is None:  # absent, or an empty YAML mapping's null
        return ()
    check_type(path, f"memory.{section}", raw, (dict,))
    out: list[tuple[str, int | str]] = []
    for key, value in raw.items():
        if key not in known:
            raise ProfileError(f"{path}: unknown key 'memory.{section}.{key}' (known: "
                               f"{', '.join(known)})")
        choices = known[key]
        name = f"memory.{section}.{key}"
        if choices is not None:
            check_type(path, name, value, (str,))
            check_choice(path, name, value, choices)
        else:
            check_type(path, name, value, (int,))
            if value < 0:
                raise ProfileError(f"{path}: key '{name}' must be 0 or more, got {value}")
        out.append((key, value))
    return tuple(out)


def _allowed_roots(path: Path, raw: Any) -> tuple[Path, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(r, str) and r for r in raw):
        raise ProfileError(f"{path}: key 'memory.search.allowed_roots' must be a list of "
                           "folders")
    return tuple(Path(r).expanduser() for r in raw)


def _jobs(path: Path, raw: Any) -> tuple[str, tuple[tuple[str, str, str, str | None], ...]]:
    """`memory.jobs`: `mode: on|off`, and per job `model: {base_url, model, api_key_env}`
    (the job names are checked when the server starts)."""
    check_type(path, "memory.jobs", raw, (dict,))
    mode = raw.get("mode", "on")
    mode = {True: "on", False: "off"}.get(mode, mode)
    check_choice(path, "memory.jobs.mode", mode, JOBS_MODES)
    endpoints = []
    for job, settings in raw.items():
        if job == "mode":
            continue
        key = f"memory.jobs.{job}"
        check_type(path, key, settings, (dict,))
        if set(settings) != {"model"}:
            raise ProfileError(f"{path}: key '{key}' takes 'model' only")
        model = settings["model"]
        check_type(path, f"{key}.model", model, (dict,))
        unknown = set(model) - {"base_url", "model", "api_key_env"}
        if unknown or not {"base_url", "model"} <= set(model):
            raise ProfileError(f"{path}: key '{key}.model' needs base_url and model "
                               "(and may name api_key_env)")
        for part in ("base_url", "model", "api_key_env"):
            if part in model:
                check_type(path, f"{key}.model.{part}", model[part], (str,))
        endpoints.append((str(job), model["base_url"], model["model"], model.get("api_key_env")))
    return mode, tuple(endpoints)
