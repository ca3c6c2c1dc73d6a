"""$TANDEM_HOME (default ~/.tandem): the built models and, later, memory."""

from __future__ import annotations

import os
from pathlib import Path


def tandem_home() -> Path:
    return Path(os.environ.get("TANDEM_HOME") or "~/.tandem").expanduser()
