"""Which model runs each job: the served engine (inherit), or an OpenAI-compatible
endpoint. The profile sets defaults (`memory.jobs.<job>.model`); a run-time choice
(`tandem jobs model`, `PUT /v1/conductor/jobs/{job}/model`) is kept in
``memory/jobs/models.json`` and wins."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from conductor.storage.atomic import atomic_write


@dataclass(frozen=True)
class JobModel:
    """`base_url` None: the served engine."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None

    @property
    def inherits(self) -> bool:
        return self.base_url is None

    def describe(self) -> str:
        return "engine" if self.inherits else f"{self.model} at {self.base_url}"


INHERIT = JobModel()
# The variables a job endpoint may take its key from: this prefix, or a name the profile
# gives. Any other (AWS_SECRET_ACCESS_KEY, a cloud token) would go, with the user's
# memory, to whatever URL the caller of the admin route chose.
KEY_ENV_PREFIX = "TANDEM_JOB_"


def key_env_allowed(name: str, named: frozenset[str] = frozenset()) -> bool:
    return name.startswith(KEY_ENV_PREFIX) or name in named


def endpoint_model(base_url: str, model: str, api_key_env: str | None = None,
                   named_env: frozenset[str] = frozenset()) -> JobModel:
    """An endpoint choice, checked: ValueError with a message a person can act on.
    `named_env`: the key variables the profile names (they are allowed too)."""
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"not an http(s) URL: {base_url!r}")
    if not model.strip():
        raise ValueError("an endpoint needs a model name")
    if api_key_env is not None and not api_key_env.replace("_", "").isalnum():
        raise ValueError(f"not an environment variable name: {api_key_env!r}")
    if api_key_env is not None and not key_env_allowed(api_key_env, named_env):
        raise ValueError(f"api_key_env {api_key_env!r}: a job's key comes from a variable "
                         f"named {KEY_ENV_PREFIX}... or one the profile names")
    return JobModel(base_url.rstrip("/"), model.strip(), api_key_env)


class JobModels:
    def __init__(self, path: Path, defaults: Mapping[str, JobModel] | None = None) -> None:
        self.path = path
        self.defaults = dict(defaults or {})
        self._lock = threading.Lock()

    def _chosen(self) -> dict[str, JobModel]:
        try:
            raw = json.loads(self.path.read_text())
            return {job: JobModel(**value) for job, value in raw.items()}
        except (OSError, ValueError, TypeError):
            return {}

    def get(self, job: str) -> JobModel:
        return self._chosen().get(job) or self.defaults.get(job) or INHERIT

    def set(self, job: str, model: JobModel) -> None:
        with self._lock:
            chosen = self._chosen()
            chosen[job] = model
            atomic_write(self.path, json.dumps({k: asdict(v) for k, v in chosen.items()},
                                               indent=1) + "\n")
