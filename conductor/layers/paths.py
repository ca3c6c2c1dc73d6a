"""Where one user's memory layers live: ``$TANDEM_HOME/memory/layers/<user>/``.

layers/<user>/
  core/AGENT.md, USER.md, SOUL.md      the operator's; in every prompt
  WORKING_MEMORY.md                    fixed sections; in every prompt
  semantic/facts.md, preferences.md, projects.md
  history/turns/YYYY/MM/DD/<seq>.json  one turn a file, never deleted
  history/quarantine/                  turn files that did not parse, as they were
  state/                               checkpoint, replay window, job state
  runs/YYYY/MM/DD/                     what the background jobs did
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conductor.storage.paths import valid_user

LAYERS_DIR = "layers"


@dataclass(frozen=True)
class LayerFiles:
    """Paths of one user's layers under a memory root."""

    root: Path
    user: str

    def __post_init__(self) -> None:
        if not valid_user(self.user):
            raise ValueError(f"not a user name the store can file under: {self.user!r}")

    @property
    def user_dir(self) -> Path:
        return self.root / LAYERS_DIR / self.user

    @property
    def core_dir(self) -> Path:
        return self.user_dir / "core"

    @property
    def working_memory(self) -> Path:
        return self.user_dir / "WORKING_MEMORY.md"

    @property
    def semantic_dir(self) -> Path:
        return self.user_dir / "semantic"

    @property
    def turns_dir(self) -> Path:
        return self.user_dir / "history" / "turns"

    @property
    def quarantine_dir(self) -> Path:
        return self.user_dir / "history" / "quarantine"

    @property
    def state_dir(self) -> Path:
        return self.user_dir / "state"

    @property
    def runs_dir(self) -> Path:
        return self.user_dir / "runs"

    @property
    def lock_path(self) -> Path:
        return self.root / "locks" / f"{self.user}.layers.lock"


def layer_users(root: Path) -> list[str]:
    """The users that have layers under a memory root."""
    folder = root / LAYERS_DIR
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and valid_user(p.name))
