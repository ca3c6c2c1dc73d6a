"""The replicas lane's cluster on loopback: etcd, N `tandem serve` replicas on the tiny
profile sharing one notes root, and vllm-router (consistent_hash) in front. The lane's
own set-up installs what it needs: Debian's etcd-server (apt, as root) and vllm-router
0.1.17 from PyPI into the git-ignored `.venv/router` (its own venv: its pins are not
vLLM's). Used by the lane (tests/replicas/conftest.py) and the bench's soak over replicas
(bench/replicas/soak.py)."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
ROUTER_VENV = REPO / ".venv" / "router"
ROUTER_PIN = "vllm-router==0.1.17"
ROUTE_HEADER = "X-User-ID"  # the first header consistent_hash keys on that Tandem checks
START_TIMEOUT_S = 600


class SetupError(RuntimeError):
    """What the lane cannot install here; the lane skips with it."""


def _say(message: str) -> None:
    print(f"[replicas] {message}", file=sys.stderr, flush=True)


def ensure_etcd() -> str:
    """The etcd binary, installed from Debian (etcd-server) when missing and root."""
    found = shutil.which("etcd")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SetupError("no etcd, and no root to apt-get install etcd-server")
    _say("installing Debian's etcd-server (the lane's coordination service)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run("apt-get update -qq && apt-get install -y -qq etcd-server",
                          shell=True, env=env, timeout=600)
    if done.returncode != 0 or not shutil.which("etcd"):
        raise SetupError("etcd-server could not be installed with apt-get")
    return shutil.which("etcd") or "etcd"


def ensure_router() -> Path:
    """vllm-router's command, installed from PyPI into .venv/router when missing."""
    command = ROUTER_VENV / "bin" / "vllm-router"
    if command.exists():
        return command
    _say(f"installing {ROUTER_PIN} into {ROUTER_VENV} (its Rust router ships in the wheel)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(ROUTER_VENV)], check=True,
                       timeout=300)
        subprocess.run([str(ROUTER_VENV / "bin" / "pip"), "install", "-q", ROUTER_PIN],
                       check=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(ROUTER_VENV, ignore_errors=True)
        raise SetupError(f"{ROUTER_PIN} could not be installed: {exc}") from None
    return command


def _one_secret_keys(home: Path, users: list[str]) -> dict[str, str]:
    """keys.json in KeyStore's format with one scrypt hash for every user's key."""
    import hashlib
    import json
    import secrets
    from dataclasses import asdict
    from datetime import UTC, datetime

    from conductor.memory.types import atomic_write
    from server.access.keys import KEYS_FILE, PREFIX, SCRYPT, KeyEntry

    secret, salt = secrets.token_urlsafe(24), os.urandom(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, **SCRYPT).hex()
    made = datetime.now(UTC).isoformat(timespec="seconds")
    entries, keys, ids = [], {}, set()
    for user in users:
        key_id = secrets.token_hex(4)
        while key_id in ids:
            key_id = secrets.token_hex(4)
        ids.add(key_id)
        entries.append(KeyEntry(user, key_id, salt.hex(), digest, made))
        keys[user] = f"{PREFIX}-{key_id}-{secret}"
    atomic_write(home / KEYS_FILE, json.dumps({"keys": [asdict(e) for e in entries]},
                                              indent=2) + "\n", mode=0o600)
    return keys


def free_port() -> int:
    from bench.load.plain_vllm import free_port as free

    return free()


def wait_ready(url: str, process: subprocess.Popen, log: Path, timeout: float,
               status: int = 200) -> None:
    """Wait until `url` answers `status`; raise with the end of `log` if `process` exits
    first, or after `timeout` seconds (the real-client lane's server start uses it too)."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited ({process.returncode}): "
                               f"{log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=5).status_code == status:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not ready in {timeout:.0f} s")
        time.sleep(0.5)


@dataclass
class Replica:
    name: str
    home: Path
    port: int
    log: Path
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Cluster:
    """etcd, the replicas and the router, started by `start` and stopped by `stop`."""

    root: Path
    replicas: int = 2
    profile: str = "tiny"
    lease_ttl_s: float = 3.0
    lease_idle_s: float = 5.0
    health_interval_s: int = 1
    etcd_url: str = ""
    router_url: str = ""
    shared: Path = field(init=False)
    nodes: list[Replica] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # user: API key (add_keys)
    _etcd: subprocess.Popen | None = None
    _router: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.shared = self.root / "shared-memory"  # the notes root every replica reaches
        self.shared.mkdir(parents=True, exist_ok=True)

    # -- etcd ------------------------------------------------------------------------
    def start_etcd(self) -> None:
        etcd = ensure_etcd()
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        log = self.root / "etcd.log"
        with log.open("w") as out:
            self._etcd = subprocess.Popen(
                [etcd, "--data-dir", str(self.root / "etcd"), "--name", "lane",
                 "--listen-client-urls", self.etcd_url, "--advertise-client-urls",
                 self.etcd_url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", f"lane=http://127.0.0.1:{peer}"],
                stdout=out, stderr=subprocess.STDOUT)
        wait_ready(f"{self.etcd_url}/health", self._etcd, log, 60)

    # -- replicas --------------------------------------------------------------------
    def add_keys(self, users: list[str], one_secret: bool = False) -> dict[str, str]:
        """A key per user, in the first replica's home; every replica gets the same
        keys file (README: copy keys.json to each replica's home). `one_secret`: every
        key shares one secret and salt behind its own key id, so the file takes one
        scrypt instead of one a user (the soak's 1,000 keys: minutes here); each replica
        still checks each key with scrypt on its first request, as with any keys file."""
        from server.access.keys import KeyStore

        home = self.nodes[0].home
        if one_secret:
            keys = _one_secret_keys(home, users)
        else:
            store = KeyStore(home)
            keys = {user: store.add(user) for user in users}
        first = users[0]
        assert KeyStore(home).label_for(keys[first]) == first, "keys.json not readable"
        for node in self.nodes[1:]:
            shutil.copy2(home / "keys.json", node.home / "keys.json")
        return keys

    def make_replicas(self) -> None:
        from engine.home import tandem_home

        for i in range(self.replicas):
            name = f"replica-{chr(ord('a') + i)}"
            home = self.root / name
            home.mkdir(exist_ok=True)
            models = home / "models"
            if not models.exists():
                models.symlink_to(tandem_home() / "models", target_is_directory=True)
            self.nodes.append(Replica(name, home, free_port(), self.root / f"{name}.log"))

    def env_of(self, node: Replica) -> dict[str, str]:
        return {**os.environ, "TANDEM_HOME": str(node.home),
                "TANDEM_SHARED_MEMORY": str(self.shared), "TANDEM_ETCD": self.etcd_url,
                "TANDEM_REPLICA": node.name, "TANDEM_LEASE_TTL_S": str(self.lease_ttl_s),
                "TANDEM_LEASE_IDLE_S": str(self.lease_idle_s),
                "TANDEM_ROUTE_HEADER": ROUTE_HEADER.lower()}

    def start_replica(self, node: Replica) -> None:
        tandem = Path(sys.executable).parent / "tandem"
        with node.log.open("a") as out:
            node.process = subprocess.Popen(
                [str(tandem), "serve", "--profile", self.profile, "--port", str(node.port)],
                stdout=out, stderr=subprocess.STDOUT, env=self.env_of(node),
                start_new_session=True)

    def wait_replica(self, node: Replica) -> None:
        assert node.process is not None
        wait_ready(f"{node.url}/readyz", node.process, node.log, START_TIMEOUT_S)

    def holder(self, user: str) -> str | None:
        """The replica that holds the user's lease in etcd now (None: no one)."""
        key = base64.b64encode(f"tandem/lease/{user}".encode()).decode()
        kvs = httpx.post(f"{self.etcd_url}/v3/kv/range", json={"key": key},
                         timeout=10).json().get("kvs")
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def node(self, name: str) -> Replica:
        return next(n for n in self.nodes if n.name == name)

    def kill_replica(self, node: Replica) -> None:
        """kill -9: no lease given back, no file closed."""
        if node.process is not None and node.process.poll() is None:
            # the whole process group, the engine core with it: a machine that dies
            os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(timeout=30)

    # -- router ----------------------------------------------------------------------
    def start_router(self) -> None:
        router = ensure_router()
        port = free_port()
        self.router_url = f"http://127.0.0.1:{port}"
        log = self.root / "router.log"
        # one failed check takes a replica out (a killed one refuses the connection at
        # once); a live one gets 3 s to answer, as a 2-core machine running two engines
        # and their idle jobs can be slow to, and one slow answer would take it out
        with log.open("w") as out:
            self._router = subprocess.Popen(
                [str(router), "--host", "127.0.0.1", "--port", str(port), "--worker-urls",
                 *[n.url for n in self.nodes], "--policy", "consistent_hash",
                 "--health-check-interval-secs", str(self.health_interval_s),
                 "--health-failure-threshold", "1", "--health-check-timeout-secs", "3",
                 "--health-check-endpoint", "/health"],
                stdout=out, stderr=subprocess.STDOUT)
        wait_ready(f"{self.router_url}/health", self._router, log, 120)

    def start(self) -> None:
        self.start_etcd()
        self.make_replicas()
        # two engines start one after the other: both at once on two cores took longer
        for node in self.nodes:
            self.start_replica(node)
            self.wait_replica(node)
        self.start_router()

    def stop(self) -> None:
        """Stop every process `start` started, each replica's whole process group (its
        engine core too); safe to call twice and after a start that failed halfway."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGTERM)
        for process in [self._router, self._etcd]:
            if process is not None and process.poll() is None:
                process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(node.process.pid, signal.SIGKILL)
                    node.process.wait(timeout=30)
        for process in [self._router, self._etcd]:
            if process is not None:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
