"""Profiles: one YAML file a profile under `profiles/`, read strictly.

An unknown key, a value of the wrong type or an unknown mode stops the load with a
`ProfileError` naming the file and the key. YAML 1.1 reads a bare `on`/`off` as a boolean,
so the memory modes accept `true`/`false` for `on`/`off`: `mode: off` means what it says.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
MEMORY_MODES = ("off", "shadow", "on")
DEVICES = ("cpu", "cuda")
TOOL_CALL_FORMATS = ("qwen", "none")
BUILTIN_PREFIX = "builtin:"


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the key."""


CONVERSATIONS = ("sessions", "continuous")
# memory.commands: "remember that ..." and the like, carried out by the server; quiet: no
# status line in the answer's text, only the X-Tandem-Memory-Command header;
# memory.command_recogniser: the rules alone, or with a learned fall-back (issue 60)
COMMAND_MODES, RECOGNISERS = ("on", "quiet", "off"), ("rules", "learned")


@dataclass(frozen=True)
class MemorySettings:
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


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    model: str
    device: str
    description: str = ""
    tokenizer: str | None = None
    dtype: str = "auto"
    max_model_len: int = 4096
    block_size: int = 32
    gpu_memory_utilization: float | None = None
    cpu_kv_space_gib: int | None = None
    # Cores vLLM's CPU backend keeps free of its worker's threads (for the engine core and
    # the server); None keeps vLLM's default of one per worker.
    cpu_reserved_cores: int | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    load_format: str = "auto"
    max_num_seqs: int = 16
    thinking: bool = False
    tool_call_format: str = "qwen"
    scripted: bool = False
    # An answer's length when the request sets none (vLLM's --override-generation-config
    # '{"max_new_tokens": N}'); None: all the room the context leaves, as vLLM's default.
    default_max_tokens: int | None = None
    memory: MemorySettings = MemorySettings()
    # More names requests may give as `model` (vLLM's --served-model-name); /v1/models
    # lists them after the profile's name.
    served_names: tuple[str, ...] = ()
    # vLLM's server-wide switches: usage in every streamed chunk whatever the request's
    # stream_options (--enable-force-include-usage), tokens named `token_id:<id>` in
    # log-probabilities (--return-tokens-as-token-ids).
    force_include_usage: bool = False
    return_tokens_as_token_ids: bool = False
    # The most log-probabilities a token a request may ask for (vLLM's --max-logprobs);
    # -1: the whole vocabulary, which a request asks for with -1.
    max_logprobs: int = 20
    mamba_cache_mode: str = "none"  # a hybrid model's prefix cache: README, Hybrid models

    @property
    def builtin_model(self) -> str | None:
        """The embedded model's name when `model` is `builtin:<name>`, else None."""
        return self.model[len(BUILTIN_PREFIX) :] if self.model.startswith(BUILTIN_PREFIX) else None


# key -> accepted Python types (bool is not an int here: `max_model_len: true` is an error)
_TOP_LEVEL: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "device": (str,),
    "description": (str,),
    "tokenizer": (str, type(None)),
    "dtype": (str,),
    "max_model_len": (int,),
    "block_size": (int,),
    "gpu_memory_utilization": (float, int, type(None)),
    "cpu_kv_space_gib": (int, type(None)),
    "cpu_reserved_cores": (int, type(None)),
    "tensor_parallel_size": (int,),
    "enforce_eager": (bool,),
    "load_format": (str,),
    "max_num_seqs": (int,),
    "thinking": (bool,),
    "tool_call_format": (str,),
    "scripted": (bool,),
    "default_max_tokens": (int, type(None)),
    "force_include_usage": (bool,),
    "return_tokens_as_token_ids": (bool,),
    "max_logprobs": (int,),
    "mamba_cache_mode": (str,),
    "memory": (dict,),
}
_REQUIRED = ("model", "device")
_MEMORY_KEYS = ("mode", "writer", "conversation", "replay_turns", "replay_tokens", "jobs",
                "search", "ledger_max_tokens", "notes_shown", "prefetch", "commands",
                "command_recogniser", "responses_store_mib")
# memory.notes_shown: what the hidden context shows of the notes (the server's
# conductor.hidden.tail_notes.NotesShown holds the defaults): key -> its choices, or None
# for a count of 0 or more.
NOTES_SHOWN_KEYS: dict[str, tuple[str, ...] | None] = {
    "index_budget": None, "match_budget": None, "max_matches": None,
    "note_format": ("header", "plain"), "match_frame": ("full", "short")}
# memory.prefetch: the notes chosen after a turn and prefilled in idle time (the server's
# conductor.hidden.prefetch.PrefetchLimits holds the defaults); 0 notes turns it off.
PREFETCH_KEYS: dict[str, tuple[str, ...] | None] = {
    "notes": None, "budget": None, "session_cap": None, "hint_notes": None}
