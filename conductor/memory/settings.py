"""Server-wide memory settings: who the engine's own user is, the proxies trusted to relay
a user, the nightly hour, and the replicas' shared root, coordination service and leases.
The CLI and the environment set them; `MemoryServices` holds them (conductor/memory/services.py
imports them from here, where the server has always found them)."""

from __future__ import annotations

import getpass
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class MemorySettings:
    """Server-wide memory settings (the CLI and environment set them)."""

    user_name: str = field(default_factory=lambda: os.environ.get("TANDEM_USER")
                           or _os_user())
    trusted_proxies: frozenset[str] = frozenset(
        a.strip() for a in os.environ.get("TANDEM_TRUSTED_PROXIES", "").split(",") if a.strip())
    # The hour (local time) of the daily nightly job: INDEX.md, archive expiry, staleness.
    nightly_hour: int = field(default_factory=lambda: int(
        os.environ.get("TANDEM_NIGHTLY_HOUR") or 3))
    # Replicas (README: More than one machine): the notes root every replica shares, the
    # coordination service's address, this replica's name (the lease holder's), the
    # lease's ttl. Unset: one machine, the notes in $TANDEM_HOME/memory, no lease.
    shared_memory: Path | None = field(default_factory=lambda: Path(
        os.environ["TANDEM_SHARED_MEMORY"]) if os.environ.get("TANDEM_SHARED_MEMORY") else None)
    etcd_url: str | None = field(default_factory=lambda: os.environ.get("TANDEM_ETCD") or None)
    replica: str = field(default_factory=lambda: os.environ.get("TANDEM_REPLICA")
                         or socket.gethostname())
    lease_ttl_s: float = field(default_factory=lambda: float(
        os.environ.get("TANDEM_LEASE_TTL_S") or 10))
    lease_idle_s: float = field(default_factory=lambda: float(
        os.environ.get("TANDEM_LEASE_IDLE_S") or 60))


def _os_user() -> str:
    try:
        name = getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return "local"
    return re.sub(r"[^a-z0-9_-]", "-", name.lower()) or "local"
