"""CPU seconds of a server's process tree, found by the port it listens on: the server's
own process and its children (the engine core and its worker), so that a load round's
cost splits into what the server's Python spent and what the engine did. On a CPU
machine both take the same cores: a round's wall is about their sum over the cores."""

from __future__ import annotations

from urllib.parse import urlsplit

import psutil


def server_tree(base_url: str) -> psutil.Process | None:
    """The process listening on `base_url`'s port (None when it cannot be told)."""
    port = urlsplit(base_url).port
    try:
        for conn in psutil.net_connections("tcp"):
            if (conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port
                    and conn.pid):
                return psutil.Process(conn.pid)
    except psutil.Error:
        return None
    return None


def cpu_seconds(process: psutil.Process) -> tuple[float, float]:
    """(the process's own user + system seconds, its children's, recursively)."""
    own = process.cpu_times()
    children = 0.0
    for child in process.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # gone since the listing
            continue
        children += times.user + times.system
    return own.user + own.system, children
