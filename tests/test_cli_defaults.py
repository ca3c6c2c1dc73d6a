"""`tandem serve`'s defaults and flags, without the engine: the CLI runs with the app and
uvicorn replaced by recorders, so these check what it would start, and nothing starts."""

from __future__ import annotations

import socket
import sys
import types

import pytest
import uvicorn

from engine import profiles
from engine.profiles import load_profile, with_overrides
from server.cli import serve as cli_serve
from server.cli.main import build_parser, main

real_bind_listener = cli_serve.bind_listener


class Started:
    """What `tandem serve` handed the app and uvicorn."""

    def __init__(self) -> None:
        self.app_kwargs: dict = {}
        self.profile = None
        self.host: str | None = None
        self.port: int | None = None
        self.ran = False
        self.bound: tuple[str, int] | None = None
        self.sockets: list | None = None


@pytest.fixture
def started(monkeypatch, tmp_path) -> Started:
    seen = Started()
    fake_app = types.ModuleType("server.app")

    def create_app(profile, home, **kwargs):
        seen.profile, seen.app_kwargs = profile, kwargs
        return "the app"

    class Config:
        def __init__(self, app, host, port, **_kwargs) -> None:
            assert app == "the app"
            seen.host, seen.port = host, port

    class Server:
        def __init__(self, config) -> None:
            self.should_exit = False

        def run(self, sockets=None) -> None:
            seen.ran, seen.sockets = True, sockets

    def bind_listener(host, port):
        seen.bound = (host, port)
        return "the listener"

    fake_app.create_app = create_app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "server.app", fake_app)
    monkeypatch.setattr(uvicorn, "Config", Config)
    monkeypatch.setattr(uvicorn, "Server", Server)
    monkeypatch.setattr(cli_serve, "bind_listener", bind_listener)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))
    for name in ("TANDEM_API_KEY", "TANDEM_NIGHTLY_HOUR", "TANDEM_USER",
                 "TANDEM_TRUSTED_PROXIES"):
        monkeypatch.delenv(name, raising=False)
    return seen


def gpu(monkeypatch, present: bool) -> None:
    monkeypatch.setattr(profiles, "gpu_available", lambda: present)


def test_serve_listens_on_127_0_0_1_port_8000_by_default(started, monkeypatch):
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    gpu(monkeypatch, False)
    assert main(["serve"]) == 0
    assert started.ran and (started.host, started.port) == ("127.0.0.1", 8000)
    assert started.bound == ("127.0.0.1", 8000) and started.sockets == ["the listener"]


