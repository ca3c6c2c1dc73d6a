"""Profiles: one YAML file a profile under `profiles/`, read strictly.

An unknown key, a value of the wrong type or an unknown mode stops the load with a
`ProfileError` naming the file and the key. YAML 1.1 reads a bare `on`/`off` as a boolean,
so the memory modes accept `true`/`false` for `on`/`off`: `mode: off` means what it says.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

# Re-exported: the profile's parts are read in engine/profiles/checks.py and memory.py.
from engine.profiles.checks import (
    MEMORY_MODES,
    ProfileError,
    check_choice,
    check_type,
)
from engine.profiles.checks import (
    memory_mode as checked_mode,
)
from engine.profiles.memory import (
    COMMAND_MODES,
    CONVERSATIONS,
    JOBS_MODES,
    NOTES_SHOWN_KEYS,
    PREFETCH_KEYS,
    RECOGNISERS,
    ProfileMemory,
    read_memory,
)

__all__ = [
    "BUILTIN_PREFIX", "COMMAND_MODES", "CONVERSATIONS", "DEVICES", "JOBS_MODES",
    "MEMORY_MODES", "NOTES_SHOWN_KEYS", "PREFETCH_KEYS", "PROFILES_DIR", "RECOGNISERS",
    "TOOL_CALL_FORMATS", "ProfileMemory", "Profile", "ProfileError", "default_profile_name",
    "gpu_available", "load_profile", "load_profile_file", "profile_names", "with_overrides",
]

PROFILES_DIR = Path(__file__).resolve().parent.parent.parent / "profiles"
DEVICES = ("cpu", "cuda")
TOOL_CALL_FORMATS = ("qwen", "none")
BUILTIN_PREFIX = "builtin:"


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
    memory: ProfileMemory = ProfileMemory()
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
    mamba_cache_mode: str = "none"  # a hybrid model's prefix cache: docs/hybrid.md

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
        check_type(path, str(key), value, _TOP_LEVEL[key])
    for key in _REQUIRED:
        if key not in raw:
            raise ProfileError(f"{path}: missing required key '{key}'")
    for key, choices in (("device", DEVICES), ("tool_call_format", TOOL_CALL_FORMATS),
                         ("mamba_cache_mode", ("none", "align"))):
        check_choice(path, key, raw.get(key, choices[0]), choices)  # the first is the default
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
    return Profile(name=path.stem, path=path, memory=read_memory(path, raw.get("memory") or {}),
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
        mode=checked_mode(profile.path, "memory.mode", memory_mode or profile.memory.mode),
        writer_mode=checked_mode(profile.path, "memory.writer.mode",
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
