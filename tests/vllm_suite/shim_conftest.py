"""Tandem's stand-in for vLLM's `tests/conftest.py`: the selection, and no downloads.

Every test file under `tests/entrypoints/{openai,serve}/` must appear in the selection
(`tests/vllm_suite/selection.toml` of the Tandem repository): selected, with the tests
it excludes and why, or excluded whole with the reason. A file in neither list is an
error, so a new vLLM version's tests cannot be skipped without a word. A test the
selection reruns (a timing this machine can miss) is marked for pytest-rerunfailures.
"""

from __future__ import annotations

import fnmatch
import inspect
import os
import re
import tempfile
import tomllib
from pathlib import Path

import pytest

from tests import utils as shim

SELECTION = Path(os.environ["TANDEM_REPO"]) / "tests" / "vllm_suite" / "selection.toml"


def _load() -> dict:
    with open(SELECTION, "rb") as f:
        return tomllib.load(f)


ENTRYPOINTS = Path(__file__).parent / "entrypoints"


def _relative(path: Path) -> str:
    return str(Path(path).relative_to(ENTRYPOINTS))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Files excluded whole are not imported (many need packages or models not here)."""
    if collection_path.suffix == ".py" and collection_path.is_relative_to(ENTRYPOINTS):
        return _relative(collection_path) in _load()["excluded_files"] or None
    return None


def _exclusion(selection: dict, path: str, name: str) -> str | None:
    """The reason `name` of `path` is excluded, or None when it is selected."""
    reasons = selection["reasons"]
    if path in selection["excluded_files"]:
        return reasons[selection["excluded_files"][path]]
    for pattern, reason in selection["files"][path].get("exclude", {}).items():
        if fnmatch.fnmatchcase(name, pattern):
            return reasons[reason]
    return None


RERUNS = 2


def _rerun(selection: dict, path: str, name: str) -> str | None:
    """Why a selected test is run again when it fails (a timing assumption this machine
    can miss), or None."""
    for pattern, reason in selection["files"][path].get("rerun", {}).items():
        if fnmatch.fnmatchcase(name, pattern):
            return selection["reruns"][reason]
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selection = _load()
    known = set(selection["files"]) | set(selection["excluded_files"])
    unknown = sorted({_relative(i.path) for i in items} - known)
    if unknown:
        raise pytest.UsageError(f"not in {SELECTION.name}, neither selected nor excluded "
                                f"with a reason: {unknown}")
    kept, dropped = [], []
    for item in items:
        reason = _exclusion(selection, _relative(item.path), item.name)
        (kept if reason is None else dropped).append(item)
        if reason is not None:
            EXCLUDED[reason] = EXCLUDED.get(reason, 0) + 1
        elif (why := _rerun(selection, _relative(item.path), item.name)) is not None:
            item.add_marker(pytest.mark.flaky(reruns=RERUNS))  # pytest-rerunfailures
            RERUN[why] = RERUN.get(why, 0) + 1
    names = {getattr(i.module, "MODEL_NAME", None) for i in kept}
    for item in kept:  # a test that starts its own server names its model in its body
        names |= set(re.findall(r'model_name = "([^"]+)"', inspect.getsource(item.obj)))
    shim.MODEL_NAMES[:] = sorted(n for n in names if n)
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)


EXCLUDED: dict[str, int] = {}  # reason -> tests of the selected files it excludes
RERUN: dict[str, int] = {}  # reason -> selected tests run again if they fail


def pytest_terminal_summary(terminalreporter) -> None:
    """What the selected files' excluded tests are excluded for (whole files apart), and
    which run again if they fail."""
    if EXCLUDED:
        terminalreporter.section("excluded from the selected files, by reason")
        for reason, count in sorted(EXCLUDED.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{count:4d}  {reason}")
    if RERUN:
        terminalreporter.section(f"run again if they fail (up to {RERUNS} times), by reason")
        for reason, count in sorted(RERUN.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{count:4d}  {reason}")


def pytest_configure(config: pytest.Config) -> None:
    # Modules download LoRA adapters from the hub in fixtures their server fixture takes;
    # no selected test uses one (LoRA is excluded), so the download answers a folder.
    from vllm.transformers_utils import repo_utils

    class _NoHub:
        def snapshot_download(self, *args, **kwargs) -> str:
            return tempfile.mkdtemp(prefix="no-hub-")

    repo_utils.hf_api = lambda *a, **k: _NoHub()
    _served_tokenizer()


def _served_tokenizer() -> None:
    """A test that loads "its model's" tokenizer gets the served model's: the server
    serves tiny-qwen3 under the module's model name, so that is the tokenizer whose
    ids and counts the server's answers carry."""
    import transformers
    import vllm.tokenizers

    served = str(shim.served_model_dir())
    get_tokenizer = vllm.tokenizers.get_tokenizer
    from_pretrained = transformers.AutoTokenizer.from_pretrained

    def served_if_ours(args: tuple, kwargs: dict, key: str) -> tuple[tuple, dict]:
        if args and str(args[0]) in shim.MODEL_NAMES:
            args = (served, *args[1:])
        elif str(kwargs.get(key)) in shim.MODEL_NAMES:
            kwargs = {**kwargs, key: served}
        return args, kwargs

    def vllm_get_tokenizer(*args, **kwargs):
        args, kwargs = served_if_ours(args, kwargs, "tokenizer_name")
        return get_tokenizer(*args, **kwargs)

    def auto_from_pretrained(*args, **kwargs):
        args, kwargs = served_if_ours(args, kwargs, "pretrained_model_name_or_path")
        return from_pretrained(*args, **kwargs)

    vllm.tokenizers.get_tokenizer = vllm_get_tokenizer
    transformers.AutoTokenizer.from_pretrained = auto_from_pretrained