def test_serve_on_a_port_in_use_says_so_before_loading_the_engine(
        started, monkeypatch, capsys):
    monkeypatch.setattr(cli_serve, "bind_listener", real_bind_listener)
    gpu(monkeypatch, False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert started.profile is None and not started.ran  # no app was built, no engine loaded


def test_the_listener_holds_the_port_while_the_engine_loads():
    listener = real_bind_listener("127.0.0.1", 0)
    try:
        port = listener.getsockname()[1]
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
    finally:
        listener.close()


@pytest.mark.parametrize(("present", "name"), [(True, "chat"), (False, "smol")])
def test_serve_without_a_profile_serves_chat_with_a_gpu_and_smol_without(
        started, monkeypatch, present, name):
    gpu(monkeypatch, present)
    assert profiles.default_profile_name() == name
    assert main(["serve"]) == 0
    assert started.profile.name == name


class FakeNvml(types.ModuleType):
    def __init__(self, count: int | None) -> None:
        super().__init__("pynvml")
        self.count, self.shut = count, False

    def nvmlInit(self) -> None:  # noqa: N802 (NVML's names)
        if self.count is None:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.count

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True


@pytest.mark.parametrize(("count", "found"), [(1, True), (0, False), (None, False)],
                         ids=["one-gpu", "no-gpu", "no-driver"])
def test_a_gpu_is_what_nvml_counts(monkeypatch, count, found):
    nvml = FakeNvml(count)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert profiles.gpu_available() is found
    assert profiles.default_profile_name() == ("chat" if found else "smol")
    assert nvml.shut is (count is not None)


@pytest.mark.parametrize("mode", ["shadow", "on"])
def test_with_overrides_sets_the_writer_mode_and_keeps_the_memory_mode(mode):
    profile = load_profile("tiny")
    assert (profile.memory.mode, profile.memory.writer_mode) == ("on", "off")
    changed = with_overrides(profile, None, mode)
    assert (changed.memory.mode, changed.memory.writer_mode) == ("on", mode)
    assert with_overrides(profile).memory.writer_mode == "off"


@pytest.mark.parametrize(("flags", "writer"), [
    ([], "off"), (["--writer", "shadow"], "shadow"), (["--writer", "on"], "on")])
def test_serve_passes_writer_through_to_the_profile(started, flags, writer):
    assert main(["serve", "--profile", "tiny", *flags]) == 0
    assert started.profile.name == "tiny"
    assert started.profile.memory.writer_mode == writer
    assert started.profile.memory.mode == "on"


def test_nightly_hour_reaches_the_apps_memory_settings(started, monkeypatch):
    assert main(["serve", "--profile", "tiny", "--nightly-hour", "5"]) == 0
    assert started.app_kwargs["memory_settings"].nightly_hour == 5
    assert main(["serve", "--profile", "tiny"]) == 0
    assert started.app_kwargs["memory_settings"].nightly_hour == 3  # the default
    monkeypatch.setenv("TANDEM_NIGHTLY_HOUR", "7")
    assert main(["serve", "--profile", "tiny"]) == 0
    assert started.app_kwargs["memory_settings"].nightly_hour == 7
    assert main(["serve", "--profile", "tiny", "--nightly-hour", "5"]) == 0
    assert started.app_kwargs["memory_settings"].nightly_hour == 5  # the flag wins


def test_proxy_refuses_a_backend_that_is_no_url_or_does_not_answer_with_a_clear_line(
        started, monkeypatch, capsys):
    from bench.load.plain_vllm import free_port

    gpu(monkeypatch, False)
    assert main(["proxy", "--backend", "localhost:8001"]) == 2
    assert "give a URL (http://host:port)" in capsys.readouterr().err
    assert main(["proxy", "--backend", f"http://127.0.0.1:{free_port()}"]) == 2
    assert "its /v1/models cannot be read" in capsys.readouterr().err
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    assert main(["proxy", "--backend", "http://127.0.0.1:1",
                 "--backend-key-env", "NO_SUCH_KEY_VAR"]) == 2
    assert "that variable is not set" in capsys.readouterr().err
    assert not started.ran  # nothing served


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_proxy_takes_the_backend_with_or_without_v1(started, monkeypatch, suffix):
    """`--backend http://host:port/v1` is the base URL every OpenAI client is given: it
    names the same server as the bare form (it read /v1/v1/models: "cannot be read")."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[str] = []

    class Models(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            asked.append(self.path)
            found = self.path == "/v1/models"
            body = json.dumps({"object": "list", "data": [
                {"id": "tiny-backend", "object": "model", "owned_by": "vllm"}]}
                if found else {"detail": "Not Found"}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    gpu(monkeypatch, False)
    try:
        assert main(["proxy", "--profile", "tiny", "--writer", "off",
                     "--backend", base + suffix]) == 0
    finally:
        server.shutdown()
    assert asked == ["/v1/models"]
    engine = started.app_kwargs["engine"]
    assert engine.base_url == base and engine.model == "tiny-backend"


def test_serve_takes_any_user_a_request_may_name_and_announces_their_folder(
        started, monkeypatch, capsys):
    from server.access.user_names import user_folder
    from server.mcp import discovery

    announced = []
    monkeypatch.setattr(discovery, "announce", lambda home, url, user, uds=None:
                        announced.append(user))
    assert main(["serve", "--profile", "tiny", "--user", "José"]) == 0
    # the name, as the engine's own user: each request maps it to its folder itself
    assert started.app_kwargs["memory_settings"].user_name == "josé"
    assert announced == [user_folder("josé")]  # what `tandem mcp --user josé` serves as
    for name, why in (("a\x01b", "control character"), ("x" * 129, "longer than")):
        assert main(["serve", "--profile", "tiny", "--user", name]) == 2
        assert why in capsys.readouterr().err
    monkeypatch.setenv("TANDEM_USER", "a\tb")
    assert main(["serve", "--profile", "tiny"]) == 2
    assert "TANDEM_USER" in capsys.readouterr().err
