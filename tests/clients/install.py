"""The lane's clients at pinned versions, installed on first need into a git-ignored cache
(`.venv/real-clients`: `make setup` never installs them), with npm's and pip's output shown.

npm's four agents go in one prefix; aider in a venv of its own, since its pins clash with
vLLM's. A finished install leaves a stamp naming the pins, so a changed pin installs again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".venv" / "real-clients"
NPM_PINS = ("@openai/codex@0.171.0", "@qwen-code/qwen-code@0.24.4", "opencode-ai@1.18.33",
            "@anthropic-ai/claude-code@2.1.332")
AIDER_PIN = "aider-chat==0.86.2"
INSTALL_TIMEOUT_S = 900  # about a minute here; a slow registry gets room, never for ever
STAMP = CACHE / "installed.json"


def installed() -> bool:
    try:
        return json.loads(STAMP.read_text()) == {"npm": list(NPM_PINS), "pip": AIDER_PIN}
    except (OSError, ValueError):
        return False


def bin_path(name: str) -> Path:
    """A client's command: npm's four under node_modules/.bin, aider in its venv."""
    if name == "aider":
        return CACHE / "aider" / "bin" / "aider"
    return CACHE / "npm" / "node_modules" / ".bin" / name


def install(say: Callable[[str], None] = print) -> None:
    """Installs every pinned client (npm's, then aider's venv), output as it comes."""
    if shutil.which("npm") is None:
        raise RuntimeError("npm is not on PATH: the real-client lane needs Node.js 20+")
    CACHE.mkdir(parents=True, exist_ok=True)
    STAMP.unlink(missing_ok=True)
    npm = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CACHE / "npm"),
           *NPM_PINS]
    say(f"[clients] installing {' '.join(NPM_PINS)} ({' '.join(npm[:4])} ...)")
    _run(npm)
    venv = CACHE / "aider"
    say(f"[clients] installing {AIDER_PIN} into a venv of its own ({venv})")
    _run([sys.executable, "-m", "venv", "--clear", str(venv)])
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off",
          "-q", AIDER_PIN])
    STAMP.write_text(json.dumps({"npm": list(NPM_PINS), "pip": AIDER_PIN}))
    say("[clients] installed")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, timeout=INSTALL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} ... failed ({done.returncode})")
