"""The real-client lane's fixtures: the pinned clients (installed on first need, progress
shown) and one real `tandem serve --profile tiny-agent` for the whole lane, memory on,
answering from a script file each test rewrites."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients.install import INSTALL_TIMEOUT_S, install, installed

START_TIMEOUT_S = 600  # a cold engine on two busy cores took 120 s here


@pytest.fixture(scope="session")
def clients(pytestconfig) -> None:
    """The pinned clients, installed here the first time the lane runs (about a minute;
    not in `make setup`), npm's and pip's output shown as it comes."""
    if installed():
        return
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with (capture.global_and_fixture_disabled() if capture  # its progress, as it goes
          else contextlib.nullcontext()):
        print(f"\n[tests] the real clients are not installed: installing them (up to "
              f"{INSTALL_TIMEOUT_S} s)", flush=True)
        try:
            install()
        except RuntimeError as exc:
            pytest.skip(f"the real clients cannot be installed: {exc}")


@dataclass
class AgentServer:
    base_url: str
    rules: Path  # $TANDEM_SCRIPT_FILE: read at each request
    log: Path  # the server's output: its access log among it
    home: Path  # its $TANDEM_HOME: `tandem mcp` finds the server through server.json there

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()


@pytest.fixture(scope="session")
def agent_server(tmp_path_factory) -> AgentServer:
    """`tandem serve` as a user starts it, on the agent-sized scripted profile."""
    from bench.load.plain_vllm import free_port
    from bench.replicas.cluster import wait_ready
    from engine.home import tandem_home

    root = tmp_path_factory.mktemp("agent-server")
    home = root / "home"
    home.mkdir()
    (home / "models").symlink_to(tandem_home() / "models", target_is_directory=True)
    rules, log = root / "rules.json", root / "serve.log"
    rules.write_text("[]")
    port = free_port()
    env = {**os.environ, "TANDEM_HOME": str(home), "TANDEM_SCRIPT_FILE": str(rules)}
    tandem = Path(sys.executable).parent / "tandem"
    with log.open("w") as out:
        server = subprocess.Popen([str(tandem), "serve", "--profile", "tiny-agent",
                                   "--port", str(port)], stdout=out,
                                  stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/readyz", server, log, START_TIMEOUT_S)
        yield AgentServer(base, rules, log, home)
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