JOBS_MODES = ("off", "on")


def _type_names(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             dict: "a mapping", type(None): "null"}
    return " or ".join(names[t] for t in types)


def _check_type(path: Path, key: str, value: Any, types: tuple[type, ...]) -> None:
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise ProfileError(
            f"{path}: key '{key}' must be {_type_names(types)}, got {type(value).__name__} "
            f"{value!r}"
        )


def _mode(path: Path, key: str, value: Any) -> str:
    if value is True:
        value = "on"
    elif value is False:
        value = "off"
    if value not in MEMORY_MODES:
        raise ProfileError(f"{path}: key '{key}' must be one of {', '.join(MEMORY_MODES)}, "
                           f"got {value!r}")
    return value


def _memory(path: Path, raw: Any) -> MemorySettings:
    for key in raw:
        if key not in _MEMORY_KEYS:
            raise ProfileError(f"{path}: unknown key 'memory.{key}'")
    writer = raw.get("writer", {}) or {}
    _check_type(path, "memory.writer", writer, (dict,))
    for key in writer:
        if key != "mode":
            raise ProfileError(f"{path}: unknown key 'memory.writer.{key}'")
    sizes = {}  # the replay window's and the ledger's
    for key, types, least in (("replay_turns", (int,), 2), ("replay_tokens", (int, type(None)), 2),
                              ("responses_store_mib", (int,), 1)):
        if key in raw:
            _check_type(path, f"memory.{key}", raw[key], types)
            if raw[key] is not None and raw[key] < least:
                raise ProfileError(f"{path}: key 'memory.{key}' must be at least {least}, "
                                   f"got {raw[key]}")
            sizes[key] = raw[key]
    if "ledger_max_tokens" in raw:
        _check_type(path, "memory.ledger_max_tokens", raw["ledger_max_tokens"], (int,))
        if raw["ledger_max_tokens"] < 0:
            raise ProfileError(f"{path}: key 'memory.ledger_max_tokens' must be 0 or more, "
                               f"got {raw['ledger_max_tokens']}")
        sizes["ledger_max_tokens"] = raw["ledger_max_tokens"]
    jobs_mode, endpoints = _jobs(path, raw.get("jobs") or {})
    choices = {}  # memory's keys of a word among a few (the first is the default)
    for key, options in (("conversation", CONVERSATIONS), ("commands", COMMAND_MODES),
                         ("command_recogniser", RECOGNISERS)):
        choices[key] = raw.get(key, options[0])
        _check_type(path, f"memory.{key}", choices[key], (str,))
        _choice(path, f"memory.{key}", choices[key], options)
    search = raw.get("search") or {}
    _check_type(path, "memory.search", search, (dict,))
    for key in search:
        if key not in ("qdrant_url", "embedder", "allowed_roots"):
            raise ProfileError(f"{path}: unknown key 'memory.search.{key}'")
    if "qdrant_url" in search:
        _check_type(path, "memory.search.qdrant_url", search["qdrant_url"], (str, type(None)))
    embedder = None
    if search.get("embedder") is not None:
        raw_embedder = search["embedder"]
        _check_type(path, "memory.search.embedder", raw_embedder, (dict,))
        if set(raw_embedder) - {"base_url", "model", "api_key_env"} or not {
                "base_url", "model"} <= set(raw_embedder):
            raise ProfileError(f"{path}: key 'memory.search.embedder' needs base_url and "
                               "model (and may name api_key_env)")
        for part in raw_embedder:
            _check_type(path, f"memory.search.embedder.{part}", raw_embedder[part], (str,))
        embedder = (raw_embedder["base_url"], raw_embedder["model"],
                    raw_embedder.get("api_key_env"))
    return MemorySettings(
        mode=_mode(path, "memory.mode", raw.get("mode", "off")),
        writer_mode=_mode(path, "memory.writer.mode", writer.get("mode", "off")),
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
    _check_type(path, f"memory.{section}", raw, (dict,))
    out: list[tuple[str, int | str]] = []
    for key, value in raw.items():
        if key not in known:
            raise ProfileError(f"{path}: unknown key 'memory.{section}.{key}' (known: "
                               f"{', '.join(known)})")
        choices = known[key]
        name = f"memory.{section}.{key}"
        if choices is not None:
            _check_type(path, name, value, (str,))
            _choice(path, name, value, choices)
        else:
            _check_type(path, name, value, (int,))
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
    _check_type(path, "memory.jobs", raw, (dict,))
    mode = raw.get("mode", "on")
    mode = {True: "on", False: "off"}.get(mode, mode)
    _choice(path, "memory.jobs.mode", mode, JOBS_MODES)
    endpoints = []
    for job, settings in raw.items():
        if job == "mode":
            continue
        key = f"memory.jobs.{job}"
        _check_type(path, key, settings, (dict,))
        if set(settings) != {"model"}:
            raise ProfileError(f"{path}: key '{key}' takes 'model' only")
        model = settings["model"]
        _check_type(path, f"{key}.model", model, (dict,))
        unknown = set(model) - {"base_url", "model", "api_key_env"}
        if unknown or not {"base_url", "model"} <= set(model):
            raise ProfileError(f"{path}: key '{key}.model' needs base_url and model "
                               "(and may name api_key_env)")
        for part in ("base_url", "model", "api_key_env"):
            if part in model:
                _check_type(path, f"{key}.model.{part}", model[part], (str,))
        endpoints.append((str(job), model["base_url"], model["model"], model.get("api_key_env")))
    return mode, tuple(endpoints)


def _choice(path: Path, key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ProfileError(f"{path}: key '{key}' must be one of {', '.join(choices)}, "
                           f"got {value!r}")


def load_profile_file(path: Path) -> Profile:
    """Read and validate one profile file."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: a profile must be a mapping of keys to values")
    for key, value in raw.items():
        if key not in _TOP_LEVEL:
            raise ProfileError(f"{path}: unknown key '{key}'")
        _check_type(path, str(key), value, _TOP_LEVEL[key])
    for key in _REQUIRED:
        if key not in raw:
            raise ProfileError(f"{path}: missing required key '{key}'")
    for key, choices in (("device", DEVICES), ("tool_call_format", TOOL_CALL_FORMATS),
                         ("mamba_cache_mode", ("none", "align"))):
        _choice(path, key, raw.get(key, choices[0]), choices)  # the first is the default
    for key in ("max_model_len", "block_size", "tensor_parallel_size", "max_num_seqs",
                "default_max_tokens"):
        if raw.get(key) is not None and raw[key] < 1:
            raise ProfileError(f"{path}: key '{key}' must be at least 1, got {raw[key]}")
    if raw.get("max_logprobs") is not None and raw["max_logprobs"] < -1:
        raise ProfileError(f"{path}: key 'max_logprobs' must be -1 (the whole vocabulary) "
                           f"or at least 0, got {raw['max_logprobs']}")
    if raw.get("cpu_reserved_cores") is not None and raw["cpu_reserved_cores"] < 0:
        raise ProfileError(f"{path}: key 'cpu_reserved_cores' must be at least 0, "
                           f"got {raw['cpu_reserved_cores']}")
    settings = {k: v for k, v in raw.items() if k != "memory"}
    if "gpu_memory_utilization" in settings and settings["gpu_memory_utilization"] is not None:
        settings["gpu_memory_utilization"] = float(settings["gpu_memory_utilization"])
    return Profile(name=path.stem, path=path, memory=_memory(path, raw.get("memory") or {}),
                   **settings)


def profile_names(directory: Path = PROFILES_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_profile(name: str, directory: Path = PROFILES_DIR) -> Profile:
    """Load `profiles/<name>.yaml`; an unknown name lists the known ones."""
    path = directory / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(profile_names(directory)) or "none"
        raise ProfileError(f"no profile named {name!r} in {directory} (known: {known})")
    return load_profile_file(path)


def gpu_available() -> bool:
    """True when NVML sees at least one NVIDIA GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU
        return False


def default_profile_name() -> str:
    return "chat" if gpu_available() else "smol"


def with_overrides(profile: Profile, memory_mode: str | None = None,
                   writer_mode: str | None = None, served_names: tuple[str, ...] = (),
                   force_include_usage: bool = False, return_tokens_as_token_ids: bool = False,
                   max_logprobs: int | None = None) -> Profile:
    """A copy with the CLI's --memory, --writer, --served-model-name and vLLM switches."""
    memory = dataclasses.replace(
        profile.memory,
        mode=_mode(profile.path, "memory.mode", memory_mode or profile.memory.mode),
        writer_mode=_mode(profile.path, "memory.writer.mode",
                          writer_mode or profile.memory.writer_mode),
    )
    values = {f.name: getattr(profile, f.name) for f in fields(profile)}
    values["memory"] = memory
    values["served_names"] = tuple(dict.fromkeys(profile.served_names + served_names))
    values["force_include_usage"] = profile.force_include_usage or force_include_usage
    values["return_tokens_as_token_ids"] = (profile.return_tokens_as_token_ids
                                            or return_tokens_as_token_ids)
    if max_logprobs is not None:
        values["max_logprobs"] = max_logprobs
    return Profile(**values)
