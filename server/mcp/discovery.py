"""How a command finds the running server: `$TANDEM_HOME/server.json`.

`tandem serve` writes it (atomically, 0600) when it starts serving and removes it when it
stops: its address, its process id and its own user (the user of a request without a
key). A file left by a server that was killed names a process that is gone, and is
treated as no server. Only one process writes a memory folder's search index (embedded
Qdrant locks its folder), so `tandem mcp` forwards its calls to the server this file
names rather than open the folder itself.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conductor.memory.types import atomic_write

FILE = "server.json"


@dataclass(frozen=True)
class RunningServer:
    url: str  # the base URL, without /mcp
    pid: int
    user: str  # the server's own user: a request without a key is theirs
    uds: str | None = None  # a Unix socket to connect through (serve --uds)


def local_url(host: str, port: int) -> str:
    """The URL this machine reaches a server listening on host:port by."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def announce(home: Path, url: str, user: str, uds: str | None = None) -> None:
    atomic_write(home / FILE, json.dumps({"url": url, "pid": os.getpid(), "user": user,
                                          "uds": uds}) + "\n")


def withdraw(home: Path) -> None:
    """Remove the file, when it is still this process's (another server may have started
    on the same home since and written its own)."""
    found = _read(home)
    if found is not None and found.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            (home / FILE).unlink()


@contextlib.contextmanager
def announced(home: Path, url: str, user: str, uds: str | None = None) -> Iterator[None]:
    """The file there while the block runs (the server serves)."""
    announce(home, url, user, uds)
    try:
        yield
    finally:
        withdraw(home)


def running(home: Path) -> RunningServer | None:
    """The server the file names, if its process is alive."""
    found = _read(home)
    if found is None or found.pid == os.getpid() or not _alive(found.pid):
        return None
    return found


def _read(home: Path) -> RunningServer | None:
    try:
        raw = json.loads((home / FILE).read_text(encoding="utf-8"))
        return RunningServer(url=str(raw["url"]), pid=int(raw["pid"]), user=str(raw["user"]),
                             uds=raw.get("uds") or None)
    except (OSError, ValueError, KeyError, TypeError):  # none, or not ours to read
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's: not a server of this home
        return False
    return True
